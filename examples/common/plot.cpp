#include "plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>

#include "font.h"

namespace ag::plot {

namespace {

constexpr int kPad = 16;  // white margin around everything
constexpr int kGap = 6;   // between a label and what it labels
constexpr int kTickLength = 5;
constexpr Color kInk{33, 33, 33};
constexpr Color kFrame{110, 110, 110};
constexpr Color kGridLine{228, 228, 228};

// --- heat map ---------------------------------------------------------------------------------

constexpr int kHeatmapMaxSide = 1200;
constexpr int kMaxCell = 48;       // a 3x3 map should not have 400-pixel cells
constexpr int kBigLabelCell = 40;  // cells this wide hold a label drawn at scale 2 (32 px)
constexpr int kBarGap = 20, kBarWidth = 18, kMinBarHeight = 120;

// A token as it should be shown: white space and control characters become visible symbols,
// since a space key next to a "t" key is exactly what a learner wants to see in an attention map.
std::u32string visible_token(const std::string& label) {
  std::u32string out;
  for (char32_t c : decode_utf8(label)) {
    if (c == U' ')
      out += U'\u2423';  // ␣ open box
    else if (c == U'\n')
      out += U'\u21B5';  // ↵
    else if (c == U'\t')
      out += U'\u21E5';  // ⇥
    else if (c < 0x20)
      out += char32_t{0x2400} + c;  // the Control Pictures block: ␀ ␁ ...
    else
      out += c;
  }
  return out;
}

std::vector<std::u32string> visible_tokens(const std::vector<std::string>& labels) {
  std::vector<std::u32string> out;
  for (const std::string& label : labels) out.push_back(visible_token(label));
  return out;
}

int widest(const std::vector<std::u32string>& texts, int scale) {
  int w = 0;
  for (const std::u32string& t : texts) w = std::max(w, text_width(t, scale));
  return w;
}

int title_scale_for(const std::string& title, int max_width) {
  return text_width(title, 2) <= max_width - 2 * kPad ? 2 : 1;
}

std::string value_label(double v) { return fmt::format("{:.3g}", v); }

// The values marked on the colour bar, top to bottom: largest, middle, smallest (one value when
// they are all equal). A middle within a thousandth of the range of zero, below what a 3-digit
// label resolves, is shown as 0 rather than as -1.77e-05.
std::vector<double> colorbar_values(double lo, double hi) {
  double span = hi - lo, middle = lo + span / 2;
  if (span == 0) return {lo};
  return {hi, std::abs(middle) < 1e-3 * span ? 0.0 : middle, lo};
}

int ceil_div(int a, int b) { return (a + b - 1) / b; }

void check_heatmap(const Heatmap& map) {
  const auto& values = map.values;
  if (values.empty() || values[0].empty())
    throw std::invalid_argument("heatmap: values is empty; expected rows x cols with rows, cols >= 1");
  std::size_t cols = values[0].size();
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i].size() != cols)
      throw std::invalid_argument(fmt::format(
          "heatmap: row {} has {} values but row 0 has {}; rows must be equally long", i, values[i].size(), cols));
    for (std::size_t j = 0; j < cols; ++j)
      if (!std::isfinite(values[i][j]))
        throw std::invalid_argument(
            fmt::format("heatmap: value [{}][{}] is {}; values must be finite", i, j, values[i][j]));
  }
  if (!map.row_labels.empty() && map.row_labels.size() != values.size())
    throw std::invalid_argument(fmt::format("heatmap: {} row labels for {} rows (pass one per row, or none)",
                                            map.row_labels.size(), values.size()));
  if (!map.col_labels.empty() && map.col_labels.size() != cols)
    throw std::invalid_argument(fmt::format("heatmap: {} column labels for {} columns (pass one per column, or none)",
                                            map.col_labels.size(), cols));
  if (map.row_title.empty() || map.col_title.empty() || map.value_title.empty())
    throw std::invalid_argument(
        "heatmap: every axis needs a title: row_title, col_title and value_title (what a colour means)");
  if (!map.masked.empty()) {
    if (map.masked.size() != values.size())
      throw std::invalid_argument(
          fmt::format("heatmap: {} rows of mask flags for {} rows (pass one per value, or none)", map.masked.size(),
                      values.size()));
    for (std::size_t i = 0; i < values.size(); ++i)
      if (map.masked[i].size() != cols)
        throw std::invalid_argument(
            fmt::format("heatmap: mask row {} has {} flags for {} columns", i, map.masked[i].size(), cols));
  }
}

