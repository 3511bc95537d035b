#include "visualize/timeline_stack.h"

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "visualize/svg_writer.h"
#include "visualize/timeline_svg.h"

namespace trainsim::visualize {

namespace {

// The value of attribute `name` of the document's root <svg> element.
double root_attribute(const std::string& svg, const char* name) {
  const std::size_t root = svg.find("<svg");
  const std::string key = std::string(" ") + name + "=\"";
  const std::size_t at = svg.find(key, root);
  return at == std::string::npos ? 0 : std::atof(svg.c_str() + at + key.size());
}

}  // namespace

std::string timeline_stack_svg(const std::vector<StackedTimeline>& parts, const std::string& title, double width) {
  double longest = 0;
  for (const StackedTimeline& p : parts) longest = std::max(longest, to_seconds(p.trace.makespan()));
  std::vector<std::string> drawn;
  double total_width = 0, y = 48;
  for (const StackedTimeline& p : parts) {
    TimelineOptions o;
    o.title = p.title;
    o.cost = p.cost;
    o.row_name = p.row_name;
    o.px_per_second = longest > 0 ? width / longest : 1;
    o.min_time_width = 1;
    o.max_time_width = width;
    std::string svg = timeline_svg(p.trace, o);
    const std::size_t root = svg.find("<svg");
    if (root != std::string::npos) svg = svg.substr(root);
    const double w = root_attribute(svg, "width"), h = root_attribute(svg, "height");
    // Nested at its place: <svg x=.. y=..> keeps its own coordinates.
    svg.replace(0, 4, fmt::format("<svg x=\"0\" y=\"{:.0f}\"", y));
    drawn.push_back(std::move(svg));
    total_width = std::max(total_width, w);
    y += h + 8;
  }
  std::string out = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" "
      "width=\"{0:.0f}\" height=\"{1:.0f}\" viewBox=\"0 0 {0:.0f} {1:.0f}\" font-family=\"sans-serif\">\n"
      "<rect x=\"0\" y=\"0\" width=\"{0:.0f}\" height=\"{1:.0f}\" fill=\"#ffffff\"/>\n",
      std::max(total_width, 400.0), y);
  out += "<text x=\"16\" y=\"30\" font-size=\"20\" font-weight=\"bold\">";
  append_escaped(out, title);
  out += "</text>\n";
  for (const std::string& s : drawn) out += s + "\n";
  return out + "</svg>\n";
}

}  // namespace trainsim::visualize
