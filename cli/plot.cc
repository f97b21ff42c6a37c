#include "cli/plot.h"

#include <cairo.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

namespace flowstate {
namespace {

struct Rgb {
  double r, g, b;
};

constexpr Rgb kBlack{0.1, 0.1, 0.1}, kGrey{0.45, 0.45, 0.45}, kGrid{0.9, 0.9, 0.9},
    kFrame{0.6, 0.6, 0.6}, kWhite{1, 1, 1};
// Distinct colors (the usual categorical palette): the training loss first.
constexpr Rgb kPalette[] = {{0.12, 0.47, 0.71}, {0.84, 0.15, 0.16}, {0.17, 0.63, 0.17}, {1.0, 0.50, 0.05},
                            {0.58, 0.40, 0.74}, {0.55, 0.34, 0.29}, {0.89, 0.47, 0.76}, {0.09, 0.75, 0.81}};

enum class Align { kLeft, kCenter, kRight };

// What the layout draws on: an SVG document or a Cairo surface. Coordinates
// in pixels from the top left; text at its baseline.
class Canvas {
 public:
  virtual ~Canvas() = default;
  virtual void Rect(double x, double y, double w, double h, Rgb fill, std::optional<Rgb> stroke) = 0;
  virtual void Line(double x0, double y0, double x1, double y1, Rgb color, double width) = 0;
  // One curve: `name` identifies it in the SVG (data-series).
  virtual void Polyline(const std::vector<std::pair<double, double>>& points, Rgb color, double width,
                        const std::string& name) = 0;
  virtual void Dot(double x, double y, double radius, Rgb color) = 0;
  // rotated: 90 degrees counter-clockwise around (x, y) (a y-axis label).
  virtual void Text(double x, double y, const std::string& text, double size, Align align, Rgb color,
                    bool bold = false, bool rotated = false) = 0;
};

std::string Hex(Rgb c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", int(std::lround(c.r * 255)), int(std::lround(c.g * 255)),
                int(std::lround(c.b * 255)));
  return buf;
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

std::string XmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default:
        // Control characters are not allowed in XML 1.0 text.
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n') out.push_back(c);
    }
  }
  return out;
}

class SvgCanvas final : public Canvas {
 public:
  SvgCanvas(double w, double h) {
    out_ = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" +
           Num(w) + "\" height=\"" + Num(h) + "\" viewBox=\"0 0 " + Num(w) + " " + Num(h) +
           "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n";
  }
  void Rect(double x, double y, double w, double h, Rgb fill, std::optional<Rgb> stroke) override {
    out_ += "<rect x=\"" + Num(x) + "\" y=\"" + Num(y) + "\" width=\"" + Num(w) + "\" height=\"" + Num(h) +
            "\" fill=\"" + Hex(fill) + "\"" +
            (stroke ? " stroke=\"" + Hex(*stroke) + "\" stroke-width=\"1\"" : std::string()) + "/>\n";
  }
  void Line(double x0, double y0, double x1, double y1, Rgb color, double width) override {
    out_ += "<line x1=\"" + Num(x0) + "\" y1=\"" + Num(y0) + "\" x2=\"" + Num(x1) + "\" y2=\"" + Num(y1) +
            "\" stroke=\"" + Hex(color) + "\" stroke-width=\"" + Num(width) + "\"/>\n";
  }
  void Polyline(const std::vector<std::pair<double, double>>& points, Rgb color, double width,
                const std::string& name) override {
    if (points.empty()) return;
    std::string d;
    for (size_t i = 0; i < points.size(); ++i) {
      d += (i ? " L" : "M") + Num(points[i].first) + "," + Num(points[i].second);
    }
    out_ += "<path class=\"series\" data-series=\"" + XmlEscape(name) + "\" d=\"" + d +
            "\" fill=\"none\" stroke=\"" + Hex(color) + "\" stroke-width=\"" + Num(width) +
            "\" stroke-linejoin=\"round\"/>\n";
  }
  void Dot(double x, double y, double radius, Rgb color) override {
    out_ += "<circle cx=\"" + Num(x) + "\" cy=\"" + Num(y) + "\" r=\"" + Num(radius) + "\" fill=\"" + Hex(color) +
            "\"/>\n";
  }
  void Text(double x, double y, const std::string& text, double size, Align align, Rgb color, bool bold,
            bool rotated) override {
    const char* anchor = align == Align::kLeft ? "start" : align == Align::kCenter ? "middle" : "end";
    out_ += "<text x=\"" + Num(x) + "\" y=\"" + Num(y) + "\" font-size=\"" + Num(size) + "\" text-anchor=\"" +
            anchor + "\" fill=\"" + Hex(color) + "\"" + (bold ? " font-weight=\"bold\"" : "") +
            (rotated ? " transform=\"rotate(-90 " + Num(x) + " " + Num(y) + ")\"" : "") + ">" +
            XmlEscape(text) + "</text>\n";
  }
  std::string Finish() { return out_ + "</svg>\n"; }