bool is_masked(const Heatmap& map, std::size_t i, std::size_t j) { return !map.masked.empty() && map.masked[i][j]; }

// A masked cell: grey with dark grey diagonals. The hatch follows the image's pixel grid, so that
// neighbouring masked cells read as one hatched region.
void fill_masked(Image& image, int x, int y, int w, int h) {
  for (int py = y; py < y + h; ++py)
    for (int px = x; px < x + w; ++px) image.set(px, py, (px + py) % 6 == 0 ? kMaskedHatch : kMaskedFill);
}

constexpr const char* kMaskedName = "masked";

}  // namespace

Color colormap(double t) {
  // Nine samples of viridis at t = 0, 1/8, ..., 1; between them, straight lines in RGB.
  static constexpr std::array<Color, 9> kAnchors{{{68, 1, 84},
                                                  {71, 44, 122},
                                                  {59, 81, 139},
                                                  {44, 113, 142},
                                                  {33, 144, 141},
                                                  {39, 173, 129},
                                                  {92, 200, 99},
                                                  {170, 220, 50},
                                                  {253, 231, 37}}};
  t = std::isnan(t) ? 0.0 : std::clamp(t, 0.0, 1.0);
  double pos = t * (kAnchors.size() - 1);
  std::size_t i = std::min(static_cast<std::size_t>(pos), kAnchors.size() - 2);
  double f = pos - static_cast<double>(i);
  auto mix = [f](std::uint8_t a, std::uint8_t b) {
    return static_cast<std::uint8_t>(std::lround(a + f * (static_cast<double>(b) - a)));
  };
  const Color &a = kAnchors[i], &b = kAnchors[i + 1];
  return {mix(a.r, b.r), mix(a.g, b.g), mix(a.b, b.b)};
}

