// Resize (the table is in onnx_ops.cc). Output sizes and scales must be
// known at import; each resized axis is then a sum of Gathers of the input
// at index tables computed here, weighted by the mode's coefficients
// (nearest: one tap, linear: two, cubic: four), as ONNX's reference
// implementation does axis by axis: neighbours of the source coordinate in
// the edge-padded input, ties to the lower index, coefficients for a
// fractional part in (0, 1].
#include <algorithm>
#include <cmath>

#include "api/onnx/convert_util.h"
#include "api/onnx/converters.h"

namespace flowstate::onnx_import {
namespace {

struct AxisPlan {
  std::vector<std::vector<int64_t>> index;  // [tap][output position]
  std::vector<std::vector<double>> coeff;   // [tap][output position]
  std::vector<bool> outside;                // tf_crop_and_resize: extrapolated
};

std::vector<double> Coeffs(const std::string& mode, const std::string& nearest, double a,
                           double r) {
  if (mode == "linear") return {1 - r, r};
  if (mode == "cubic") {
    auto w = [a](double t) {  // Keys' cubic convolution kernel
      t = std::fabs(t);
      if (t <= 1) return ((a + 2) * t - (a + 3)) * t * t + 1;
      if (t < 2) return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a;
      return 0.0;
    };
    return {w(r + 1), w(r), w(1 - r), w(2 - r)};
  }
  bool second;  // nearest: the right-hand neighbour?
  if (nearest == "round_prefer_floor") second = r > 0.5;
  else if (nearest == "round_prefer_ceil") second = r >= 0.5;
  else if (nearest == "floor") second = r == 1;
  else second = true;  // ceil
  return second ? std::vector<double>{0, 1} : std::vector<double>{1, 0};
}

AxisPlan PlanAxis(int64_t in, int64_t out, double scale, const std::string& ctm,
                  const std::string& mode, const std::string& nearest, double a,
                  bool exclude_outside, double roi_start, double roi_end) {
  AxisPlan p;
  const int taps = mode == "cubic" ? 4 : 2;
  p.index.assign(taps, std::vector<int64_t>(out));
  p.coeff.assign(taps, std::vector<double>(out));
  p.outside.assign(out, false);
  const double out_w = scale * double(in);
  for (int64_t x = 0; x < out; ++x) {
    double xo;
    if (ctm == "align_corners") xo = out_w == 1 ? 0 : x * double(in - 1) / (out_w - 1);
    else if (ctm == "asymmetric") xo = x / scale;
    else if (ctm == "tf_half_pixel_for_nn") xo = (x + 0.5) / scale;
    else if (ctm == "pytorch_half_pixel") xo = out_w != 1 ? (x + 0.5) / scale - 0.5 : 0;
    else if (ctm == "tf_crop_and_resize") {
      xo = out_w > 1 ? roi_start * (in - 1) + x * (roi_end - roi_start) * (in - 1) / (out_w - 1)
                     : 0.5 * (roi_start + roi_end) * (in - 1);
      if (xo < 0 || xo > in - 1) p.outside[x] = true;
    } else xo = (x + 0.5) / scale - 0.5;  // half_pixel
    double fl = std::floor(xo);
    double r = xo == fl ? 1.0 : xo - fl;
    std::vector<double> c = Coeffs(mode, nearest, a, r);
    // The `taps` nearest indices of the edge-padded input, ties low (all
    // lie within taps of floor(xo)).
    const int64_t pad = (taps + 1) / 2;
    std::vector<int64_t> cand;
    const int64_t lo = std::max<int64_t>(-pad, int64_t(std::max(fl, -1e15)) - taps);
    const int64_t hi = std::min<int64_t>(in + pad, int64_t(std::min(fl, 1e15)) + taps + 1);
    for (int64_t i = lo; i < hi; ++i) cand.push_back(i);
    if (int64_t(cand.size()) < taps) {
      cand.clear();
      for (int64_t i = std::max(-pad, in + pad - taps); i < in + pad; ++i) cand.push_back(i);
      if (fl < 0) {
        cand.clear();
        for (int64_t i = -pad; i < -pad + taps; ++i) cand.push_back(i);
      }
    }
    std::stable_sort(cand.begin(), cand.end(), [&](int64_t u, int64_t v) {
      double du = std::fabs(xo - double(u)), dv = std::fabs(xo - double(v));
      return du != dv ? du < dv : u < v;
    });
    cand.resize(taps);
    std::sort(cand.begin(), cand.end());
    if (exclude_outside) {
      double sum = 0;
      for (int t = 0; t < taps; ++t) {
        if (cand[t] < 0 || cand[t] >= in) c[t] = 0;
        sum += c[t];
      }
      if (sum != 0) {
        for (double& v : c) v /= sum;
      }
    }
    for (int t = 0; t < taps; ++t) {
      p.index[t][x] = std::clamp<int64_t>(cand[t], 0, in - 1);
      p.coeff[t][x] = c[t];
    }
  }
  return p;
}

}  // namespace

Status ConvertResize(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(std::string ctm, c.String("coordinate_transformation_mode", "half_pixel"));
  FS_ASSIGN_OR_RETURN(double a, c.Float("cubic_coeff_a", -0.75));
  FS_ASSIGN_OR_RETURN(int64_t exclude, c.Int("exclude_outside", 0));
  FS_ASSIGN_OR_RETURN(double extrapolation, c.Float("extrapolation_value", 0.0));
  FS_ASSIGN_OR_RETURN(std::string mode, c.String("mode", "nearest"));
  FS_ASSIGN_OR_RETURN(std::string nearest, c.String("nearest_mode", "round_prefer_floor"));
  static const char* kCtm[] = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                               "tf_half_pixel_for_nn", "tf_crop_and_resize"};
  if (std::find(std::begin(kCtm), std::end(kCtm), ctm) == std::end(kCtm)) {
    return c.Error("attribute 'coordinate_transformation_mode' = \"" + ctm +
                   "\" is not a valid value");
  }
  if (mode != "nearest" && mode != "linear" && mode != "cubic") {
    return c.Error("attribute 'mode' = \"" + mode + "\" is not a valid value");
  }
  if (nearest != "round_prefer_floor" && nearest != "round_prefer_ceil" && nearest != "floor" &&
      nearest != "ceil") {
    return c.Error("attribute 'nearest_mode' = \"" + nearest + "\" is not a valid value");
  }
  FS_RETURN_IF_ERROR(NeedRank(c, x, "X"));
  const int r = x.rank();
  for (int i = 0; i < r; ++i) {
    if (x.shape.dim(i) < 0) return c.Unsupported("an input whose shape is not fully known");
  }
  if (mode != "nearest") FS_RETURN_IF_ERROR(NeedFloat(c, x, "X"));
  std::vector<double> scales, roi;
  std::vector<int64_t> sizes;
  if (c.has_input(1)) {
    FS_ASSIGN_OR_RETURN(roi, c.ConstDoubles(1, "roi"));
  }
  if (c.has_input(2)) {
    FS_ASSIGN_OR_RETURN(scales, c.ConstDoubles(2, "scales"));
  }
  if (c.has_input(3)) {
    FS_ASSIGN_OR_RETURN(Value sv, c.input(3));
    PartialShape inferred = c.OutputShape(0);
    if (!sv.constant && inferred.rank_known() && inferred.IsFullyDefined()) {
      sizes = inferred.dims();  // computed sizes: the output's known shape says them
    } else {
      FS_ASSIGN_OR_RETURN(sizes, c.ConstInts(3, "sizes"));
    }
  }
  if (!sizes.empty() && !scales.empty()) return c.Error("has both 'scales' and 'sizes'");
  if (sizes.empty() && int(scales.size()) != r) {
    return c.Error("'scales' (or 'sizes') must have one entry per dimension");
  }
  if (!sizes.empty() && int(sizes.size()) != r) {
    return c.Error("'sizes' must have one entry per dimension");
  }
  if (ctm == "tf_crop_and_resize" && int(roi.size()) != 2 * r) {
    return c.Error("'roi' must have 2 entries per dimension for tf_crop_and_resize");
  }
  Output y = x.out;
  // Each axis's output size and scale first: the whole output is bounded
  // before any table of it is built (a model of a few bytes must not make
  // the importer build tables for 10^15 elements).
  std::vector<int64_t> out_shape = x.shape.dims();
  std::vector<double> axis_scale(r);
  double elements = 1;
  for (int i = 0; i < r; ++i) {
    const int64_t in = x.shape.dim(i);
    if (!sizes.empty()) {
      out_shape[i] = sizes[i];
      axis_scale[i] = in > 0 ? double(sizes[i]) / double(in) : 1.0;
    } else {
      axis_scale[i] = scales[i];
      if (!(scales[i] > 0)) return c.Error("a scale is not positive");
      double o = std::floor(double(in) * scales[i]);
      if (!(o < double(int64_t(1) << 40))) return c.Error("a scale gives an output too large");
      out_shape[i] = int64_t(o);
    }
    elements *= double(std::max<int64_t>(out_shape[i], 1));
  }
  if (elements > double(int64_t(1) << 32)) {
    return c.Error("the output would have " + std::to_string(int64_t(std::min(elements, 9e18))) +
                   " elements, over 2^32");
  }
  for (int i = 0; i < r; ++i) {
    const int64_t in = x.shape.dim(i);
    const double scale = axis_scale[i];
    const int64_t out = out_shape[i];
    bool crop = ctm == "tf_crop_and_resize" && (roi[i] != 0 || roi[r + i] != 1);
    if (out == in && scale == 1.0 && !crop) continue;
    if (in == 0 || out <= 0) return c.Unsupported("an empty input or output dimension");
    // The importer builds the gather indices and weights of every output
    // position (PlanAxis): bounded, so that a small model cannot make it
    // build gigabytes of tables (a 165-byte fuzz input with a 2^24 output
    // built ~1 GB and took seconds under ASan).
    if (out > (int64_t(1) << 20)) {
      return c.Error("an output dimension of " + std::to_string(out) +
                     ", over 2^20 (the importer builds a table entry per output position)");
    }
    AxisPlan p = PlanAxis(in, out, scale, ctm, mode, nearest, a, exclude != 0,
                          crop || ctm == "tf_crop_and_resize" ? roi[i] : 0,
                          crop || ctm == "tf_crop_and_resize" ? roi[r + i] : 1);
    std::vector<int64_t> bshape(r, 1);
    bshape[i] = out;
    Output acc;
    if (mode == "nearest") {
      std::vector<int64_t> pick(out);
      for (int64_t k = 0; k < out; ++k) pick[k] = p.coeff[1][k] > p.coeff[0][k] ? p.index[1][k]
                                                                              : p.index[0][k];
      acc = c.Op("Gather", {y, c.Ints64(pick)}, {{"axis", AttrValue(int64_t(i))}});
    } else {
      for (size_t t = 0; t < p.index.size(); ++t) {
        Tensor w(x.dtype, TensorShape(std::span<const int64_t>(bshape)));
        for (int64_t k = 0; k < out; ++k) {
          if (x.dtype == DataType::kFloat64) w.data<double>()[k] = p.coeff[t][k];
          else w.data<float>()[k] = float(p.coeff[t][k]);
        }
        Output g = c.Op("Gather", {y, c.Ints64(p.index[t])}, {{"axis", AttrValue(int64_t(i))}});
        Output term = c.Op("Mul", {g, c.Const(w)});
        acc = t == 0 ? term : c.Op("Add", {acc, term});
      }
    }
    if (std::find(p.outside.begin(), p.outside.end(), true) != p.outside.end()) {
      Tensor keep(DataType::kBool, TensorShape(std::span<const int64_t>(bshape)));
      for (int64_t k = 0; k < out; ++k) keep.data<bool>()[k] = !p.outside[k];
      acc = c.Op("Select", {c.Const(keep), acc, c.Op("Fill", {ShapeVector(c, acc),
                                                             c.Scalar(extrapolation, x.dtype)})});
    }
    y = acc;
  }
  if (y.node == x.out.node) y = c.Op("Identity", {y});
  return c.SetOutput(0, y, x.dtype, PartialShape(out_shape));
}

}  // namespace flowstate::onnx_import
