// Checks examples/common (png.cpp, font.cpp, plot.cpp): files read back with libpng pixel for
// pixel, glyphs come from Unifont, heat map cells land where the layout says, bad input throws.
#include <gtest/gtest.h>

// Relative paths, and libpng by its versioned path: examples/common/png.h shadows <png.h>.
#include <png.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "../../examples/common/font.h"
#include "../../examples/common/image.h"
#include "../../examples/common/plot.h"

namespace ag::plot {
namespace {

namespace fs = std::filesystem;

// `call` throws E whose message contains `expected`.
template <class E, class F>
::testing::AssertionResult throws_with(F&& call, const std::string& expected) {
  try {
    call();
  } catch (const E& e) {
    if (std::string(e.what()).find(expected) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "message \"" << e.what() << "\" does not contain \"" << expected << "\"";
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw another exception type: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw; expected \"" << expected << "\"";
}

// A fresh, empty directory per test, removed afterwards.
class PlotFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) / (std::string("attograd_plot_") + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// A PNG decoded by libpng itself into 8-bit RGB.
struct Decoded {
  int width = 0, height = 0;
  std::vector<std::uint8_t> rgb;
  Color at(int x, int y) const {
    std::size_t i = 3 * (static_cast<std::size_t>(y) * static_cast<std::size_t>(width) + static_cast<std::size_t>(x));
    return {rgb[i], rgb[i + 1], rgb[i + 2]};
  }
};

Decoded read_png(const std::string& path) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&png, path.c_str()))
    throw std::runtime_error("cannot read " + path + ": " + png.message);
  png.format = PNG_FORMAT_RGB;
  Decoded out{static_cast<int>(png.width), static_cast<int>(png.height), {}};
  out.rgb.resize(PNG_IMAGE_SIZE(png));
  if (!png_image_finish_read(&png, nullptr, out.rgb.data(), 0, nullptr))
    throw std::runtime_error("cannot decode " + path + ": " + png.message);
  return out;
}

bool contains_color(const Image& image, Color c) {
  for (Color p : image.pixels())
    if (p == c) return true;
  return false;
}

bool any_color(const Image& image, Color c, int x0, int y0, int x1, int y1) {
  for (int y = y0; y < y1; ++y)
    for (int x = x0; x < x1; ++x)
      if (image.at(x, y) == c) return true;
  return false;
}

// --- png.cpp ------------------------------------------------------------------------------------

TEST_F(PlotFiles, WrittenPngReadsBackPixelForPixel) {
  Image image(7, 5, Color{10, 20, 30});
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 7; ++x)
      image.at(x, y) = {static_cast<std::uint8_t>(30 * x), static_cast<std::uint8_t>(50 * y), 200};
  image.fill_rect(5, 3, 10, 10, {1, 2, 3});  // runs off the bottom-right corner: clipped
  std::string path = file("pixels.png");
  write_png(image, path);

  Decoded back = read_png(path);
  ASSERT_EQ(back.width, 7);
  ASSERT_EQ(back.height, 5);
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 7; ++x) EXPECT_EQ(back.at(x, y), image.at(x, y)) << "pixel (" << x << ", " << y << ")";
  EXPECT_EQ(back.at(6, 4), (Color{1, 2, 3}));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), {}), 1);  // no temporary file left beside it
}

TEST_F(PlotFiles, WritePngReplacesAnOldFile) {
  std::string path = file("twice.png");
  write_png(Image(4, 4, kBlack), path);
  write_png(Image(2, 3, kWhite), path);
  Decoded back = read_png(path);
  EXPECT_EQ(back.width, 2);
  EXPECT_EQ(back.height, 3);
  EXPECT_EQ(back.at(1, 2), kWhite);
}

TEST_F(PlotFiles, WritePngIntoMissingDirectoryNamesThePath) {
  std::string path = file("no_such_dir/x.png");
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { write_png(Image(2, 2), path); }, path));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), {}), 0);
}