HeatmapLayout heatmap_layout(const Heatmap& map) {
  check_heatmap(map);
  const auto& values = map.values;
  const int rows = static_cast<int>(values.size()), cols = static_cast<int>(values[0].size());
  HeatmapLayout L;
  // Colours start at 0: an attention weight of 0.01 is nearly nothing, and a bar starting at the
  // smallest weight (2.5e-15, say) would paint it as if it were far from it.
  bool any_value = false;
  for (std::size_t i = 0; i < values.size(); ++i)
    for (std::size_t j = 0; j < values[i].size(); ++j) {
      if (is_masked(map, i, j)) {
        L.any_masked = true;
        continue;
      }
      L.lo = std::min(L.lo, values[i][j]), L.hi = std::max(L.hi, values[i][j]);
      any_value = true;
    }
  if (!any_value) throw std::invalid_argument("heatmap: every cell is masked; there is nothing to show");

  std::vector<std::u32string> row_text = visible_tokens(map.row_labels), col_text = visible_tokens(map.col_labels);
  L.title_scale = title_scale_for(map.title, kHeatmapMaxSide);
  const int title_height = map.title.empty() ? 0 : kGlyphHeight * L.title_scale + 3 * kGap;
  const int col_title_height = kGlyphHeight + kGap, row_title_width = kGlyphHeight + kGap;
  int tick_text = 0;
  for (double v : colorbar_values(L.lo, L.hi)) tick_text = std::max(tick_text, text_width(value_label(v)));
  const int bar_text = std::max(kTickLength + 4 + tick_text + kGap + kGlyphHeight,  // ticks, then the turned title
                                L.any_masked ? kGap + text_width(kMaskedName) : 0);
  const int bar_part = kBarGap + kBarWidth + bar_text + kPad;

  // Big labels if the cells come out big enough to hold them, else small ones.
  int row_label_width = 0, header = 0;
  for (int scale : {2, 1}) {
    L.label_scale = scale;
    row_label_width = row_text.empty() ? 0 : widest(row_text, scale) + kGap;
    L.grid_left = kPad + row_title_width + row_label_width;
    L.cell = std::clamp((kHeatmapMaxSide - L.grid_left - bar_part) / cols, 1, kMaxCell);
    // Column labels lie flat when each fits in its cell or is one character (then every k-th
    // column is labelled); longer ones are turned to read upwards.
    int col_width = widest(col_text, scale);
    L.col_labels_turned = col_width > std::max(L.cell - 2, kGlyphHeight * scale);
    header = col_text.empty() ? 0 : (L.col_labels_turned ? col_width : kGlyphHeight * scale) + kGap;
    int room_below = kHeatmapMaxSide - (kPad + title_height + col_title_height + header) - kPad;
    L.cell = std::max(1, std::min(L.cell, room_below / rows));
    if (scale == 1 || L.cell >= kBigLabelCell) break;
  }
  const int glyph = kGlyphHeight * L.label_scale;
  L.row_label_every = L.cell >= glyph ? 1 : ceil_div(glyph, L.cell);
  const int col_width = L.col_labels_turned ? glyph : widest(col_text, L.label_scale);
  L.col_label_every = col_width + 2 <= L.cell ? 1 : ceil_div(col_width + 2, L.cell);

  L.row_title_left = kPad;
  L.col_title_top = kPad + title_height;
  L.grid_top = L.col_title_top + col_title_height + header;
  const int grid_width = cols * L.cell, grid_height = rows * L.cell;
  L.colorbar_left = L.grid_left + grid_width + kBarGap;
  L.colorbar_top = L.grid_top;
  L.colorbar_height = std::max(grid_height, kMinBarHeight);
  L.value_title_left = L.colorbar_left + kBarWidth + kTickLength + 4 + tick_text + kGap;
  int bottom = L.grid_top + L.colorbar_height + kGlyphHeight / 2;  // the lowest tick label hangs below the bar
  if (L.any_masked) {
    L.masked_key_side = kBarWidth;
    L.masked_key_left = L.colorbar_left;
    L.masked_key_top = bottom + kGap;
    bottom = L.masked_key_top + std::max(L.masked_key_side, kGlyphHeight);
  }
  L.width = std::max(L.colorbar_left + bar_part - kBarGap, text_width(map.title, L.title_scale) + 2 * kPad);
  L.height = std::max(bottom, L.grid_top + grid_height) + kPad;
  return L;
}

