#include "client/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

#include "core/error.h"

namespace dspark {

namespace {

constexpr double kPanelW = 480, kPanelH = 380, kTitleH = 56;
constexpr double kLeft = 72, kRight = 20, kTop = 34, kBottom = 58;
const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                               "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

std::string tick_label(double v) {
  char b[32];
  if (std::fabs(v - std::round(v)) < 1e-9)
    std::snprintf(b, sizeof b, "%.0f", v);
  else
    std::snprintf(b, sizeof b, "%g", v);
  return b;
}

void panel(std::ostringstream& os, const PlotPanel& p, double ox, double oy) {
  const double w = kPanelW - kLeft - kRight, h = kPanelH - kTop - kBottom;
  const double x0 = ox + kLeft, y0 = oy + kTop;  // plot area's top-left
  std::set<double> xs;
  double ymax = 0;
  for (const auto& s : p.series) {
    if (s.x.size() != s.y.size()) fail("plot series ", s.name, ": x and y differ in length");
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (p.log2_x && !(s.x[i] > 0)) fail("plot series ", s.name, ": x must be > 0 on a log axis");
      xs.insert(s.x[i]);
      if (std::isfinite(s.y[i])) ymax = std::max(ymax, s.y[i]);
    }
  }
  auto tx = [&](double v) { return p.log2_x ? std::log2(v) : v; };
  double xlo = xs.empty() ? 0 : tx(*xs.begin()), xhi = xs.empty() ? 1 : tx(*xs.rbegin());
  if (xhi <= xlo) {
    xlo -= 0.5;
    xhi += 0.5;
  }
  const double pad = 0.04 * (xhi - xlo);
  xlo -= pad;
  xhi += pad;
  const double step = nice_step(ymax > 0 ? ymax : 1, 5);
  const double ytop = std::max(step, std::ceil(ymax * 1.05 / step) * step);
  auto X = [&](double v) { return x0 + (tx(v) - xlo) / (xhi - xlo) * w; };
  auto Y = [&](double v) { return y0 + h - v / ytop * h; };

  os << "<text x=\"" << num(ox + kPanelW / 2) << "\" y=\"" << num(oy + 20)
     << "\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">" << esc(p.title)
     << "</text>\n";
  // Grid and y ticks.
  for (double v = 0; v <= ytop + step * 1e-6; v += step) {
    os << "<line x1=\"" << num(x0) << "\" y1=\"" << num(Y(v)) << "\" x2=\"" << num(x0 + w)
       << "\" y2=\"" << num(Y(v)) << "\" stroke=\"#e0e0e0\"/>\n";
    os << "<text x=\"" << num(x0 - 6) << "\" y=\"" << num(Y(v) + 4)
       << "\" text-anchor=\"end\" font-size=\"11\">" << tick_label(v) << "</text>\n";
  }
  for (double v : xs) {
    os << "<line x1=\"" << num(X(v)) << "\" y1=\"" << num(y0 + h) << "\" x2=\"" << num(X(v))
       << "\" y2=\"" << num(y0 + h + 5) << "\" stroke=\"#000\"/>\n";
    os << "<text x=\"" << num(X(v)) << "\" y=\"" << num(y0 + h + 18)
       << "\" text-anchor=\"middle\" font-size=\"11\">" << tick_label(v) << "</text>\n";
  }
  // Axes and labels.
  os << "<polyline points=\"" << num(x0) << "," << num(y0) << " " << num(x0) << "," << num(y0 + h)
     << " " << num(x0 + w) << "," << num(y0 + h) << "\" fill=\"none\" stroke=\"#000\"/>\n";
  os << "<text x=\"" << num(x0 + w / 2) << "\" y=\"" << num(y0 + h + 40)
     << "\" text-anchor=\"middle\" font-size=\"12\">" << esc(p.x_label) << "</text>\n";
  os << "<text transform=\"translate(" << num(ox + 16) << "," << num(y0 + h / 2)
     << ") rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">" << esc(p.y_label) << "</text>\n";
  // Lines (broken at NaN) and markers.
  for (size_t k = 0; k < p.series.size(); ++k) {
    const auto& s = p.series[k];
    const char* color = kColors[k % (sizeof kColors / sizeof kColors[0])];
    std::string pts;
    auto flush = [&] {
      if (!pts.empty())
        os << "<polyline points=\"" << pts << "\" fill=\"none\" stroke=\"" << color
           << "\" stroke-width=\"2\"/>\n";
      pts.clear();
    };
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.y[i])) {
        flush();
        continue;
      }
      pts += (pts.empty() ? "" : " ") + num(X(s.x[i])) + "," + num(Y(s.y[i]));
    }
    flush();
    for (size_t i = 0; i < s.x.size(); ++i)
      if (std::isfinite(s.y[i]))
        os << "<circle cx=\"" << num(X(s.x[i])) << "\" cy=\"" << num(Y(s.y[i]))
           << "\" r=\"3.5\" fill=\"" << color << "\"/>\n";
  }
}

// One legend for all panels, centred under the title: a series' colour is its index, the same in
// every panel.
void legend(std::ostringstream& os, const std::vector<std::string>& names, double W, double y) {
  std::vector<double> widths;
  double total = 0;
  for (const auto& n : names) total += (widths.emplace_back(34 + 7.0 * double(n.size()) + 18));
  double x = std::max(8.0, (W - total) / 2);
  for (size_t k = 0; k < names.size(); ++k) {
    const char* color = kColors[k % (sizeof kColors / sizeof kColors[0])];
    os << "<line x1=\"" << num(x) << "\" y1=\"" << num(y - 4) << "\" x2=\"" << num(x + 26)
       << "\" y2=\"" << num(y - 4) << "\" stroke=\"" << color << "\" stroke-width=\"2\"/>\n";
    os << "<circle cx=\"" << num(x + 13) << "\" cy=\"" << num(y - 4) << "\" r=\"3.5\" fill=\""
       << color << "\"/>\n";
    os << "<text x=\"" << num(x + 32) << "\" y=\"" << num(y) << "\" font-size=\"12\">"
       << esc(names[k]) << "</text>\n";
    x += widths[k];
  }
}

}  // namespace

double nice_step(double max, int ticks) {
  if (!(max > 0) || ticks < 1) return 1;
  const double raw = max / ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

std::string svg_plot(const std::string& title, const std::vector<PlotPanel>& panels) {
  const double W = kPanelW * double(std::max<size_t>(panels.size(), 1)), H = kPanelH + kTitleH;
  std::ostringstream os;
  os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
     << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(W) << "\" height=\"" << num(H)
     << "\" viewBox=\"0 0 " << num(W) << " " << num(H) << "\" font-family=\"sans-serif\">\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n"
     << "<text x=\"" << num(W / 2) << "\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">"
     << esc(title) << "</text>\n";
  std::vector<std::string> names;
  for (const auto& p : panels)
    for (size_t k = 0; k < p.series.size(); ++k)
      if (k >= names.size()) names.push_back(p.series[k].name);
  legend(os, names, W, 46);
  for (size_t i = 0; i < panels.size(); ++i) panel(os, panels[i], kPanelW * double(i), kTitleH);
  os << "</svg>\n";
  return os.str();
}

}  // namespace dspark