// Whoever can write in the directory has planted symbolic links where the picture goes and where
// its temporary file went before (path + ".tmp"). The picture replaces the first link; neither is
// followed, so the files they point to keep their bytes.
TEST_F(PlotFiles, WritePngFollowsNoPlantedLink) {
  fs::create_directories(file("outside"));
  std::string precious = file("outside/precious"), other = file("outside/other");
  std::ofstream(precious) << "precious bytes";
  std::ofstream(other) << "other bytes";
  std::string path = file("loss.png");
  fs::create_symlink(precious, path + ".tmp");
  fs::create_symlink(other, path);
  write_png(Image(3, 2, kWhite), path);
  auto bytes = [](const std::string& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(bytes(precious), "precious bytes");
  EXPECT_EQ(bytes(other), "other bytes");
  EXPECT_EQ(fs::symlink_status(path).type(), fs::file_type::regular);
  EXPECT_EQ(read_png(path).width, 3);
}

TEST(Image, RejectsBadSizesAndOutsidePixels) {
  EXPECT_THROW(Image(0, 5), std::invalid_argument);
  EXPECT_THROW(Image(5, -1), std::invalid_argument);
  Image image(3, 2);
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { image.at(3, 0); }, "(3, 0)"));
  EXPECT_THROW(image.at(0, -1), std::invalid_argument);
  image.set(-1, 0, kBlack);  // drawing outside is clipped, not an error
  image.draw_line(-5, -5, 10, 10, kBlack);
  EXPECT_EQ(image.at(1, 1), kBlack);
}

TEST(Image, LinesIncludeBothEnds) {
  Image image(10, 10);
  image.draw_line(1, 2, 8, 6, kBlack);
  EXPECT_EQ(image.at(1, 2), kBlack);
  EXPECT_EQ(image.at(8, 6), kBlack);
  int set = 0;
  for (Color c : image.pixels()) set += c == kBlack;
  EXPECT_EQ(set, 8);  // one pixel per column along the major (x) axis
}

// --- font.cpp -----------------------------------------------------------------------------------

TEST(Utf8, DecodesAndReplacesBadBytes) {
  EXPECT_EQ(decode_utf8("Az"), U"Az");
  EXPECT_EQ(decode_utf8("中文"), U"\u4E2D\u6587");
  EXPECT_EQ(decode_utf8("\xF0\x9F\x99\x82"), U"\U0001F642");
  EXPECT_EQ(decode_utf8("a\xFFz"), U"a\uFFFDz");                  // never a lead byte
  EXPECT_EQ(decode_utf8("\xC0\xAF"), U"\uFFFD\uFFFD");            // overlong '/'
  EXPECT_EQ(decode_utf8("\xE4\xB8"), U"\uFFFD\uFFFD");            // '中' cut short
  EXPECT_EQ(decode_utf8("\xED\xA0\x80"), U"\uFFFD\uFFFD\uFFFD");  // a UTF-16 surrogate
}

TEST(Font, AsciiIsEightWideAndDrawn) {
  EXPECT_EQ(text_width("A"), 8);
  EXPECT_EQ(text_width("Ab", 2), 32);
  Image image(8, 16);
  draw_text(image, 0, 0, "A", kBlack);
  int set = 0;
  for (Color c : image.pixels()) set += c == kBlack;
  EXPECT_GT(set, 10);
  EXPECT_EQ(image.at(0, 0), kWhite);  // Unifont's 'A' leaves the top rows empty
}

TEST(Font, ChineseIsSixteenWideAndUsesBothHalves) {
  EXPECT_EQ(text_width(U"\u4E2D"), 16);
  EXPECT_EQ(text_width("中", 2), 32);
  Image image(16, 16);
  draw_text(image, 0, 0, "中", kBlack);
  bool left = false, right = false;
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 16; ++x)
      if (image.at(x, y) == kBlack) (x < 8 ? left : right) = true;
  EXPECT_TRUE(left);
  EXPECT_TRUE(right);
  EXPECT_EQ(image.at(7, 0), kBlack);  // the vertical stroke runs from the top row
}

TEST(Font, TurnedTextSwapsWidthAndHeight) {
  Image image(16, 8);
  draw_text_up(image, 0, 0, "-", kBlack);  // a dash turned upright becomes a vertical bar
  int set_columns = 0;
  for (int x = 0; x < 16; ++x) {
    bool any = false;
    for (int y = 0; y < 8; ++y) any = any || image.at(x, y) == kBlack;
    set_columns += any;
  }
  EXPECT_GE(set_columns, 1);
  EXPECT_LE(set_columns, 2);
}

