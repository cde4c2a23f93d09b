#include "font.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace ag::plot {

namespace {

constexpr const char* kDebianUnifontHex = "/usr/share/unifont/unifont.hex";
constexpr char32_t kReplacement = 0xFFFD;

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// Parses "XXXX:HEX" into (codepoint, glyph); false when the line is not in that form.
bool parse_hex_line(std::string_view line, char32_t& codepoint, Glyph& glyph) {
  std::size_t colon = line.find(':');
  if (colon == 0 || colon > 6 || colon == std::string_view::npos) return false;
  codepoint = 0;
  for (char c : line.substr(0, colon)) {
    int d = hex_digit(c);
    if (d < 0) return false;
    codepoint = codepoint * 16 + static_cast<char32_t>(d);
  }
  std::string_view bits = line.substr(colon + 1);
  if (bits.size() != 32 && bits.size() != 64) return false;
  glyph.width = bits.size() == 32 ? 8 : 16;
  std::size_t digits_per_row = bits.size() / 16;
  for (std::size_t row = 0; row < 16; ++row) {
    std::uint16_t value = 0;
    for (std::size_t k = 0; k < digits_per_row; ++k) {
      int d = hex_digit(bits[row * digits_per_row + k]);
      if (d < 0) return false;
      value = static_cast<std::uint16_t>(value * 16 + d);
    }
    glyph.rows[row] = value;
  }
  return true;
}

// Drawn for a character the font lacks: an outlined 8x16 box, so the gap is visible.
const Glyph& missing_glyph() {
  static const Glyph box = [] {
    Glyph g;
    g.rows[2] = g.rows[13] = 0x7E;                                                    // .XXXXXX.
    for (int row = 3; row < 13; ++row) g.rows[static_cast<std::size_t>(row)] = 0x42;  // .X....X.
    return g;
  }();
  return box;
}

const Glyph& glyph_for(char32_t codepoint) {
  const Glyph* g = default_font().find(codepoint);
  return g ? *g : missing_glyph();
}

void check_scale(const char* op, int scale) {
  if (scale < 1 || scale > 16) throw std::invalid_argument(fmt::format("{}: scale {} is not in 1..16", op, scale));
}

// Calls plot(px, py) for every set pixel of the text laid out left to right from (0, 0).
template <class Plot>
void for_each_text_pixel(const std::u32string& text, int scale, Plot plot) {
  int pen = 0;
  for (char32_t c : text) {
    const Glyph& g = glyph_for(c);
    for (int y = 0; y < kGlyphHeight; ++y)
      for (int x = 0; x < g.width; ++x)
        if (g.pixel(x, y))
          for (int dy = 0; dy < scale; ++dy)
            for (int dx = 0; dx < scale; ++dx) plot(pen + x * scale + dx, y * scale + dy);
    pen += g.width * scale;
  }
}

}  // namespace

Font Font::load(const std::string& hex_path) {
  std::ifstream in(hex_path);
  if (!in)
    throw std::runtime_error(
        fmt::format("unifont: cannot open '{}' ({}); install the Debian package `unifont` (apt-get install unifont) "
                    "or set ATTOGRAD_UNIFONT_HEX to a Unifont .hex file",
                    hex_path, std::strerror(errno)));
  Font font;
  std::string line;
  for (int line_number = 1; std::getline(in, line); ++line_number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();  // a file saved with CRLF endings
    if (line.empty()) continue;
    char32_t codepoint = 0;
    Glyph glyph;
    if (!parse_hex_line(line, codepoint, glyph))
      throw std::runtime_error(fmt::format("unifont: '{}' line {}: expected CODEPOINT:BITMAP with 32 or 64 hex digits",
                                           hex_path, line_number));
    font.glyphs_[codepoint] = glyph;
  }
  if (in.bad()) throw std::runtime_error(fmt::format("unifont: error reading '{}'", hex_path));
  if (font.glyphs_.empty()) throw std::runtime_error(fmt::format("unifont: '{}' has no glyphs", hex_path));
  return font;
}

const Glyph* Font::find(char32_t codepoint) const {
  auto it = glyphs_.find(codepoint);
  return it == glyphs_.end() ? nullptr : &it->second;
}

std::string unifont_path() {
  const char* env = std::getenv("ATTOGRAD_UNIFONT_HEX");
  return env && *env ? env : kDebianUnifontHex;
}

const Font& default_font() {
  // A function-local static is built once, thread-safely; if load throws it is retried next call.
  static const Font font = Font::load(unifont_path());
  return font;
}

std::u32string decode_utf8(std::string_view utf8) {
  std::u32string out;
  out.reserve(utf8.size());
  std::size_t i = 0;
  while (i < utf8.size()) {
    auto lead = static_cast<unsigned char>(utf8[i]);
    std::size_t length = 0;
    char32_t cp = 0, smallest = 0;  // smallest: below it the sequence is an overlong encoding
    if (lead < 0x80)
      length = 1, cp = lead;
    else if ((lead & 0xE0) == 0xC0)
      length = 2, cp = lead & 0x1Fu, smallest = 0x80;
    else if ((lead & 0xF0) == 0xE0)
      length = 3, cp = lead & 0x0Fu, smallest = 0x800;
    else if ((lead & 0xF8) == 0xF0)
      length = 4, cp = lead & 0x07u, smallest = 0x10000;
    bool ok = length > 0 && i + length <= utf8.size();
    for (std::size_t k = 1; ok && k < length; ++k) {
      auto next = static_cast<unsigned char>(utf8[i + k]);
      ok = (next & 0xC0) == 0x80;
      cp = (cp << 6) | (next & 0x3Fu);
    }
    ok = ok && cp >= smallest && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    out.push_back(ok ? cp : kReplacement);
    i += ok ? length : 1;  // resynchronise on the next byte after a bad one
  }
  return out;
}

int text_width(const std::u32string& text, int scale) {
  check_scale("text_width", scale);
  int width = 0;
  for (char32_t c : text) width += glyph_for(c).width * scale;
  return width;
}

int text_width(const std::string& utf8, int scale) { return text_width(decode_utf8(utf8), scale); }

void draw_text(Image& image, int x, int y, const std::u32string& text, Color color, int scale) {
  check_scale("draw_text", scale);
  for_each_text_pixel(text, scale, [&](int px, int py) { image.set(x + px, y + py, color); });
}

void draw_text(Image& image, int x, int y, const std::string& utf8, Color color, int scale) {
  draw_text(image, x, y, decode_utf8(utf8), color, scale);
}

void draw_text_up(Image& image, int x, int y, const std::u32string& text, Color color, int scale) {
  check_scale("draw_text_up", scale);
  // A quarter turn counter-clockwise: the text's x runs up the image, its y runs right.
  int bottom = y + text_width(text, scale) - 1;
  for_each_text_pixel(text, scale, [&](int px, int py) { image.set(x + py, bottom - px, color); });
}

void draw_text_up(Image& image, int x, int y, const std::string& utf8, Color color, int scale) {
  draw_text_up(image, x, y, decode_utf8(utf8), color, scale);
}

}  // namespace ag::plot
