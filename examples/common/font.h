// Text for the plots, drawn from GNU Unifont's .hex file so any Chinese character a tokenizer
// produces has a glyph, with no font engine: every glyph is a 16-row bitmap, 8 or 16 pixels wide.
//
// A .hex line is `CODEPOINT:BITMAP`, e.g. `0041:0000000018242442427E424242420000` for 'A': 32 hex
// digits are 16 rows of one byte (8 wide), 64 are 16 rows of two bytes (16 wide), top row first,
// most significant bit leftmost.
//
// The file is /usr/share/unifont/unifont.hex (Debian package `unifont`) unless the environment
// variable ATTOGRAD_UNIFONT_HEX names another one.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "image.h"

namespace ag::plot {

inline constexpr int kGlyphHeight = 16;

struct Glyph {
  int width = 8;                         // 8 (Latin, digits) or 16 (CJK, wide symbols)
  std::array<std::uint16_t, 16> rows{};  // top row first; pixel x of a row is bit (width - 1 - x)
  bool pixel(int x, int y) const { return (rows[static_cast<std::size_t>(y)] >> (width - 1 - x)) & 1u; }
};

class Font {
 public:
  // Parses a whole .hex file. Throws std::runtime_error naming the path: a missing file also names
  // the Debian package, a malformed line its line number.
  static Font load(const std::string& hex_path);

  // nullptr when the font has no glyph for `codepoint`.
  const Glyph* find(char32_t codepoint) const;
  std::size_t size() const { return glyphs_.size(); }

 private:
  std::unordered_map<char32_t, Glyph> glyphs_;
};

// $ATTOGRAD_UNIFONT_HEX when set and not empty, else the Debian path.
std::string unifont_path();

// The font at unifont_path(), parsed on first use and kept for the life of the program. If
// loading throws, the next call tries again.
const Font& default_font();

// UTF-8 to code points. Each byte that does not start a valid, shortest-form sequence becomes
// U+FFFD, so text from a tokenizer that split a character in two still draws something.
std::u32string decode_utf8(std::string_view utf8);

// Width in pixels of one line of text; its height is kGlyphHeight * scale. A character the font
// lacks counts as (and is drawn as) an 8-wide box. `scale` (1..16) repeats each font pixel.
int text_width(const std::u32string& text, int scale = 1);
int text_width(const std::string& utf8, int scale = 1);

// Draws one line of text with its top-left corner at (x, y); only the set pixels are painted.
void draw_text(Image& image, int x, int y, const std::u32string& text, Color color, int scale = 1);
void draw_text(Image& image, int x, int y, const std::string& utf8, Color color, int scale = 1);

// The same text turned a quarter turn counter-clockwise, read from bottom to top (an axis label
// or a long column label). (x, y) is the top-left corner of the turned box, which is
// kGlyphHeight * scale wide and text_width(text, scale) tall.
void draw_text_up(Image& image, int x, int y, const std::u32string& text, Color color, int scale = 1);
void draw_text_up(Image& image, int x, int y, const std::string& utf8, Color color, int scale = 1);

}  // namespace ag::plot