TEST(Font, MissingGlyphIsABox) {
  const std::u32string private_use = U"\U0010FFFD";  // plane 16: not in unifont.hex
  EXPECT_EQ(default_font().find(private_use[0]), nullptr);
  EXPECT_EQ(text_width(private_use), 8);
  Image image(8, 16);
  draw_text(image, 0, 0, private_use, kBlack);
  EXPECT_EQ(image.at(1, 8), kBlack);  // the left side of the box
  EXPECT_EQ(image.at(6, 8), kBlack);  // the right side
  EXPECT_EQ(image.at(3, 8), kWhite);  // hollow
}

TEST(Font, BadScaleThrows) {
  Image image(8, 16);
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { draw_text(image, 0, 0, "A", kBlack, 0); }, "scale 0"));
  EXPECT_THROW(text_width("A", 17), std::invalid_argument);
}

TEST_F(PlotFiles, FontFileMissingNamesPathAndPackage) {
  std::string path = file("missing.hex");
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { Font::load(path); }, path));
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { Font::load(path); }, "unifont"));
}

TEST_F(PlotFiles, FontFileIsParsedAndCheckedLineByLine) {
  std::string good = file("two.hex");
  std::ofstream(good) << "0041:0000000018242442427E424242420000\n"
                         "4E2D:01000100010001003FF8210821082108210821083FF821080100010001000100\n";
  Font font = Font::load(good);
  EXPECT_EQ(font.size(), 2u);
  ASSERT_NE(font.find(U'A'), nullptr);
  EXPECT_EQ(font.find(U'A')->width, 8);
  EXPECT_TRUE(font.find(U'A')->pixel(3, 4));  // row 4 is 0x18: pixels 3 and 4
  EXPECT_FALSE(font.find(U'A')->pixel(2, 4));
  EXPECT_EQ(font.find(U'\u4E2D')->width, 16);
  EXPECT_TRUE(font.find(U'\u4E2D')->pixel(2, 4));  // row 4 is 0x3FF8
  EXPECT_EQ(font.find(U'B'), nullptr);

  std::string bad = file("bad.hex");
  std::ofstream(bad) << "0041:0000000018242442427E424242420000\n0042:XYZ\n";
  EXPECT_TRUE(throws_with<std::runtime_error>([&] { Font::load(bad); }, "line 2"));
}

TEST(Font, PathCanBeOverridden) {
  // Put back whatever the caller set, so the other tests still find their font.
  const char* before = std::getenv("ATTOGRAD_UNIFONT_HEX");
  std::string saved = before ? before : "";
  ASSERT_EQ(setenv("ATTOGRAD_UNIFONT_HEX", "my.hex", 1), 0);
  EXPECT_EQ(unifont_path(), "my.hex");
  ASSERT_EQ(unsetenv("ATTOGRAD_UNIFONT_HEX"), 0);
  EXPECT_EQ(unifont_path(), "/usr/share/unifont/unifont.hex");
  if (before) setenv("ATTOGRAD_UNIFONT_HEX", saved.c_str(), 1);
}

// --- plot.cpp: heat map -------------------------------------------------------------------------

TEST(Colormap, RisesInBrightness) {
  auto luma = [](Color c) { return 0.299 * c.r + 0.587 * c.g + 0.114 * c.b; };
  for (int k = 0; k < 64; ++k) EXPECT_LT(luma(colormap(k / 64.0)), luma(colormap((k + 1) / 64.0))) << "step " << k;
  EXPECT_EQ(colormap(-3), colormap(0));
  EXPECT_EQ(colormap(7), colormap(1));
}

// A heat map with the required axis titles.
Heatmap titled(std::vector<std::vector<double>> values, std::vector<std::string> row_labels = {},
               std::vector<std::string> col_labels = {}, std::string title = "") {
  return {.values = std::move(values),
          .row_labels = std::move(row_labels),
          .col_labels = std::move(col_labels),
          .title = std::move(title),
          .row_title = "query position",
          .col_title = "key position",
          .value_title = "attention weight"};
}

Color cell_centre(const Image& image, const HeatmapLayout& layout, int i, int j) {
  return image.at(layout.grid_left + j * layout.cell + layout.cell / 2,
                  layout.grid_top + i * layout.cell + layout.cell / 2);
}

bool any_ink(const Image& image, int x0, int y0, int x1, int y1) {
  for (int y = y0; y < y1; ++y)
    for (int x = x0; x < x1; ++x)
      if (image.at(x, y) != kWhite) return true;
  return false;
}

