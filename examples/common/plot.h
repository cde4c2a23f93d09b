// Two pictures the examples save: an attention heat map and loss curves.
//
//   heatmap_png("attn.png", {.values = weights, .row_labels = query_tokens, .col_labels = key_tokens,
//                            .title = "layer 0, head 1", .row_title = "query position",
//                            .col_title = "key position", .value_title = "attention weight",
//                            .masked = causal_future});
//   line_plot_png("loss.png", {{"train", steps, train_loss}, {"validation", steps, val_loss}},
//                 "loss", "step", "cross-entropy");
//
// Every plot names its axes: the titles are required. Axes end at the data (a loss curve of
// 1200 steps ends at 1200), and a heat map's colour bar starts at 0 unless a value is negative.
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

// A cell hidden by a mask (a future key under the causal mask) has no weight at all, which is not
// the same as weight 0: it is drawn grey and hatched, colours that are not on the colour map, and
// the legend under the colour bar says "masked".
inline constexpr Color kMaskedFill{214, 214, 214};
inline constexpr Color kMaskedHatch{150, 150, 150};

// What a heat map shows. values[i][j] is row i, column j, e.g. how much query i attends to key j.
struct Heatmap {
  std::vector<std::vector<double>> values{};
  // Either empty (no labels) or one per row / column; a label is usually one token, and white
  // space in it is drawn as a visible symbol (' ' as '␣').
  std::vector<std::string> row_labels{}, col_labels{};
  std::string title{};
  // The axis titles, all three required: what a row is (drawn up the left side), what a column is
  // (above the column labels) and what a colour means (beside the colour bar).
  std::string row_title{}, col_title{}, value_title{};
  // Either empty (nothing masked) or one flag per value: true where a mask hid the cell. The value
  // there is ignored.
  std::vector<std::vector<bool>> masked{};
};

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
  int row_title_left = 0;                                            // the turned row title's left edge
  int col_title_top = 0;                                             // the column title's top edge
  int value_title_left = 0;                                          // the turned colour bar title's left edge
  bool any_masked = false;                                           // then the "masked" legend is drawn
  int masked_key_left = 0, masked_key_top = 0, masked_key_side = 0;  // its grey, hatched square
  int title_scale = 2;  // 1 when the title is too long to draw at twice the size
  // The colour scale: colormap(0) at lo, colormap(1) at hi. [lo, hi] is the smallest range that
  // holds 0 and every value: for attention weights, 0 to the largest. Masked cells do not count.
  double lo = 0, hi = 0;
};

// Checks the heat map (throwing std::invalid_argument) and places its parts.
HeatmapLayout heatmap_layout(const Heatmap& map);

// The heat map with its values as colours: rows labelled at the left, columns on top, a colour
// bar from lo to hi at the right, and the masked cells grey and hatched. The image is at most
// about 1200 pixels on each side; cells shrink to fit.
Image heatmap_image(const Heatmap& map);
void heatmap_png(const std::string& path, const Heatmap& map);

// One curve of a line plot. Its colour is chosen by its position in the list (series_color).
struct Series {
  std::string name;  // shown in the legend
  std::vector<double> x, y;
};

Color series_color(std::size_t index);

// Round tick values covering [lo, hi]: steps of 1, 2 or 5 times a power of ten, about `target`
// of them, the first at or below lo and the last at or above hi.
std::vector<double> nice_ticks(double lo, double hi, int target = 6);

// The range an axis shows, [lo, hi], and its round ticks, all inside it (at least four of them when
// the range allows). The range is the data's own: only a single value, which has no extent, is
// widened around itself.
struct Axis {
  double lo = 0, hi = 0;
  std::vector<double> ticks;
};
Axis data_axis(double lo, double hi);

// Where a line plot's parts go, from the data and the texts alone.
struct LinePlotLayout {
  int width = 0, height = 0;
  int plot_left = 0, plot_top = 0, plot_width = 0, plot_height = 0;  // the framed area
  Axis x, y;  // x.lo is at the left edge of the framed area, x.hi at its right edge; y likewise
  // The legend's box: inside the frame, in the corner where it hides the fewest points of the
  // curves, or, when it would hide some in every corner, to the right of a narrower frame.
  int legend_left = 0, legend_top = 0, legend_width = 0, legend_height = 0;
  bool legend_outside = false;
};

// Checks the series and the axis titles (throwing std::invalid_argument) and places the parts.
LinePlotLayout line_plot_layout(const std::vector<Series>& series, const std::string& title, const std::string& x_label,
                                const std::string& y_label);

// Curves over shared axes with round ticks, a light grid and a legend, e.g. train and validation
// loss against the step. Every value must be finite and every series needs as many x as y values
// and at least one point (a single point is drawn as a dot). x_label and y_label, the axis
// titles, must not be empty.
Image line_plot_image(const std::vector<Series>& series, const std::string& title, const std::string& x_label,
                      const std::string& y_label);
void line_plot_png(const std::string& path, const std::vector<Series>& series, const std::string& title,
                   const std::string& x_label, const std::string& y_label);

}  // namespace ag::plot
