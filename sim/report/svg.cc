#include "report/svg.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace trainsim::report {

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {

// Coordinates with one decimal; "-0.0" never appears.
std::string n(double v) {
  std::string s = fmt::format("{:.1f}", v);
  if (s == "-0.0") s = "0.0";
  return s;
}

std::string title_tag(std::string_view title) {
  return title.empty() ? std::string() : fmt::format("<title>{}</title>", html_escape(title));
}

}  // namespace

Svg::Svg(double width, double height, std::string_view label) : width_(width), height_(height), label_(label) {
}

void Svg::rect(double x, double y, double w, double h, std::string_view fill, std::string_view title) {
  if (title.empty()) {
    body_ +=
        fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>", n(x), n(y), n(w), n(h), fill);
  } else {
    body_ += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\">{}</rect>", n(x), n(y), n(w),
                         n(h), fill, title_tag(title));
  }
  body_ += '\n';
}

void Svg::line(double x1, double y1, double x2, double y2, std::string_view stroke, double width,
               std::string_view dash) {
  body_ += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"{}\"{}/>\n", n(x1),
                       n(y1), n(x2), n(y2), stroke, n(width),
                       dash.empty() ? std::string() : fmt::format(" stroke-dasharray=\"{}\"", dash));
}

void Svg::polyline(const std::vector<std::pair<double, double>>& points, std::string_view stroke, double width) {
  std::string pts;
  for (const auto& [x, y] : points) pts += fmt::format("{}{},{}", pts.empty() ? "" : " ", n(x), n(y));
  body_ +=
      fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{}\"/>\n", pts, stroke, n(width));
}

void Svg::polygon(const std::vector<std::pair<double, double>>& points, std::string_view fill, std::string_view title) {
  std::string pts;
  for (const auto& [x, y] : points) pts += fmt::format("{}{},{}", pts.empty() ? "" : " ", n(x), n(y));
  body_ += fmt::format("<polygon points=\"{}\" fill=\"{}\">{}</polygon>\n", pts, fill, title_tag(title));
}

void Svg::circle(double x, double y, double r, std::string_view fill, std::string_view title) {
  body_ += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{}\">{}</circle>\n", n(x), n(y), n(r), fill,
                       title_tag(title));
}

void Svg::text(double x, double y, std::string_view text, std::string_view anchor, double size, std::string_view fill) {
  body_ += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"{}\" font-size=\"{}\" fill=\"{}\">{}</text>\n", n(x),
                       n(y), anchor, n(size), fill, html_escape(text));
}

std::string Svg::str() const {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" role=\"img\" "
      "aria-label=\"{2}\">\n{3}</svg>\n",
      n(width_), n(height_), html_escape(label_), body_);
}

std::vector<double> ticks(double lo, double hi, int count) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / std::max(1, count);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  std::vector<double> out;
  const double first = std::ceil(lo / step - 1e-9);
  for (int i = 0;; ++i) {
    const double v = (first + i) * step;
    if (v > hi + step * 1e-9) break;
    out.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
  }
  if (out.empty() || out.back() < hi - step * 1e-9) out.push_back((out.empty() ? lo : out.back()) + step);
  return out;
}

std::string tick_label(double v) {
  std::string s = fmt::format("{:.6f}", v);
  s.erase(s.find_last_not_of('0') + 1);
  if (s.back() == '.') s.pop_back();
  if (s == "-0") s = "0";
  if (std::abs(v) >= 1e4 && std::abs(v - std::round(v)) < 1e-9) {
    // Thousands separators for large integers: 12,000.
    std::string digits = fmt::format("{:.0f}", std::abs(v)), grouped;
    for (std::size_t i = 0; i < digits.size(); ++i) {
      grouped += digits[i];
      if ((digits.size() - i - 1) % 3 == 0 && i + 1 < digits.size()) grouped += ',';
    }
    s = (v < 0 ? "-" : "") + grouped;
  }
  return s;
}

std::string line_plot(const std::vector<Series>& series, const PlotOptions& o) {
  const double left = 64, right = 16, top = 40, bottom = 62;
  const double pw = o.width - left - right, ph = o.height - top - bottom;
  double x_lo = 0, x_hi = 0, y_hi = o.y_max;
  bool first = true;
  for (const auto& s : series)
    for (const auto& [x, y] : s.points) {
      const double xv = o.log2_x ? std::log2(x) : x;
      if (first) x_lo = x_hi = xv;
      x_lo = std::min(x_lo, xv);
      x_hi = std::max(x_hi, xv);
      if (o.y_max <= 0) y_hi = std::max(y_hi, y);
      first = false;
    }
  if (x_hi <= x_lo) {
    x_lo -= 1;
    x_hi += 1;
  }
  const double y_lo = o.y_min;
  const auto yt = ticks(y_lo, y_hi > y_lo ? y_hi * (o.y_max > 0 ? 1.0 : 1.05) : y_lo + 1);
  const double y_top = yt.back();
  auto px = [&](double x) { return left + ((o.log2_x ? std::log2(x) : x) - x_lo) / (x_hi - x_lo) * pw; };
  auto py = [&](double y) { return top + ph - (y - y_lo) / (y_top - y_lo) * ph; };

  Svg svg(o.width, o.height, o.title);
  svg.text(left, 16, o.title, "start", 13);
  for (double t : yt) {
    svg.line(left, py(t), left + pw, py(t), "#e3e3e3");
    svg.text(left - 6, py(t) + 4, o.percent_y ? tick_label(t * 100) + "%" : tick_label(t), "end", 10);
  }
  // x ticks at the data points (GPU counts), or nice values.
  std::vector<double> xs;
  for (const auto& s : series)
    for (const auto& p : s.points) xs.push_back(p.first);
  std::sort(xs.begin(), xs.end());
  xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
  if (!o.log2_x || xs.empty()) xs = ticks(x_lo, x_hi);
  for (double t : xs) {
    svg.line(px(t), top + ph, px(t), top + ph + 4, "#555");
    svg.text(px(t), top + ph + 16, tick_label(t), "middle", 10);
  }
  svg.line(left, top + ph, left + pw, top + ph, "#555");
  svg.line(left, top, left, top + ph, "#555");
  svg.text(left + pw / 2, top + ph + 32, o.x_label, "middle", 11);
  svg.text(left, 32, o.y_label, "start", 10, "#555");
  double lx = left;
  for (const auto& s : series) {
    std::vector<std::pair<double, double>> pts;
    for (const auto& [x, y] : s.points) pts.emplace_back(px(x), py(y));
    svg.polyline(pts, s.color);
    for (std::size_t i = 0; i < pts.size(); ++i)
      svg.circle(pts[i].first, pts[i].second, 3, s.color,
                 fmt::format("{}: {} at {}", s.name, tick_label(std::round(s.points[i].second * 1e4) / 1e4),
                             tick_label(s.points[i].first)));
    if (series.size() > 1) {
      svg.rect(lx, o.height - 14, 10, 10, s.color);
      svg.text(lx + 14, o.height - 5, s.name, "start", 10);
      lx += 24 + 6.5 * static_cast<double>(s.name.size());
    }
  }
  return svg.str();
}

}  // namespace trainsim::report