TEST_F(PlotFiles, IdentityHeatmapHasBrightDiagonal) {
  Heatmap map = titled({{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}, {"中", " ", "a"}, {"中", " ", "a"}, "identity 单位矩阵");
  std::string path = file("identity.png");
  heatmap_png(path, map);

  HeatmapLayout layout = heatmap_layout(map);
  Decoded back = read_png(path);
  ASSERT_EQ(back.width, layout.width);
  ASSERT_EQ(back.height, layout.height);
  EXPECT_LE(layout.width, 1200);
  EXPECT_GE(layout.cell, 16);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      Color centre = back.at(layout.grid_left + j * layout.cell + layout.cell / 2,
                             layout.grid_top + i * layout.cell + layout.cell / 2);
      EXPECT_EQ(centre, colormap(i == j ? 1.0 : 0.0)) << "cell (" << i << ", " << j << ")";
    }
  // The colour bar runs from the largest value at the top to the smallest at the bottom.
  int bar_x = layout.colorbar_left + 2;
  EXPECT_EQ(back.at(bar_x, layout.colorbar_top), colormap(1.0));
  EXPECT_EQ(back.at(bar_x, layout.colorbar_top + layout.colorbar_height - 1), colormap(0.0));
}

TEST(Heatmap, ColourBarStartsAtZero) {
  // No weight is 0 here, yet the bar starts there: 0.3 is not "nothing".
  Heatmap map = titled({{0.3, 0.5}, {0.4, 0.9}});
  HeatmapLayout layout = heatmap_layout(map);
  EXPECT_EQ(layout.lo, 0.0);
  EXPECT_EQ(layout.hi, 0.9);
  Image image = heatmap_image(map);
  EXPECT_EQ(cell_centre(image, layout, 0, 0), colormap(0.3 / 0.9));
  EXPECT_EQ(cell_centre(image, layout, 1, 1), colormap(1.0));
  EXPECT_NE(cell_centre(image, layout, 0, 0), colormap(0.0));
  // A negative value extends the scale below 0.
  HeatmapLayout signed_layout = heatmap_layout(titled({{-0.5, 2.0}}));
  EXPECT_EQ(signed_layout.lo, -0.5);
  EXPECT_EQ(signed_layout.hi, 2.0);
}

TEST(Heatmap, MaskedCellsAreGreyHatchedAndNamedInTheLegend) {
  // Causal 3 x 3 weights: the future is masked; the unmasked weight [2][0] is exactly 0.
  Heatmap map = titled({{1, 0, 0}, {0.4, 0.6, 0}, {0, 0.5, 0.5}});
  map.masked = {{false, true, true}, {false, false, true}, {false, false, false}};
  map.values[0][2] = 7;  // a masked cell's value is ignored: it does not stretch the scale
  HeatmapLayout layout = heatmap_layout(map);
  EXPECT_TRUE(layout.any_masked);
  EXPECT_EQ(layout.hi, 1.0);
  Image image = heatmap_image(map);

  auto cell_only_masked_colours = [&](int i, int j) {
    int hatch = 0;
    for (int y = 0; y < layout.cell; ++y)
      for (int x = 0; x < layout.cell; ++x) {
        Color c = image.at(layout.grid_left + j * layout.cell + x, layout.grid_top + i * layout.cell + y);
        if (c != kMaskedFill && c != kMaskedHatch) return false;
        hatch += c == kMaskedHatch;
      }
    return hatch > 0;
  };
  EXPECT_TRUE(cell_only_masked_colours(0, 1));
  EXPECT_TRUE(cell_only_masked_colours(0, 2));
  EXPECT_TRUE(cell_only_masked_colours(1, 2));
  EXPECT_EQ(cell_centre(image, layout, 2, 0), colormap(0.0));  // weight 0, not masked
  // Neither grey is on the colour map, so a masked cell can never be read as a weight.
  for (int k = 0; k <= 1000; ++k) {
    EXPECT_NE(colormap(k / 1000.0), kMaskedFill) << k;
    EXPECT_NE(colormap(k / 1000.0), kMaskedHatch) << k;
  }
  // The legend: a hatched square under the colour bar, with its name ("masked") beside it.
  ASSERT_GT(layout.masked_key_side, 0);
  EXPECT_GT(layout.masked_key_top, layout.colorbar_top + layout.colorbar_height);
  EXPECT_LE(layout.masked_key_top + layout.masked_key_side, layout.height);
  int fill = 0, hatch = 0;
  for (int y = 0; y < layout.masked_key_side; ++y)
    for (int x = 0; x < layout.masked_key_side; ++x) {
      Color c = image.at(layout.masked_key_left + x, layout.masked_key_top + y);
      fill += c == kMaskedFill, hatch += c == kMaskedHatch;
    }
  EXPECT_EQ(fill + hatch, layout.masked_key_side * layout.masked_key_side);
  EXPECT_GT(hatch, 0);
  const int text_left = layout.masked_key_left + layout.masked_key_side + 2;
  EXPECT_TRUE(any_ink(image, text_left, layout.masked_key_top, std::min(layout.width, text_left + 48),
                      layout.masked_key_top + layout.masked_key_side));
  EXPECT_LE(text_left + text_width("masked"), layout.width);

  // Without a mask there is no grey and no legend.
  map.masked.clear();
  map.values[0][2] = 0;
  EXPECT_FALSE(heatmap_layout(map).any_masked);
  Image plain = heatmap_image(map);
  EXPECT_FALSE(contains_color(plain, kMaskedFill));
  EXPECT_FALSE(contains_color(plain, kMaskedHatch));
  EXPECT_LT(heatmap_layout(map).height, layout.height);
}