 private:
  std::string out_;
};

class CairoCanvas final : public Canvas {
 public:
  explicit CairoCanvas(cairo_t* cr) : cr_(cr) {
    cairo_select_font_face(cr_, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  }
  void Rect(double x, double y, double w, double h, Rgb fill, std::optional<Rgb> stroke) override {
    cairo_rectangle(cr_, x, y, w, h);
    Color(fill);
    cairo_fill_preserve(cr_);
    if (stroke) {
      Color(*stroke);
      cairo_set_line_width(cr_, 1);
      cairo_stroke(cr_);
    } else {
      cairo_new_path(cr_);
    }
  }
  void Line(double x0, double y0, double x1, double y1, Rgb color, double width) override {
    cairo_move_to(cr_, x0, y0);
    cairo_line_to(cr_, x1, y1);
    Color(color);
    cairo_set_line_width(cr_, width);
    cairo_stroke(cr_);
  }
  void Polyline(const std::vector<std::pair<double, double>>& points, Rgb color, double width,
                const std::string&) override {
    if (points.empty()) return;
    cairo_move_to(cr_, points[0].first, points[0].second);
    for (size_t i = 1; i < points.size(); ++i) cairo_line_to(cr_, points[i].first, points[i].second);
    Color(color);
    cairo_set_line_width(cr_, width);
    cairo_set_line_join(cr_, CAIRO_LINE_JOIN_ROUND);
    cairo_stroke(cr_);
  }
  void Dot(double x, double y, double radius, Rgb color) override {
    cairo_new_sub_path(cr_);
    cairo_arc(cr_, x, y, radius, 0, 2 * M_PI);
    Color(color);
    cairo_fill(cr_);
  }
  void Text(double x, double y, const std::string& text, double size, Align align, Rgb color, bool bold,
            bool rotated) override {
    cairo_save(cr_);
    cairo_select_font_face(cr_, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr_, size);
    cairo_text_extents_t ext;
    cairo_text_extents(cr_, text.c_str(), &ext);
    const double shift = align == Align::kLeft ? 0 : align == Align::kCenter ? ext.x_advance / 2 : ext.x_advance;
    cairo_translate(cr_, x, y);
    if (rotated) cairo_rotate(cr_, -M_PI / 2);
    cairo_move_to(cr_, -shift, 0);
    Color(color);
    cairo_show_text(cr_, text.c_str());
    cairo_restore(cr_);
  }

 private:
  void Color(Rgb c) { cairo_set_source_rgb(cr_, c.r, c.g, c.b); }
  cairo_t* cr_;
};

// --- Layout.

struct Series {
  std::string name;  // the legend's label
  std::vector<std::pair<double, double>> points;  // (step, value)
  Rgb color;
  bool markers = false;  // evaluations: few points, each marked
};

struct Axis {
  double lo = 0, hi = 1;
  std::vector<double> ticks;
  double step = 1;
};

// Ticks at 1, 2 or 5 times a power of ten, about `n` of them, covering
// [lo, hi]; the axis is widened to the outer ticks.
Axis NiceAxis(double lo, double hi, int n) {
  if (!(hi > lo)) {
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / n;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  }
  Axis a;
  a.step = step;
  a.lo = std::floor(lo / step + 1e-9) * step;
  a.hi = std::ceil(hi / step - 1e-9) * step;
  for (double t = a.lo; t <= a.hi + step * 1e-6; t += step) a.ticks.push_back(std::abs(t) < step * 1e-9 ? 0 : t);
  return a;
}

std::string TickLabel(double v, double step) {
  const int decimals = std::max(0, int(-std::floor(std::log10(step) + 1e-9)));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", std::min(decimals, 6), v);
  return buf;
}

struct Box {
  double x, y, w, h;
};

constexpr double kWidth = 960, kLeft = 84, kRight = 24, kTop = 64, kLossHeight = 320, kMetricHeight = 200,
                 kBelow = 58, kFooter = 26;

void DrawPanel(Canvas& c, const Box& b, const Axis& x, const std::vector<Series>& series, const std::string& y_label,
               std::optional<std::pair<double, double>> y_fixed) {
  double lo = HUGE_VAL, hi = -HUGE_VAL;
  for (const Series& s : series) {
    for (const auto& [step, v] : s.points) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  if (y_fixed) std::tie(lo, hi) = *y_fixed;
  if (!(lo <= hi)) lo = 0, hi = 1;
  if (!y_fixed && hi > lo) {
    const double pad = (hi - lo) * 0.04;
    lo = lo >= 0 && lo - pad < 0 ? 0 : lo - pad;
    hi += pad;
  }
  const Axis y = NiceAxis(lo, hi, 6);
  auto px = [&](double v) { return b.x + (v - x.lo) / (x.hi - x.lo) * b.w; };
  auto py = [&](double v) { return b.y + b.h - (v - y.lo) / (y.hi - y.lo) * b.h; };
  c.Rect(b.x, b.y, b.w, b.h, kWhite, kFrame);
  for (double t : y.ticks) {
    c.Line(b.x, py(t), b.x + b.w, py(t), kGrid, 1);
    c.Line(b.x - 5, py(t), b.x, py(t), kGrey, 1);
    c.Text(b.x - 8, py(t) + 4, TickLabel(t, y.step), 12, Align::kRight, kBlack);
  }
  for (double t : x.ticks) {
    c.Line(px(t), b.y, px(t), b.y + b.h, kGrid, 1);
    c.Line(px(t), b.y + b.h, px(t), b.y + b.h + 5, kGrey, 1);
    c.Text(px(t), b.y + b.h + 19, TickLabel(t, x.step), 12, Align::kCenter, kBlack);
  }
  std::vector<std::pair<double, double>> drawn;  // every point, where the legend should not go
  for (const Series& s : series) {
    std::vector<std::pair<double, double>> pts;
    pts.reserve(s.points.size());
    for (const auto& [step, v] : s.points) pts.emplace_back(px(step), py(v));
    c.Polyline(pts, s.color, s.markers ? 1.5 : 1.6, s.name);
    if (s.markers) {
      for (const auto& [ppx, ppy] : pts) c.Dot(ppx, ppy, 3.2, s.color);
    }
    drawn.insert(drawn.end(), pts.begin(), pts.end());
  }
  c.Text(b.x + b.w / 2, b.y + b.h + 40, "step (batches trained)", 13, Align::kCenter, kBlack);
  c.Text(b.x - 56, b.y + b.h / 2, y_label, 13, Align::kCenter, kBlack, false, true);
  // Legend: top right, one row per series.
  size_t longest = 0;
  for (const Series& s : series) longest = std::max(longest, s.name.size());
  const double lw = 44 + 7.2 * double(longest), lh = 8 + 18 * double(series.size());
  // The corner whose box covers the fewest points (top right on a tie).
  double lx = 0, ly = 0;
  size_t best = SIZE_MAX;
  for (const auto& [cx, cy] : {std::pair{b.x + b.w - lw - 10, b.y + 10}, std::pair{b.x + 10, b.y + 10},
                               std::pair{b.x + b.w - lw - 10, b.y + b.h - lh - 10},
                               std::pair{b.x + 10, b.y + b.h - lh - 10}}) {
    size_t covered = 0;
    for (const auto& [ppx, ppy] : drawn) {
      covered += ppx >= cx - 4 && ppx <= cx + lw + 4 && ppy >= cy - 4 && ppy <= cy + lh + 4;
    }
    if (covered < best) {
      best = covered;
      lx = cx;
      ly = cy;
    }
  }
  c.Rect(lx, ly, lw, lh, kWhite, kFrame);
  for (size_t i = 0; i < series.size(); ++i) {
    const double row = ly + 16 + 18 * double(i);
    c.Line(lx + 8, row - 4, lx + 32, row - 4, series[i].color, 2.2);
    if (series[i].markers) c.Dot(lx + 20, row - 4, 3.2, series[i].color);
    c.Text(lx + 38, row, series[i].name, 12, Align::kLeft, kBlack);
  }
}

struct Layout {
  std::vector<Series> loss_panel, metric_panel;
  Axis x;
  double height = 0;
};

Layout Plan(const JobHistory& h) {
  Layout l;
  Series loss{"training loss", {}, kPalette[0], false};
  for (const JobHistoryStep& s : h.steps) {
    if (std::isfinite(s.loss)) loss.points.emplace_back(double(s.step), s.loss);
  }
  if (!loss.points.empty()) l.loss_panel.push_back(std::move(loss));
  std::map<std::string, Series> metrics;
  for (const JobHistoryEval& e : h.evals) {
    for (const auto& [name, v] : e.metrics) {
      Series& s = metrics[name];
      s.name = "eval " + name;
      s.markers = true;
      if (std::isfinite(v)) s.points.emplace_back(double(e.step), v);
    }
  }
  size_t color = 1;
  for (auto& [name, s] : metrics) {
    if (s.points.empty()) continue;
    s.color = kPalette[color++ % std::size(kPalette)];
    // A loss is drawn with the training loss; other metrics within [0, 1]
    // (accuracy, precision, ...) on the 0-1 panel.
    const bool fraction = name.find("loss") == std::string::npos &&
                          std::all_of(s.points.begin(), s.points.end(),
                                      [](const auto& p) { return p.second >= 0 && p.second <= 1; });
    (fraction ? l.metric_panel : l.loss_panel).push_back(std::move(s));
  }
  double lo = 0, hi = 1;
  for (const auto* panel : {&l.loss_panel, &l.metric_panel}) {
    for (const Series& s : *panel) {
      for (const auto& p : s.points) hi = std::max(hi, p.first);
    }
  }
  l.x = NiceAxis(lo, hi, 8);
  l.height = kTop + kFooter;
  if (!l.loss_panel.empty()) l.height += kLossHeight + kBelow;
  if (!l.metric_panel.empty()) l.height += kMetricHeight + kBelow;
  return l;
}

void Draw(Canvas& c, const Layout& l, const JobHistory& h, const std::string& title) {
  c.Rect(0, 0, kWidth, l.height, kWhite, std::nullopt);
  c.Text(kWidth / 2, 30, title, 18, Align::kCenter, kBlack, true);
  int64_t max_step = 0;
  for (const JobHistoryStep& s : h.steps) max_step = std::max(max_step, s.step);
  c.Text(kWidth / 2, 50,
         "training loss per step" + std::string(l.metric_panel.empty() ? "" : "; evaluation metrics below") +
             " (through step " + std::to_string(max_step) + ")",
         12, Align::kCenter, kGrey);
  double y = kTop;
  const double w = kWidth - kLeft - kRight;
  if (!l.loss_panel.empty()) {
    DrawPanel(c, {kLeft, y, w, kLossHeight}, l.x, l.loss_panel, "loss", std::nullopt);
    y += kLossHeight + kBelow;
  }
  if (!l.metric_panel.empty()) {
    DrawPanel(c, {kLeft, y, w, kMetricHeight}, l.x, l.metric_panel, "metric (fraction, 0-1)",
              std::make_pair(0.0, 1.0));
    y += kMetricHeight + kBelow;
  }
  std::string footer = std::to_string(h.steps.size()) + " step points";
  if (h.downsampled) {
    footer += " (downsampled: the steps at multiples of " + std::to_string(h.stride) + ", and the latest)";
  }
  footer += ", " + std::to_string(h.evals.size()) + " evaluations";
  c.Text(kLeft, l.height - 9, footer, 11, Align::kLeft, kGrey);
}

std::string LowerExtension(const std::string& path) {
  size_t dot = path.find_last_of('.');
  size_t slash = path.find_last_of('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  std::string ext = path.substr(dot);
  for (char& ch : ext) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return ext;
}

Status WritePng(const Layout& l, const JobHistory& h, const std::string& title, const std::string& path) {
  std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)> surface(
      cairo_image_surface_create(CAIRO_FORMAT_RGB24, int(kWidth), int(std::ceil(l.height))),
      cairo_surface_destroy);
  if (cairo_surface_status(surface.get()) != CAIRO_STATUS_SUCCESS) {
    return Internal(std::string("cairo: ") + cairo_status_to_string(cairo_surface_status(surface.get())));
  }
  {
    std::unique_ptr<cairo_t, decltype(&cairo_destroy)> cr(cairo_create(surface.get()), cairo_destroy);
    CairoCanvas canvas(cr.get());
    Draw(canvas, l, h, title);
  }
  cairo_surface_flush(surface.get());
  cairo_status_t st = cairo_surface_write_to_png(surface.get(), path.c_str());
  if (st != CAIRO_STATUS_SUCCESS) {
    return Unavailable("cannot write " + path + ": " + cairo_status_to_string(st));
  }
  return Status();
}

}  // namespace

std::string HistoryPlotSvg(const JobHistory& history, const std::string& title) {
  Layout l = Plan(history);
  SvgCanvas canvas(kWidth, l.height);
  Draw(canvas, l, history, title);
  return canvas.Finish();
}

Status CheckPlotPath(const std::string& path) {
  const std::string ext = LowerExtension(path);
  if (ext != ".svg" && ext != ".png") {
    return InvalidArgument(path + ": a plot is written as .svg or .png (by the file's extension)" +
                           (ext.empty() ? std::string(", and this name has none") : ", not " + ext));
  }
  return Status();
}

Status WriteHistoryPlot(const JobHistory& history, const std::string& title, const std::string& path) {
  FS_RETURN_IF_ERROR(CheckPlotPath(path));
  const std::string ext = LowerExtension(path);
  Layout l = Plan(history);
  if (l.loss_panel.empty() && l.metric_panel.empty()) {
    return InvalidArgument("job '" + history.job_id + "' has no steps or evaluations to plot yet");
  }
  if (ext == ".png") return WritePng(l, history, title, path);
  std::ofstream out(path, std::ios::binary);
  out << HistoryPlotSvg(history, title);
  out.close();
  if (!out) return Unavailable("cannot write " + path);
  return Status();
}

}  // namespace flowstate