Image heatmap_image(const Heatmap& map) {
  const HeatmapLayout L = heatmap_layout(map);
  Image image(L.width, L.height);
  draw_text(image, (L.width - text_width(map.title, L.title_scale)) / 2, kPad + kGap, map.title, kInk, L.title_scale);

  // Cells: a map of zeros has no "more" or "less", so it gets the middle colour.
  const double span = L.hi - L.lo;
  const auto& values = map.values;
  const int rows = static_cast<int>(values.size()), cols = static_cast<int>(values[0].size());
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      const auto r = static_cast<std::size_t>(i), c = static_cast<std::size_t>(j);
      const int x = L.grid_left + j * L.cell, y = L.grid_top + i * L.cell;
      if (is_masked(map, r, c))
        fill_masked(image, x, y, L.cell, L.cell);
      else
        image.fill_rect(x, y, L.cell, L.cell, colormap(span > 0 ? (values[r][c] - L.lo) / span : 0.5));
    }
  const int grid_width = cols * L.cell, grid_height = rows * L.cell;
  image.draw_rect(L.grid_left - 1, L.grid_top - 1, grid_width + 2, grid_height + 2, kFrame);

  // Labels, centred on their row or column; the axis titles outside them.
  const int s = L.label_scale, glyph = kGlyphHeight * s;
  for (int i = 0; i < static_cast<int>(map.row_labels.size()); i += L.row_label_every) {
    std::u32string t = visible_token(map.row_labels[static_cast<std::size_t>(i)]);
    draw_text(image, L.grid_left - kGap - text_width(t, s), L.grid_top + i * L.cell + (L.cell - glyph) / 2, t, kInk, s);
  }
  for (int j = 0; j < static_cast<int>(map.col_labels.size()); j += L.col_label_every) {
    std::u32string t = visible_token(map.col_labels[static_cast<std::size_t>(j)]);
    int centre = L.grid_left + j * L.cell + L.cell / 2, w = text_width(t, s);
    if (L.col_labels_turned)
      draw_text_up(image, centre - glyph / 2, L.grid_top - kGap - w, t, kInk, s);
    else
      draw_text(image, centre - w / 2, L.grid_top - kGap - glyph, t, kInk, s);
  }
  draw_text(image, std::max(kPad, L.grid_left + (grid_width - text_width(map.col_title)) / 2), L.col_title_top,
            map.col_title, kInk);
  draw_text_up(image, L.row_title_left,
               std::max(L.grid_top, L.grid_top + (grid_height - text_width(map.row_title)) / 2), map.row_title, kInk);

  // Colour bar: the largest value at the top, with its value, the middle one and the smallest.
  const int bar_x = L.colorbar_left, bar_y = L.colorbar_top, bar_h = L.colorbar_height;
  for (int y = 0; y < bar_h; ++y) {
    double t = span > 0 ? 1.0 - static_cast<double>(y) / (bar_h - 1) : 0.5;
    image.fill_rect(bar_x, bar_y + y, kBarWidth, 1, colormap(t));
  }
  image.draw_rect(bar_x - 1, bar_y - 1, kBarWidth + 2, bar_h + 2, kFrame);
  for (double value : colorbar_values(L.lo, L.hi)) {
    int y = span > 0 ? bar_y + static_cast<int>(std::lround((L.hi - value) / span * (bar_h - 1))) : bar_y + bar_h / 2;
    image.draw_line(bar_x + kBarWidth, y, bar_x + kBarWidth + kTickLength, y, kFrame);
    draw_text(image, bar_x + kBarWidth + kTickLength + 4, y - kGlyphHeight / 2, value_label(value), kInk);
  }
  draw_text_up(image, L.value_title_left, std::max(bar_y, bar_y + (bar_h - text_width(map.value_title)) / 2),
               map.value_title, kInk);
  if (L.any_masked) {
    fill_masked(image, L.masked_key_left, L.masked_key_top, L.masked_key_side, L.masked_key_side);
    image.draw_rect(L.masked_key_left - 1, L.masked_key_top - 1, L.masked_key_side + 2, L.masked_key_side + 2, kFrame);
    draw_text(image, L.masked_key_left + L.masked_key_side + kGap,
              L.masked_key_top + (L.masked_key_side - kGlyphHeight) / 2, kMaskedName, kInk);
  }
  return image;
}

void heatmap_png(const std::string& path, const Heatmap& map) { write_png(heatmap_image(map), path); }

// --- line plot --------------------------------------------------------------------------------

namespace {

constexpr int kPlotWidth = 880, kPlotHeight = 540;
constexpr int kMarkersUpTo = 40;  // points per series; more would hide the line
constexpr int kLegendSample = 28;

void check_series(const std::vector<Series>& series) {
  if (series.empty()) throw std::invalid_argument("line_plot: no series to plot");
  for (const Series& s : series) {
    if (s.x.size() != s.y.size())
      throw std::invalid_argument(
          fmt::format("line_plot: series '{}' has {} x values and {} y values", s.name, s.x.size(), s.y.size()));
    if (s.x.empty()) throw std::invalid_argument(fmt::format("line_plot: series '{}' has no points", s.name));
    for (std::size_t i = 0; i < s.x.size(); ++i)
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i]))
        throw std::invalid_argument(fmt::format("line_plot: series '{}' point {} is ({}, {}); values must be finite",
                                                s.name, i, s.x[i], s.y[i]));
  }
}