TEST(Heatmap, AxisTitlesAreRequiredAndDrawn) {
  Heatmap map = titled({{0.2, 0.8}, {0.6, 0.4}});
  HeatmapLayout layout = heatmap_layout(map);
  Image image = heatmap_image(map);
  const int grid_side = 2 * layout.cell;
  // The row title runs up the left edge beside the grid, the column title above the grid, and the
  // colour bar's title to the right of its tick labels.
  EXPECT_TRUE(any_ink(image, layout.row_title_left, layout.grid_top, layout.row_title_left + kGlyphHeight,
                      layout.grid_top + grid_side));
  EXPECT_TRUE(any_ink(image, layout.grid_left, layout.col_title_top, layout.grid_left + grid_side,
                      layout.col_title_top + kGlyphHeight));
  EXPECT_LT(layout.col_title_top + kGlyphHeight, layout.grid_top);
  EXPECT_TRUE(any_ink(image, layout.value_title_left, layout.colorbar_top, layout.value_title_left + kGlyphHeight,
                      layout.colorbar_top + layout.colorbar_height));
  EXPECT_LE(layout.value_title_left + kGlyphHeight, layout.width);

  for (std::string Heatmap::*title : {&Heatmap::row_title, &Heatmap::col_title, &Heatmap::value_title}) {
    Heatmap untitled = map;
    untitled.*title = "";
    EXPECT_TRUE(throws_with<std::invalid_argument>([&] { heatmap_image(untitled); }, "title"));
  }
}

TEST(Heatmap, LabelsAreDrawnLeftAndAbove) {
  Heatmap map = titled({{0.2, 0.8}, {0.6, 0.4}}, {"中", "x"}, {"中", "x"});
  HeatmapLayout layout = heatmap_layout(map);
  Image image = heatmap_image(map);
  const int labels_left = layout.row_title_left + kGlyphHeight;  // right of the row title
  EXPECT_TRUE(any_ink(image, labels_left, layout.grid_top, layout.grid_left - 2, layout.grid_top + layout.cell));
  EXPECT_TRUE(any_ink(image, layout.grid_left, layout.col_title_top + kGlyphHeight, layout.grid_left + layout.cell,
                      layout.grid_top - 2));
}

TEST(Heatmap, ManyTokensStayWithinTheWidth) {
  std::size_t n = 300;
  std::vector<std::vector<double>> values(n, std::vector<double>(n, 0.0));
  for (std::size_t i = 0; i < n; ++i) values[i][i] = 1;
  std::vector<std::string> labels(n, "t");
  HeatmapLayout layout = heatmap_layout(titled(values, labels, labels, "many"));
  EXPECT_LE(layout.width, 1250);
  EXPECT_GT(layout.row_label_every, 1);  // 4-pixel rows cannot each hold a 16-pixel label
}

