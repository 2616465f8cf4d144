#pragma once
// Small SVG and HTML building blocks for the reports: an SVG canvas that formats numbers the same
// way on every machine, escaping of text that comes from inputs, and a line plot with axes.

#include <string>
#include <string_view>
#include <vector>

namespace trainsim::report {

// Escapes &, <, >, " and ' for HTML text and attribute values.
std::string html_escape(std::string_view text);

class Svg {
 public:
  Svg(double width, double height, std::string_view label);
  void rect(double x, double y, double w, double h, std::string_view fill, std::string_view title = {});
  void line(double x1, double y1, double x2, double y2, std::string_view stroke, double width = 1,
            std::string_view dash = {});
  void polyline(const std::vector<std::pair<double, double>>& points, std::string_view stroke, double width = 2);
  void polygon(const std::vector<std::pair<double, double>>& points, std::string_view fill,
               std::string_view title = {});
  void circle(double x, double y, double r, std::string_view fill, std::string_view title = {});
  // anchor: "start", "middle" or "end".
  void text(double x, double y, std::string_view text, std::string_view anchor = "start", double size = 11,
            std::string_view fill = "#222");
  std::string str() const;

 private:
  double width_, height_;
  std::string label_;
  std::string body_;
};

// Nice tick values covering [lo, hi], about `count` of them.
std::vector<double> ticks(double lo, double hi, int count = 5);
// Tick labels without trailing zeros: 0, 0.5, 1, 2.5, 1000.
std::string tick_label(double v);

struct Series {
  std::string name;
  std::string color;
  std::vector<std::pair<double, double>> points;  // (x, y)
};

struct PlotOptions {
  std::string title, x_label, y_label;
  bool log2_x = false;  // x axis in powers of two (GPU counts)
  bool percent_y = false;
  double y_min = 0;
  double y_max = 0;  // 0: from the data
  double width = 460, height = 280;
};

// A line plot with axes, ticks, a legend and a marker per point.
std::string line_plot(const std::vector<Series>& series, const PlotOptions& options);

}  // namespace trainsim::report