// Tick labels with as many decimals as the step needs, the same for every tick on an axis.
std::vector<std::string> tick_labels(const std::vector<double>& ticks) {
  double step = ticks.size() > 1 ? ticks[1] - ticks[0] : 1.0;
  double largest = std::max(std::abs(ticks.front()), std::abs(ticks.back()));
  std::vector<std::string> out;
  for (double t : ticks) {
    if (largest >= 1e6 || step < 1e-5)
      out.push_back(fmt::format("{:.3g}", t));  // 1e+07 reads better than 10000000
    else
      out.push_back(fmt::format("{:.{}f}", t, std::max(0, -static_cast<int>(std::floor(std::log10(step) + 1e-9)))));
  }
  return out;
}

// Maps data coordinates to pixels inside the plot area [left, left + w) x [top, top + h).
struct Frame {
  int left, top, w, h;
  double x0, x1, y0, y1;
  int px(double x) const { return left + static_cast<int>(std::lround((x - x0) / (x1 - x0) * (w - 1))); }
  int py(double y) const { return top + h - 1 - static_cast<int>(std::lround((y - y0) / (y1 - y0) * (h - 1))); }
};

void draw_marker(Image& image, int x, int y, Color c, int size) {
  image.fill_rect(x - size / 2, y - size / 2, size, size, c);
}

// How many sampled points of the curves fall inside the box: the legend goes where this is least.
int points_covered(const std::vector<Series>& series, const Frame& f, int bx, int by, int bw, int bh) {
  int covered = 0;
  auto count = [&](double x, double y) {
    int px = f.px(x), py = f.py(y);
    covered += px >= bx && px < bx + bw && py >= by && py < by + bh;
  };
  for (const Series& s : series)
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      count(s.x[i], s.y[i]);
      if (i + 1 < s.x.size())
        for (int k = 1; k < 16; ++k)
          count(s.x[i] + (s.x[i + 1] - s.x[i]) * k / 16, s.y[i] + (s.y[i + 1] - s.y[i]) * k / 16);
    }
  return covered;
}

std::string legend_name(const Series& s, std::size_t index) {
  return s.name.empty() ? fmt::format("series {}", index) : s.name;
}

// Sizes the legend and finds its place (see LinePlotLayout), narrowing the frame if it must.
void place_legend(LinePlotLayout& L, const std::vector<Series>& series, int right_margin) {
  int name_width = 0;
  for (std::size_t i = 0; i < series.size(); ++i)
    name_width = std::max(name_width, text_width(legend_name(series[i], i)));
  const int row = kGlyphHeight + 4;
  const int bw = kGap + kLegendSample + kGap + name_width + kGap + 2,
            bh = kGap + row * static_cast<int>(series.size()) + 2;
  L.legend_width = bw, L.legend_height = bh;
  const Frame f{L.plot_left, L.plot_top, L.plot_width, L.plot_height, L.x.lo, L.x.hi, L.y.lo, L.y.hi};
  // Corners in order of preference; loss curves fall from the top left, so top right comes first.
  const int inset = 10;
  const std::array<std::pair<int, int>, 4> corners{{{f.left + f.w - inset - bw, f.top + inset},
                                                    {f.left + inset, f.top + inset},
                                                    {f.left + f.w - inset - bw, f.top + f.h - inset - bh},
                                                    {f.left + inset, f.top + f.h - inset - bh}}};
  auto best = corners[0];
  int fewest = points_covered(series, f, best.first, best.second, bw, bh);
  for (auto corner : corners) {
    int covered = points_covered(series, f, corner.first, corner.second, bw, bh);
    if (covered < fewest) fewest = covered, best = corner;
  }
  if (fewest == 0) {
    std::tie(L.legend_left, L.legend_top) = best;
    return;
  }
  // Every corner would hide part of a curve: the legend moves out, to the right of the frame.
  L.legend_outside = true;
  L.legend_left = L.width - kPad - bw;
  L.legend_top = L.plot_top;
  L.plot_width = L.legend_left - 2 * kGap - right_margin - L.plot_left;
}