TEST(Heatmap, BadInputThrows) {
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { heatmap_image(titled({})); }, "empty"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { heatmap_image(titled({{1, 2}, {3}})); }, "row 1"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        heatmap_image(titled({{1, std::numeric_limits<double>::quiet_NaN()}}));
      },
      "[0][1]"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { heatmap_image(titled({{1, 2}}, {"a", "b"})); }, "row labels"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { heatmap_image(titled({{1, 2}}, {}, {"a"})); }, "column labels"));
  Heatmap bad_mask = titled({{1, 2}});
  bad_mask.masked = {{true}};
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { heatmap_image(bad_mask); }, "mask row 0"));
  bad_mask.masked = {{true, true}};
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { heatmap_image(bad_mask); }, "every cell is masked"));
}

// --- plot.cpp: line plot ------------------------------------------------------------------------

TEST(NiceTicks, RoundStepsCoveringTheRange) {
  EXPECT_EQ(nice_ticks(0, 2.3), (std::vector<double>{0, 0.5, 1, 1.5, 2, 2.5}));
  EXPECT_EQ(nice_ticks(0, 1000), (std::vector<double>{0, 200, 400, 600, 800, 1000}));
  std::vector<double> ticks = nice_ticks(1.13, 4.87);
  EXPECT_LE(ticks.front(), 1.13);
  EXPECT_GE(ticks.back(), 4.87);
  std::vector<double> flat = nice_ticks(2, 2);  // one value still gets an axis around it
  EXPECT_LT(flat.front(), 2);
  EXPECT_GT(flat.back(), 2);
  EXPECT_THROW(nice_ticks(3, 1), std::invalid_argument);
  EXPECT_THROW(nice_ticks(-1e308, 1e308), std::invalid_argument);
}

TEST_F(PlotFiles, LossCurvesUseOneColourPerSeries) {
  Series train{"train", {}, {}}, validation{"validation", {0, 50, 100}, {3.0, 2.2, 2.0}};
  for (int step = 0; step <= 100; ++step) {
    train.x.push_back(step);
    train.y.push_back(1.5 + 2.0 * std::exp(-step / 30.0));
  }
  std::string path = file("loss.png");
  line_plot_png(path, {train, validation}, "损失 loss", "step", "loss");
  Decoded back = read_png(path);
  Image image = line_plot_image({train, validation}, "损失 loss", "step", "loss");
  ASSERT_EQ(back.width, image.width());
  ASSERT_EQ(back.height, image.height());
  EXPECT_TRUE(contains_color(image, series_color(0)));
  EXPECT_TRUE(contains_color(image, series_color(1)));
  EXPECT_FALSE(contains_color(image, series_color(2)));
}

TEST(DataAxis, EndsAtTheDataWithRoundTicksInside) {
  Axis steps = data_axis(1, 1200);  // a 1200-step run: the axis ends at 1200, not at 1500
  EXPECT_EQ(steps.lo, 1);
  EXPECT_EQ(steps.hi, 1200);
  EXPECT_EQ(steps.ticks, (std::vector<double>{200, 400, 600, 800, 1000, 1200}));
  for (auto [lo, hi] : {std::pair{1.85, 4.74}, {0.0, 2.3}, {-3.0, 0.01}, {1e-7, 3e-7}}) {
    Axis axis = data_axis(lo, hi);
    EXPECT_EQ(axis.lo, lo);
    EXPECT_EQ(axis.hi, hi);
    EXPECT_GE(axis.ticks.size(), 4u) << lo << " to " << hi;
    for (double t : axis.ticks) {
      EXPECT_GE(t, lo - 1e-12) << lo << " to " << hi;
      EXPECT_LE(t, hi + 1e-12) << lo << " to " << hi;
    }
  }
  Axis flat = data_axis(2, 2);  // one value still gets an axis around it
  EXPECT_LT(flat.lo, 2);
  EXPECT_GT(flat.hi, 2);
  EXPECT_THROW(data_axis(3, 1), std::invalid_argument);
}

TEST(LinePlot, AxesEndAtTheData) {
  Series train{"train", {}, {}}, validation{"validation", {}, {}};
  for (int step = 1; step <= 1200; ++step) {
    train.x.push_back(step);
    train.y.push_back(2.0 + 2.7 * std::exp(-step / 50.0));
    if (step % 200 == 0) validation.x.push_back(step), validation.y.push_back(1.9 + 0.5 * std::exp(-step / 300.0));
  }
  LinePlotLayout layout = line_plot_layout({train, validation}, "", "step", "loss");
  EXPECT_EQ(layout.x.lo, 1);
  EXPECT_EQ(layout.x.hi, 1200);
  EXPECT_EQ(layout.y.lo, validation.y.back());
  EXPECT_EQ(layout.y.hi, train.y.front());
  // The last validation point sits on the right edge of the frame, the lowest point on its bottom.
  Image image = line_plot_image({train, validation}, "", "step", "loss");
  const int right = layout.plot_left + layout.plot_width - 1, bottom = layout.plot_top + layout.plot_height - 1;
  bool on_right_edge = false;
  for (int dy = -2; dy <= 2; ++dy) on_right_edge = on_right_edge || image.at(right, bottom + dy) == series_color(1);
  EXPECT_TRUE(on_right_edge);
}

