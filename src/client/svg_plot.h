// A line plot written as SVG text (no library): panels side by side, each with axes, ticks and
// grid lines, one line with markers per series (series k has the same colour in every panel), and
// one legend under the title. Used for `dspark bench serve --sweep` and `dspark bench spec --plot`.
#pragma once

#include <string>
#include <vector>

namespace dspark {

struct PlotSeries {
  std::string name;
  std::vector<double> x, y;  // same length; a NaN y leaves a gap
};

struct PlotPanel {
  std::string title, x_label, y_label;
  bool log2_x = true;  // x on a log2 axis (concurrency 1, 2, 4, ...), ticks at the data's x
  std::vector<PlotSeries> series;
};

// The whole SVG document. Throws Error if a series' x and y differ in length or an x is not
// positive on a log axis.
std::string svg_plot(const std::string& title, const std::vector<PlotPanel>& panels);

// A "nice" axis step (1, 2, 2.5 or 5 times a power of ten) giving about `ticks` ticks up to max.
double nice_step(double max, int ticks);

}  // namespace dspark
