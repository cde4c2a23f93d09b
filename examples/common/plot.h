// Two pictures the examples save: an attention heat map and loss curves.
//
//   heatmap_png("attn.png", weights, query_tokens, key_tokens, "layer 0, head 1");
//   line_plot_png("loss.png", {{"train", steps, train_loss}, {"validation", steps, val_loss}},
//                 "loss", "step", "cross-entropy");
//
// Labels are UTF-8 and drawn with GNU Unifont (font.h), so Chinese tokens show as themselves.
// Bad input throws std::invalid_argument; a file that cannot be written, std::runtime_error.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "image.h"

namespace ag::plot {

// The sequential colour map of the heat map, dark violet (t = 0) through teal to yellow (t = 1),
// close to matplotlib's viridis: brightness rises steadily, so a bright cell always means a larger
// value, and it reads in grey scale and to colour-blind eyes. t is clamped to [0, 1].
Color colormap(double t);

// Where heat map cells, labels and the colour bar go, worked out from the sizes and labels alone.
struct HeatmapLayout {
  int width = 0, height = 0;        // the whole image
  int cell = 0;                     // side of a square cell, pixels
  int grid_left = 0, grid_top = 0;  // top-left corner of cell (row 0, column 0)
  int label_scale = 1;              // glyph scale of the row and column labels
  int row_label_every = 1;          // label every k-th row when cells are smaller than a glyph
  int col_label_every = 1;
  bool col_labels_turned = false;  // column labels read bottom to top when wider than a cell
  int colorbar_left = 0, colorbar_top = 0, colorbar_height = 0;
  int title_scale = 2;    // 1 when the title is too long to draw at twice the size
  double lo = 0, hi = 0;  // the smallest and largest value: colormap(0) and colormap(1)
};

// Checks the arguments of heatmap_image (throwing std::invalid_argument) and places its parts.
HeatmapLayout heatmap_layout(const std::vector<std::vector<double>>& values, const std::vector<std::string>& row_labels,
                             const std::vector<std::string>& col_labels, const std::string& title);

// An attention map: values[i][j] is how much query i (row, labelled at the left) attends to key j
// (column, labelled on top). Colours span the smallest to the largest value, shown on a colour bar
// at the right. A label vector is either empty (no labels) or has one label per row / column;
// a label is usually one token, and white space in it is drawn as a visible symbol (' ' as '␣').
// The image is at most about 1200 pixels on each side; cells shrink to fit.
Image heatmap_image(const std::vector<std::vector<double>>& values, const std::vector<std::string>& row_labels,
                    const std::vector<std::string>& col_labels, const std::string& title);
void heatmap_png(const std::string& path, const std::vector<std::vector<double>>& values,
                 const std::vector<std::string>& row_labels, const std::vector<std::string>& col_labels,
                 const std::string& title);

// One curve of a line plot. Its colour is chosen by its position in the list (series_color).
struct Series {
  std::string name;  // shown in the legend
  std::vector<double> x, y;
};

Color series_color(std::size_t index);

// Round tick values covering [lo, hi]: steps of 1, 2 or 5 times a power of ten, about `target`
// of them, the first at or below lo and the last at or above hi (so they also give the axis range).
std::vector<double> nice_ticks(double lo, double hi, int target = 6);

// Curves over shared axes with round ticks, a light grid and a legend, e.g. train and validation
// loss against the step. Every value must be finite and every series needs as many x as y values
// and at least one point (a single point is drawn as a dot).
Image line_plot_image(const std::vector<Series>& series, const std::string& title, const std::string& x_label,
                      const std::string& y_label);
void line_plot_png(const std::string& path, const std::vector<Series>& series, const std::string& title,
                   const std::string& x_label, const std::string& y_label);

}  // namespace ag::plot