// The legend hides no curve: a falling loss leaves the top right free, and curves that pass
// through every corner push the legend out of the frame, to its right.
TEST(LinePlot, TheLegendHidesNoCurve) {
  Series falling{"train", {}, {}};
  for (int step = 1; step <= 1200; ++step) falling.x.push_back(step), falling.y.push_back(std::exp(-step / 50.0));
  LinePlotLayout inside = line_plot_layout({falling}, "", "step", "loss");
  EXPECT_FALSE(inside.legend_outside);
  EXPECT_GE(inside.legend_left, inside.plot_left);
  EXPECT_LE(inside.legend_left + inside.legend_width, inside.plot_left + inside.plot_width);
  EXPECT_LT(inside.legend_top, inside.plot_top + inside.plot_height / 2);  // a top corner

  // Two lines along the top and bottom edges, zig-zagging from corner to corner.
  Series top{"top", {0, 10}, {1, 1}}, bottom{"bottom", {0, 10}, {0, 0}}, zigzag{"zigzag", {}, {}};
  for (int i = 0; i <= 10; ++i) zigzag.x.push_back(i), zigzag.y.push_back(i % 2);
  LinePlotLayout outside = line_plot_layout({top, bottom, zigzag}, "", "x", "y");
  EXPECT_TRUE(outside.legend_outside);
  EXPECT_GT(outside.legend_left, outside.plot_left + outside.plot_width);
  EXPECT_LE(outside.legend_left + outside.legend_width, outside.width);
  // The frame kept the data's extent and is still most of the picture.
  EXPECT_EQ(outside.x.hi, 10);
  EXPECT_GT(outside.plot_width, outside.width / 2);
  // The legend is drawn where the layout put it: its swatch of the third series is there.
  Image image = line_plot_image({top, bottom, zigzag}, "", "x", "y");
  EXPECT_TRUE(any_color(image, series_color(2), outside.legend_left, outside.legend_top,
                        outside.legend_left + outside.legend_width, outside.legend_top + outside.legend_height));
}

TEST(LinePlot, SinglePointIsDrawn) {
  Image image = line_plot_image({{"one", {3}, {0.5}}}, "", "x", "y");
  EXPECT_TRUE(contains_color(image, series_color(0)));
}

TEST(LinePlot, AxisTitlesAreRequired) {
  std::vector<Series> one{{"one", {0, 1}, {0.5, 0.25}}};
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { line_plot_image(one, "t", "", "loss"); }, "title"));
  EXPECT_TRUE(throws_with<std::invalid_argument>([&] { line_plot_image(one, "t", "step", ""); }, "title"));
  LinePlotLayout layout = line_plot_layout(one, "t", "step", "loss");
  Image image = line_plot_image(one, "t", "step", "loss");
  // The y title runs up the left margin, the x title along the bottom.
  EXPECT_TRUE(any_ink(image, 0, layout.plot_top, 16 + kGlyphHeight, layout.plot_top + layout.plot_height));
  EXPECT_TRUE(any_ink(image, layout.plot_left, layout.height - 16 - kGlyphHeight, layout.plot_left + layout.plot_width,
                      layout.height - 16));
}

TEST(LinePlot, BadInputThrows) {
  EXPECT_TRUE(throws_with<std::invalid_argument>([] { line_plot_image({}, "", "x", "y"); }, "no series"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        line_plot_image({{"train", {1, 2}, {1}}}, "", "x", "y");
      },
      "'train'"));
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [] {
        line_plot_image({{"val", {}, {}}}, "", "x", "y");
      },
      "no points"));
  double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(throws_with<std::invalid_argument>(
      [&] {
        line_plot_image({{"v", {0, 1}, {1, nan}}}, "", "x", "y");
      },
      "point 1"));
}

}  // namespace
}  // namespace ag::plot
