// LSTM, GRU and RNN (the table is in onnx_ops.cc), unrolled over the
// sequence length, which must be known at import: the input projection of
// all steps is one MatMul, each step a MatMul with the recurrence weights
// and element-wise gates, so every op has a gradient. Forward, reverse and
// bidirectional; layout 0 and 1; the default activations only; no clip,
// no sequence_lens shorter than the sequence.
#include <algorithm>

#include "api/onnx/convert_util.h"
#include "api/onnx/converters.h"

namespace flowstate::onnx_import {
namespace {

enum class Cell { kLstm, kGru, kRnn };

struct RnnAttrs {
  std::string direction = "forward";
  int64_t hidden = 0;
  int64_t layout = 0;
  int64_t linear_before_reset = 0;
};

Status ReadRnnAttrs(NodeContext& c, Cell cell, RnnAttrs* a) {
  std::vector<std::string> defaults;
  switch (cell) {
    case Cell::kLstm: defaults = {"Sigmoid", "Tanh", "Tanh"}; break;
    case Cell::kGru: defaults = {"Sigmoid", "Tanh"}; break;
    case Cell::kRnn: defaults = {"Tanh"}; break;
  }
  FS_ASSIGN_OR_RETURN(a->direction, c.String("direction", "forward"));
  if (a->direction != "forward" && a->direction != "reverse" && a->direction != "bidirectional") {
    return c.Error("attribute 'direction' = \"" + a->direction + "\" is not a valid value");
  }
  FS_ASSIGN_OR_RETURN(a->hidden, c.Int("hidden_size", 0));
  FS_ASSIGN_OR_RETURN(a->layout, c.Int("layout", 0));
  if (a->layout != 0 && a->layout != 1) return c.Error("attribute 'layout' must be 0 or 1");
  if (c.HasAttr("clip")) return c.Unsupported("attribute 'clip'");
  c.Ignore("clip");
  if (c.HasAttr("activation_alpha") || c.HasAttr("activation_beta")) {
    return c.Unsupported("attributes 'activation_alpha' and 'activation_beta'");
  }
  c.Ignore("activation_alpha");
  c.Ignore("activation_beta");
  if (c.HasAttr("activations")) {
    const onnx::AttributeProto* found = nullptr;
    for (const auto& attr : c.proto().attribute()) {
      if (attr.name() == "activations") found = &attr;
    }
    int dirs = a->direction == "bidirectional" ? 2 : 1;
    bool ok = found != nullptr && found->strings_size() == int(defaults.size()) * dirs;
    for (int i = 0; ok && i < found->strings_size(); ++i) {
      ok = found->strings(i) == defaults[i % defaults.size()];
    }
    if (!ok) return c.Unsupported("attribute 'activations' other than the defaults");
  }
  c.Ignore("activations");
  if (cell == Cell::kLstm) {
    FS_ASSIGN_OR_RETURN(int64_t input_forget, c.Int("input_forget", 0));
    if (input_forget != 0) return c.Unsupported("attribute 'input_forget' = 1");
  }
  if (cell == Cell::kGru) {
    FS_ASSIGN_OR_RETURN(a->linear_before_reset, c.Int("linear_before_reset", 0));
  }
  return Status();
}

Output Sig(NodeContext& c, const Output& x) { return c.Op("Sigmoid", {x}); }
Output Tanh(NodeContext& c, const Output& x) { return c.Op("Tanh", {x}); }
Output Pick(NodeContext& c, const Output& x, int64_t i) {  // x[i] of the leading axis
  return c.Op("Gather", {x, c.Int32(i)}, {{"axis", AttrValue(int64_t(0))}});
}
Output Rows(NodeContext& c, const Output& x, int64_t begin, int64_t n) {  // x[begin:begin+n]
  return c.Op("Slice", {x, c.Ints64({begin, 0}), c.Ints64({n, -1})});
}
Output Cols(NodeContext& c, const Output& x, int64_t begin, int64_t n) {  // x[:, begin:begin+n]
  return c.Op("Slice", {x, c.Ints64({0, begin}), c.Ints64({-1, n})});
}

Status ConvertRecurrent(NodeContext& c, Cell cell) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(Value w, c.input(1));
  FS_ASSIGN_OR_RETURN(Value r, c.input(2));
  RnnAttrs a;
  FS_RETURN_IF_ERROR(ReadRnnAttrs(c, cell, &a));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "X"));
  FS_RETURN_IF_ERROR(NeedRank(c, x, "X"));
  if (x.rank() != 3) return c.Error("X must have rank 3");
  const int gates = cell == Cell::kLstm ? 4 : cell == Cell::kGru ? 3 : 1;
  const int dirs = a.direction == "bidirectional" ? 2 : 1;
  const int64_t seq = x.shape.dim(a.layout == 0 ? 0 : 1);
  if (seq < 0) return c.Unsupported("a sequence of unknown length");
  int64_t hidden = a.hidden;
  if (hidden <= 0) {
    if (r.rank() != 3 || r.shape.dim(2) < 0) return c.Error("attribute 'hidden_size' is required");
    hidden = r.shape.dim(2);
  }
  const int64_t input_size = x.shape.dim(2);
  if (input_size < 0) return c.Unsupported("an input of unknown feature size");
  if (c.has_input(4)) {
    FS_ASSIGN_OR_RETURN(Value lens, c.input(4));
    auto v = IntValues(lens.constant);
    if (!v || std::any_of(v->begin(), v->end(), [&](int64_t l) { return l != seq; })) {
      return c.Unsupported("input 'sequence_lens' shorter than the sequence");
    }
  }
  DataType dt = x.dtype;
  // [seq, batch, input]
  Output xs = a.layout == 0 ? x.out : Transpose(c, x.out, {1, 0, 2});
  Output batch = c.Op("Slice", {ShapeVector(c, xs), c.Ints64({1}), c.Ints64({1})});
  Output state_dims = c.Op("Concat", {batch, c.Ints64({hidden}), c.Int32(0)});
  auto initial = [&](int index, int d) -> StatusOr<Output> {
    if (!c.has_input(index)) return c.Op("Fill", {state_dims, c.Scalar(0, dt)});
    FS_ASSIGN_OR_RETURN(Value v, c.input(index));
    Output s = a.layout == 0 ? v.out : Transpose(c, v.out, {1, 0, 2});
    return Pick(c, s, d);
  };
  const int64_t gh = gates * hidden;
  std::vector<Output> ys, hs, cs;
  for (int d = 0; d < dirs; ++d) {
    bool reverse = a.direction == "reverse" || d == 1;
    Output wd = Pick(c, w.out, d), rd = Pick(c, r.out, d);  // [G*H, input], [G*H, H]
    Output wb, rb;
    bool has_bias = c.has_input(3);
    if (has_bias) {
      FS_ASSIGN_OR_RETURN(Value b, c.input(3));
      Output bd = c.Op("Reshape", {Pick(c, b.out, d), c.Ints64({2, gh})});
      wb = Pick(c, bd, 0);
      rb = Pick(c, bd, 1);
    }
    // The input projection of every step at once: [seq, batch, G*H].
    Output flat = c.Op("Reshape", {xs, c.Ints64({-1, input_size})});
    Output xw = c.Op("MatMul", {flat, wd}, {{"transpose_b", AttrValue(true)}});
    if (has_bias) {
      xw = c.Op("Add", {xw, cell == Cell::kGru ? wb : c.Op("Add", {wb, rb})});
    }
    xw = c.Op("Reshape", {xw, c.Op("Concat", {c.Ints64({seq}), batch, c.Ints64({gh}),
                                              c.Int32(0)})});
    FS_ASSIGN_OR_RETURN(Output h, initial(5, d));
    Output cstate;
    std::optional<Output> p_i, p_o, p_f;
    if (cell == Cell::kLstm) {
      FS_ASSIGN_OR_RETURN(cstate, initial(6, d));
      if (c.has_input(7)) {
        FS_ASSIGN_OR_RETURN(Value p, c.input(7));
        Output pd = Pick(c, p.out, d);  // [3H]: i, o, f
        p_i = c.Op("Slice", {pd, c.Ints64({0}), c.Ints64({hidden})});
        p_o = c.Op("Slice", {pd, c.Ints64({hidden}), c.Ints64({hidden})});
        p_f = c.Op("Slice", {pd, c.Ints64({2 * hidden}), c.Ints64({hidden})});
      }
    }
    std::vector<Output> steps(seq);
    for (int64_t k = 0; k < seq; ++k) {
      int64_t t = reverse ? seq - 1 - k : k;
      Output xt = Pick(c, xw, t);  // [batch, G*H]
      if (cell == Cell::kLstm) {
        Output g = c.Op("Add", {xt, c.Op("MatMul", {h, rd}, {{"transpose_b", AttrValue(true)}})});
        Output gi = Cols(c, g, 0, hidden), go = Cols(c, g, hidden, hidden);
        Output gf = Cols(c, g, 2 * hidden, hidden), gc = Cols(c, g, 3 * hidden, hidden);
        if (p_i) gi = c.Op("Add", {gi, c.Op("Mul", {*p_i, cstate})});
        if (p_f) gf = c.Op("Add", {gf, c.Op("Mul", {*p_f, cstate})});
        cstate = c.Op("Add", {c.Op("Mul", {Sig(c, gf), cstate}),
                              c.Op("Mul", {Sig(c, gi), Tanh(c, gc)})});
        if (p_o) go = c.Op("Add", {go, c.Op("Mul", {*p_o, cstate})});
        h = c.Op("Mul", {Sig(c, go), Tanh(c, cstate)});
      } else if (cell == Cell::kGru) {
        Output hr = c.Op("MatMul", {h, Rows(c, rd, 0, 2 * hidden)},
                         {{"transpose_b", AttrValue(true)}});  // z, r
        if (has_bias) hr = c.Op("Add", {hr, c.Op("Slice", {rb, c.Ints64({0}),
                                                          c.Ints64({2 * hidden})})});
        Output z = Sig(c, c.Op("Add", {Cols(c, xt, 0, hidden), Cols(c, hr, 0, hidden)}));
        Output rg = Sig(c, c.Op("Add", {Cols(c, xt, hidden, hidden), Cols(c, hr, hidden, hidden)}));
        Output rh = Rows(c, rd, 2 * hidden, hidden);
        Output rbh = has_bias ? c.Op("Slice", {rb, c.Ints64({2 * hidden}), c.Ints64({hidden})})
                              : c.Scalar(0, dt);
        Output hh;
        if (a.linear_before_reset) {
          Output lin = c.Op("Add", {c.Op("MatMul", {h, rh}, {{"transpose_b", AttrValue(true)}}),
                                    rbh});
          hh = c.Op("Mul", {rg, lin});
        } else {
          hh = c.Op("Add", {c.Op("MatMul", {c.Op("Mul", {rg, h}), rh},
                                 {{"transpose_b", AttrValue(true)}}),
                            rbh});
        }
        Output cand = Tanh(c, c.Op("Add", {Cols(c, xt, 2 * hidden, hidden), hh}));
        // (1 - z) * cand + z * h
        h = c.Op("Add", {cand, c.Op("Mul", {z, c.Op("Sub", {h, cand})})});
      } else {
        h = Tanh(c, c.Op("Add", {xt, c.Op("MatMul", {h, rd}, {{"transpose_b", AttrValue(true)}})}));
      }
      steps[t] = c.Op("ExpandDims", {h, c.Int32(0)});
    }
    std::vector<Output> parts = steps;
    parts.push_back(c.Int32(0));
    ys.push_back(c.Op("ExpandDims", {c.Op("Concat", parts), c.Int32(1)}));  // [seq, 1, batch, H]
    hs.push_back(c.Op("ExpandDims", {h, c.Int32(0)}));
    if (cell == Cell::kLstm) cs.push_back(c.Op("ExpandDims", {cstate, c.Int32(0)}));
  }
  auto join = [&](std::vector<Output> v, int axis) {
    if (v.size() == 1) return v[0];
    v.push_back(c.Int32(axis));
    return c.Op("Concat", v);
  };
  Output y = join(ys, 1), yh = join(hs, 0);
  if (a.layout == 1) {
    y = Transpose(c, y, {2, 0, 1, 3});
    yh = Transpose(c, yh, {1, 0, 2});
  }
  FS_RETURN_IF_ERROR(c.SetOutput(0, y, dt));
  FS_RETURN_IF_ERROR(c.SetOutput(1, yh, dt));
  if (cell == Cell::kLstm) {
    Output yc = join(cs, 0);
    if (a.layout == 1) yc = Transpose(c, yc, {1, 0, 2});
    FS_RETURN_IF_ERROR(c.SetOutput(2, yc, dt));
  }
  return Status();
}

}  // namespace

Status ConvertLstm(NodeContext& c) { return ConvertRecurrent(c, Cell::kLstm); }
Status ConvertGru(NodeContext& c) { return ConvertRecurrent(c, Cell::kGru); }
Status ConvertRnn(NodeContext& c) { return ConvertRecurrent(c, Cell::kRnn); }

}  // namespace flowstate::onnx_import
