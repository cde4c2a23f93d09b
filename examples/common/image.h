// An RGB picture in memory, a few drawing primitives, and a PNG writer (libpng).
//
// The examples draw attention maps and loss curves with it; nothing here knows about tensors.
// Coordinates are pixels, (0, 0) is the top-left corner, x grows right and y grows down.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ag::plot {

struct Color {
  std::uint8_t r = 0, g = 0, b = 0;
  friend bool operator==(const Color&, const Color&) = default;
};

inline constexpr Color kWhite{255, 255, 255};
inline constexpr Color kBlack{0, 0, 0};

class Image {
 public:
  // Throws std::invalid_argument unless 0 < width, height <= 16384 (a larger picture is a bug).
  Image(int width, int height, Color background = kWhite);

  int width() const { return width_; }
  int height() const { return height_; }

  // Checked access: throws std::invalid_argument for a pixel outside the image.
  Color& at(int x, int y);
  Color at(int x, int y) const;

  // Drawing clips at the edges, so a shape partly outside the image is drawn in part.
  void set(int x, int y, Color c);
  void fill_rect(int x, int y, int w, int h, Color c);
  void draw_rect(int x, int y, int w, int h, Color c);  // a one-pixel outline
  // Bresenham's line from (x0, y0) to (x1, y1), both ends included; `thickness` > 1 stamps a
  // thickness x thickness square at every step.
  void draw_line(int x0, int y0, int x1, int y1, Color c, int thickness = 1);

  // Row-major, top row first.
  const std::vector<Color>& pixels() const { return pixels_; }

 private:
  bool inside(int x, int y) const { return x >= 0 && y >= 0 && x < width_ && y < height_; }
  std::size_t index(int x, int y) const;  // throws outside the image
  int width_, height_;
  std::vector<Color> pixels_;
};

// Writes `image` as an 8-bit RGB PNG, with io::write_file_atomically: a reader never sees half a
// file, and a link at `path` is replaced, not followed. Throws std::runtime_error naming the path.
void write_png(const Image& image, const std::string& path);

}  // namespace ag::plot