void draw_legend(Image& image, const std::vector<Series>& series, const LinePlotLayout& L) {
  const int row = kGlyphHeight + 4;
  const int x = L.legend_left, y = L.legend_top, bw = L.legend_width, bh = L.legend_height;
  image.fill_rect(x, y, bw, bh, kWhite);
  image.draw_rect(x, y, bw, bh, kFrame);
  for (std::size_t i = 0; i < series.size(); ++i) {
    int top = y + kGap + row * static_cast<int>(i), mid = top + kGlyphHeight / 2;
    Color c = series_color(i);
    image.draw_line(x + kGap, mid, x + kGap + kLegendSample, mid, c, 2);
    if (series[i].x.size() <= kMarkersUpTo) draw_marker(image, x + kGap + kLegendSample / 2, mid, c, 5);
    draw_text(image, x + 2 * kGap + kLegendSample, top, legend_name(series[i], i), kInk);
  }
}

}  // namespace

Color series_color(std::size_t index) {
  // Ten colours that stay apart on white and from each other (the common "tab10" choice).
  static constexpr std::array<Color, 10> kPalette{{{31, 119, 180},
                                                   {255, 127, 14},
                                                   {44, 160, 44},
                                                   {214, 39, 40},
                                                   {148, 103, 189},
                                                   {140, 86, 75},
                                                   {227, 119, 194},
                                                   {127, 127, 127},
                                                   {188, 189, 34},
                                                   {23, 190, 207}}};
  return kPalette[index % kPalette.size()];
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!std::isfinite(lo) || !std::isfinite(hi) || lo > hi || target < 2)
    throw std::invalid_argument(
        fmt::format("nice_ticks: need finite lo <= hi and target >= 2, got [{}, {}], {}", lo, hi, target));
  // A single value (one point, a flat curve) still gets an axis: widen it around the value.
  if (hi - lo <= 1e-12 * std::max({1.0, std::abs(lo), std::abs(hi)})) {
    double half = lo == 0 ? 1.0 : 0.1 * std::abs(lo);
    lo -= half, hi += half;
  }
  if (!std::isfinite(hi - lo))
    throw std::invalid_argument(fmt::format("nice_ticks: range [{}, {}] is too wide to divide", lo, hi));
  double raw = (hi - lo) / (target - 1);
  double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double f = raw / magnitude;
  double step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * magnitude;
  // Ticks are whole multiples of the step, so 0.1 + 0.2 rounding never shows up in a label.
  double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
  std::vector<double> ticks;
  for (double k = first; k <= last; ++k) ticks.push_back(k == 0 ? 0.0 : k * step);
  return ticks;
}

Axis data_axis(double lo, double hi) {
  if (!std::isfinite(lo) || !std::isfinite(hi) || lo > hi)
    throw std::invalid_argument(fmt::format("data_axis: need finite lo <= hi, got [{}, {}]", lo, hi));
  // A single value (one point, a flat curve) has no extent of its own: widen it around the value.
  if (hi - lo <= 1e-12 * std::max({1.0, std::abs(lo), std::abs(hi)})) {
    double half = lo == 0 ? 1.0 : 0.1 * std::abs(lo);
    lo -= half, hi += half;
  }
  // Finer steps until at least four round values fall inside the data's range.
  const double slack = 1e-9 * (hi - lo);
  Axis axis{lo, hi, {}};
  for (int target = 6; target <= 12 && axis.ticks.size() < 4; ++target) {
    axis.ticks.clear();
    for (double t : nice_ticks(lo, hi, target))
      if (t >= lo - slack && t <= hi + slack) axis.ticks.push_back(t);
  }
  return axis;
}

