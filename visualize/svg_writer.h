// Writing SVG text: escaping, estimated text widths, and a small writer. Shared by the timeline's parts.
#pragma once

#include <iterator>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace trainsim::visualize {

/// Appends `s` to `out` with XML escapes (control characters become spaces).
inline void append_escaped(std::string& out, std::string_view s) {
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // XML 1.0 forbids most control characters, even escaped.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') out += ' ';
        else out += c;
    }
  }
}

/// Estimated width of `s` in pixels at `font` px, sans-serif (DejaVu Sans metrics, slightly generous).
inline double text_width(std::string_view s, double font) {
  double w = 0;
  for (unsigned char c : s) {
    if ((c & 0xC0) == 0x80) continue;  // UTF-8 continuation byte
    if (c == ' ') w += 0.32;
    else if (c >= 'A' && c <= 'Z') w += 0.70;
    else if (c == 'i' || c == 'l' || c == 'I' || c == '.' || c == ',' || c == ':' || c == '|') w += 0.30;
    else w += 0.62;
  }
  return w * font;
}

/// An SVG document being written.
struct Svg {
  std::string s;
  template <typename... T>
  void put(fmt::format_string<T...> f, T&&... args) {
    fmt::format_to(std::back_inserter(s), f, std::forward<T>(args)...);
  }
  /// <text> at (x, y) with extra attributes `attrs` (already escaped) and escaped content.
  void text(double x, double y, std::string_view content, std::string_view attrs = {}) {
    put("<text x=\"{:.1f}\" y=\"{:.1f}\"{}{}>", x, y, attrs.empty() ? "" : " ", attrs);
    append_escaped(s, content);
    s += "</text>\n";
  }
};

}  // namespace trainsim::visualize
