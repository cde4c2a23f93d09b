#include "image.h"

// libpng's header by its versioned path: a plain <png.h> could find this folder's png.h.
#include <png.h>

#include <attograd/attograd.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace ag::plot {

namespace {
constexpr int kMaxSide = 16384;
}

Image::Image(int width, int height, Color background) : width_(width), height_(height) {
  if (width <= 0 || height <= 0 || width > kMaxSide || height > kMaxSide)
    throw std::invalid_argument(fmt::format("Image: size {}x{} is not in 1..{} on each side", width, height, kMaxSide));
  pixels_.assign(static_cast<std::size_t>(width) * static_cast<std::size_t>(height), background);
}

std::size_t Image::index(int x, int y) const {
  if (!inside(x, y))
    throw std::invalid_argument(
        fmt::format("Image::at: pixel ({}, {}) is outside the {}x{} image", x, y, width_, height_));
  return static_cast<std::size_t>(y) * static_cast<std::size_t>(width_) + static_cast<std::size_t>(x);
}

Color& Image::at(int x, int y) { return pixels_[index(x, y)]; }
Color Image::at(int x, int y) const { return pixels_[index(x, y)]; }

void Image::set(int x, int y, Color c) {
  if (inside(x, y)) at(x, y) = c;
}

void Image::fill_rect(int x, int y, int w, int h, Color c) {
  // Clip once, then fill rows: the heat map paints most of its pixels through here.
  int x0 = std::max(x, 0), y0 = std::max(y, 0);
  int x1 = std::min(x + w, width_), y1 = std::min(y + h, height_);
  for (int row = y0; row < y1; ++row)
    for (int col = x0; col < x1; ++col) at(col, row) = c;
}

void Image::draw_rect(int x, int y, int w, int h, Color c) {
  if (w <= 0 || h <= 0) return;
  fill_rect(x, y, w, 1, c);
  fill_rect(x, y + h - 1, w, 1, c);
  fill_rect(x, y, 1, h, c);
  fill_rect(x + w - 1, y, 1, h, c);
}

void Image::draw_line(int x0, int y0, int x1, int y1, Color c, int thickness) {
  // Bresenham: step along the major axis, carry the error along the minor one.
  int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
  int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
  int err = dx + dy;
  int half = (std::max(thickness, 1) - 1) / 2;
  for (;;) {
    if (thickness <= 1)
      set(x0, y0, c);
    else
      fill_rect(x0 - half, y0 - half, thickness, thickness, c);
    if (x0 == x1 && y0 == y1) break;
    int e2 = 2 * err;
    if (e2 >= dy) err += dy, x0 += sx;
    if (e2 <= dx) err += dx, y0 += sy;
  }
}

void write_png(const Image& image, const std::string& path) {
  std::vector<std::uint8_t> rgb;
  rgb.reserve(image.pixels().size() * 3);
  for (Color c : image.pixels()) rgb.insert(rgb.end(), {c.r, c.g, c.b});

  // libpng's simplified API reports errors in png.message instead of longjmp-ing out of here.
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(image.width());
  png.height = static_cast<png_uint_32>(image.height());
  png.format = PNG_FORMAT_RGB;

  // Encoded in memory (a first call asks for the size, the second writes), then written as every
  // file of attograd is (io::write_file_atomically): to a new temporary file, renamed over `path`.
  png_alloc_size_t size = 0;
  std::string bytes;
  bool encoded = png_image_write_to_memory(&png, nullptr, &size, 0, rgb.data(), 0, nullptr);
  if (encoded) {
    bytes.resize(size);
    encoded = png_image_write_to_memory(&png, bytes.data(), &size, 0, rgb.data(), 0, nullptr);
  }
  if (!encoded) {
    std::string why = png.message;
    png_image_free(&png);
    throw std::runtime_error(fmt::format("write_png: cannot encode '{}': {}", path, why));
  }
  bytes.resize(size);
  try {
    ag::io::write_file_atomically(path, bytes);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(fmt::format("write_png: {}", e.what()));
  }
}

}  // namespace ag::plot