LinePlotLayout line_plot_layout(const std::vector<Series>& series, const std::string& title, const std::string& x_label,
                                const std::string& y_label) {
  check_series(series);
  if (x_label.empty() || y_label.empty())
    throw std::invalid_argument("line_plot: both axes need a title (x_label and y_label)");
  double x_lo = series[0].x[0], x_hi = x_lo, y_lo = series[0].y[0], y_hi = y_lo;
  for (const Series& s : series)
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      x_lo = std::min(x_lo, s.x[i]), x_hi = std::max(x_hi, s.x[i]);
      y_lo = std::min(y_lo, s.y[i]), y_hi = std::max(y_hi, s.y[i]);
    }
  LinePlotLayout L;
  L.x = data_axis(x_lo, x_hi);
  L.y = data_axis(y_lo, y_hi);
  L.width = kPlotWidth, L.height = kPlotHeight;

  // Margins hold, from the outside in: axis title, tick labels, tick marks.
  int y_text_width = 0;
  for (const std::string& t : tick_labels(L.y.ticks)) y_text_width = std::max(y_text_width, text_width(t));
  int x_text_half = 0;
  for (const std::string& t : tick_labels(L.x.ticks)) x_text_half = std::max(x_text_half, text_width(t) / 2);
  const int title_scale = title_scale_for(title, kPlotWidth);
  L.plot_top = kPad + (title.empty() ? 0 : kGlyphHeight * title_scale + 2 * kGap) + kGlyphHeight / 2;
  L.plot_left = kPad + kGlyphHeight + 2 * kGap + y_text_width + 4 + kTickLength;
  const int bottom = kTickLength + 4 + kGlyphHeight + 2 * kGap + kGlyphHeight + kPad;
  const int right = kPad + std::max(x_text_half, kGap);  // a tick label at the right end stays inside
  L.plot_width = kPlotWidth - L.plot_left - right;
  L.plot_height = kPlotHeight - L.plot_top - bottom;
  place_legend(L, series, right - kPad);
  return L;
}

Image line_plot_image(const std::vector<Series>& series, const std::string& title, const std::string& x_label,
                      const std::string& y_label) {
  const LinePlotLayout L = line_plot_layout(series, title, x_label, y_label);
  const std::vector<std::string> x_text = tick_labels(L.x.ticks), y_text = tick_labels(L.y.ticks);
  const Frame f{L.plot_left, L.plot_top, L.plot_width, L.plot_height, L.x.lo, L.x.hi, L.y.lo, L.y.hi};

  Image image(L.width, L.height);
  const int title_scale = title_scale_for(title, kPlotWidth);
  draw_text(image, (L.width - text_width(title, title_scale)) / 2, kPad + kGap, title, kInk, title_scale);
  for (std::size_t i = 0; i < L.x.ticks.size(); ++i) {
    int x = f.px(L.x.ticks[i]);
    image.draw_line(x, f.top, x, f.top + f.h - 1, kGridLine);
    image.draw_line(x, f.top + f.h, x, f.top + f.h + kTickLength, kFrame);
    draw_text(image, x - text_width(x_text[i]) / 2, f.top + f.h + kTickLength + 4, x_text[i], kInk);
  }
  for (std::size_t i = 0; i < L.y.ticks.size(); ++i) {
    int y = f.py(L.y.ticks[i]);
    image.draw_line(f.left, y, f.left + f.w - 1, y, kGridLine);
    image.draw_line(f.left - kTickLength - 1, y, f.left - 1, y, kFrame);
    draw_text(image, f.left - kTickLength - 4 - text_width(y_text[i]), y - kGlyphHeight / 2, y_text[i], kInk);
  }
  image.draw_rect(f.left - 1, f.top - 1, f.w + 2, f.h + 2, kFrame);
  draw_text(image, f.left + (f.w - text_width(x_label)) / 2, L.height - kPad - kGlyphHeight, x_label, kInk);
  draw_text_up(image, kPad, f.top + (f.h - text_width(y_label)) / 2, y_label, kInk);

  for (std::size_t k = 0; k < series.size(); ++k) {
    const Series& s = series[k];
    Color c = series_color(k);
    for (std::size_t i = 0; i + 1 < s.x.size(); ++i)
      image.draw_line(f.px(s.x[i]), f.py(s.y[i]), f.px(s.x[i + 1]), f.py(s.y[i + 1]), c, 2);
    if (s.x.size() <= kMarkersUpTo)
      for (std::size_t i = 0; i < s.x.size(); ++i)
        draw_marker(image, f.px(s.x[i]), f.py(s.y[i]), c, s.x.size() == 1 ? 7 : 5);
  }
  draw_legend(image, series, L);
  return image;
}

void line_plot_png(const std::string& path, const std::vector<Series>& series, const std::string& title,
                   const std::string& x_label, const std::string& y_label) {
  write_png(line_plot_image(series, title, x_label, y_label), path);
}

}  // namespace ag::plot
