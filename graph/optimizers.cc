#include "graph/optimizers.h"

#include <cmath>

#include "graph/op_builders.h"

namespace flowstate {

StatusOr<OptimizerOptions::Kind> OptimizerKindFromString(const std::string& n) {
  using K = OptimizerOptions::Kind;
  if (n == "sgd") return K::kSgd;
  if (n == "momentum") return K::kMomentum;
  if (n == "adam") return K::kAdam;
  if (n == "adagrad") return K::kAdaGrad;
  if (n == "rmsprop") return K::kRmsProp;
  return InvalidArgument("unknown optimizer '" + n +
                         "' (expected sgd, momentum, adam, adagrad or rmsprop)");
}

namespace {

Output Scalar(const Scope& s, DataType t, double v) {
  if (t == DataType::kFloat64) return ops::Const(s, v);
  if (t == DataType::kFloat32) return ops::Const(s, float(v));
  return ops::Cast(s, ops::Const(s, float(v)), t);
}

// Sums the rows of a sparse gradient that share an index: unique indices
// (in order of first occurrence) and one summed row each.
Gradient SumDuplicates(const Scope& s, const Gradient& g) {
  std::vector<Output> u = ops::Generic(s, "Unique", {g.indices}, {}, 2);
  Gradient out = g;
  out.indices = u[0];
  out.values = ops::Generic(s, "UnsortedSegmentSum", {g.values, u[1], ops::Size(s, u[0])})[0];
  return out;
}

std::vector<std::string> GradientNodes(const Gradient& g) {
  if (g.is_sparse) return {g.indices.node, g.values.node};
  return {g.dense.node};
}

}  // namespace

double EffectiveMomentum(const OptimizerOptions& o) {
  if (o.momentum) return *o.momentum;
  return o.kind == OptimizerOptions::Kind::kRmsProp ? 0.0 : 0.9;
}

double EffectiveEpsilon(const OptimizerOptions& o) {
  if (o.epsilon) return *o.epsilon;
  return o.kind == OptimizerOptions::Kind::kAdaGrad ? 1e-7 : 1e-8;
}

Status ValidateOptimizerOptions(const OptimizerOptions& o) {
  auto bad = [](const std::string& field, const std::string& why) {
    return InvalidArgument("optimizer." + field + ": " + why);
  };
  if (!(o.learning_rate > 0)) return bad("learning_rate", "must be > 0");
  if (!(EffectiveMomentum(o) >= 0 && EffectiveMomentum(o) < 1)) return bad("momentum", "must be in [0, 1)");
  if (!(o.beta1 >= 0 && o.beta1 < 1)) return bad("beta1", "must be in [0, 1)");
  if (!(o.beta2 >= 0 && o.beta2 < 1)) return bad("beta2", "must be in [0, 1)");
  if (!(EffectiveEpsilon(o) > 0)) return bad("epsilon", "must be > 0");
  if (!(o.rho >= 0 && o.rho < 1)) return bad("rho", "must be in [0, 1)");
  if (!(o.initial_accumulator >= 0)) return bad("initial_accumulator", "must be >= 0");
  if (!(o.clip_global_norm >= 0)) return bad("clip_global_norm", "must be >= 0");
  if (o.schedule.kind != LearningRateSchedule::Kind::kConstant && o.schedule.decay_steps <= 0) {
    return bad("schedule.decay_steps", "must be > 0");
  }
  if (!(o.schedule.decay_rate > 0)) return bad("schedule.decay_rate", "must be > 0");
  if (!(o.schedule.alpha >= 0 && o.schedule.alpha <= 1)) return bad("schedule.alpha", "must be in [0, 1]");
  return Status();
}

StatusOr<TrainOp> BuildOptimizer(const Scope& scope, const std::string& name,
                                 const OptimizerOptions& o,
                                 const std::vector<VariableGradient>& vars) {
  FS_RETURN_IF_ERROR(ValidateOptimizerOptions(o));
  using K = OptimizerOptions::Kind;
  Scope s = scope.NewSubScope(name);
  TrainOp out;
  std::vector<std::string> init_ops;

  // Global step and learning rate.
  Output step = ops::Variable(s.WithOpName("global_step"), TensorShape({}), DataType::kInt64);
  out.global_step = step.node;
  init_ops.push_back(ops::Assign(s.WithOpName("global_step/init"), step,
                                 ops::Const(s, int64_t{0})).node);
  DataType lr_type = DataType::kFloat32;
  for (const auto& v : vars) {
    if (v.dtype == DataType::kFloat64) lr_type = DataType::kFloat64;
  }
  Scope ls = s.NewSubScope("learning_rate");
  Output stepf = ops::Cast(ls, step, lr_type);
  Output lr = Scalar(ls, lr_type, o.learning_rate);
  const LearningRateSchedule& sc = o.schedule;
  if (sc.kind == LearningRateSchedule::Kind::kExponentialDecay) {
    Output p = ops::Div(ls, stepf, Scalar(ls, lr_type, double(sc.decay_steps)));
    if (sc.staircase) p = ops::Floor(ls, p);
    lr = ops::Mul(ls, lr, ops::Pow(ls, Scalar(ls, lr_type, sc.decay_rate), p));
  } else if (sc.kind == LearningRateSchedule::Kind::kCosineDecay) {
    Output ds = Scalar(ls, lr_type, double(sc.decay_steps));
    Output frac = ops::Div(ls, ops::Minimum(ls, stepf, ds), ds);
    Output cosine = ops::Mul(ls, Scalar(ls, lr_type, 0.5),
                             ops::Add(ls, Scalar(ls, lr_type, 1),
                                      ops::Cos(ls, ops::Mul(ls, frac, Scalar(ls, lr_type, M_PI)))));
    Output decayed = ops::Add(ls, ops::Mul(ls, Scalar(ls, lr_type, 1 - sc.alpha), cosine),
                              Scalar(ls, lr_type, sc.alpha));
    lr = ops::Mul(ls, lr, decayed);
  }
  out.learning_rate = ops::Identity(ls.WithOpName("value"), lr);

  // The barrier: every gradient of the step exists before any update runs.
  std::vector<std::string> grad_nodes;
  for (const auto& v : vars) {
    if (v.gradient.is_none()) continue;
    for (const std::string& n : GradientNodes(v.gradient)) grad_nodes.push_back(n);
  }
  std::string ready = ops::NoOp(s.WithOpName("gradients_ready"), grad_nodes);

  // Optional clipping by global norm: g *= clip / max(norm, clip).
  std::vector<Gradient> grads;
  for (const auto& v : vars) grads.push_back(v.gradient);
  if (o.clip_global_norm > 0) {
    Scope cs = s.NewSubScope("clip");
    std::vector<Output> squares;
    for (size_t i = 0; i < vars.size(); ++i) {
      if (grads[i].is_none()) continue;
      // Duplicate rows summed first: the norm of the rows' sum, not of the rows.
      if (grads[i].is_sparse) grads[i] = SumDuplicates(cs.NewSubScope("dedup"), grads[i]);
      Output t = grads[i].is_sparse ? grads[i].values : grads[i].dense;
      Output sq = ops::Sum(cs, ops::Square(cs, t), std::vector<int32_t>{});
      squares.push_back(vars[i].dtype == lr_type ? sq : ops::Cast(cs, sq, lr_type));
    }
    if (!squares.empty()) {
      Output norm = ops::Sqrt(cs.WithOpName("global_norm"), ops::AddN(cs, squares));
      Output clip = Scalar(cs, lr_type, o.clip_global_norm);
      Output factor = ops::Div(cs, clip, ops::Maximum(cs, norm, clip));
      for (size_t i = 0; i < vars.size(); ++i) {
        if (grads[i].is_none()) continue;
        Output f = vars[i].dtype == lr_type ? factor : ops::Cast(cs, factor, vars[i].dtype);
        if (grads[i].is_sparse) {
          grads[i].values = ops::Mul(cs, grads[i].values, f);
        } else {
          grads[i].dense = ops::Mul(cs, grads[i].dense, f);
        }
      }
    }
  }

  std::vector<std::string> updates;
  for (size_t i = 0; i < vars.size(); ++i) {
    const VariableGradient& v = vars[i];
    Gradient g = grads[i];
    if (g.is_none()) continue;
    Scope vs = s.NewSubScope(v.variable.node).WithControlDependencies({ready});
    Output vlr = v.dtype == lr_type ? out.learning_rate : ops::Cast(vs, out.learning_rate, v.dtype);
    auto scalar = [&](double x) { return Scalar(vs, v.dtype, x); };
    const bool sparse = g.is_sparse && o.sparse_updates;
    if (sparse && o.kind == K::kSgd) {
      updates.push_back(ops::Generic(vs.WithOpName("update"), "SparseApplyGradientDescent",
                                     {v.variable, vlr, g.values, g.indices})[0].node);
      continue;
    }
    Output dense;
    if (sparse) {
      // Rows only: the SparseApply* ops below.
    } else if (g.is_sparse) {
      Output rows = ops::StridedSlice(vs, g.dense_shape, std::vector<int32_t>{0},
                                      std::vector<int32_t>{1}, std::vector<int32_t>{1},
                                      ops::StridedSliceAttrs{0, 0, 0, 0, 1});
      dense = ops::Generic(vs, "UnsortedSegmentSum", {g.values, g.indices, rows})[0];
    } else {
      dense = g.dense;
    }
    if (o.kind == K::kSgd) {
      updates.push_back(ops::AssignSub(vs.WithOpName("update"), v.variable, ops::Mul(vs, dense, vlr)).node);
      continue;
    }
    if (!v.shape.IsFullyDefined()) {
      return InvalidArgument("variable '" + v.variable.node + "' needs a fully defined shape for " +
                                 "the optimizer's slots, got " + v.shape.ToString(),
                             v.variable.node);
    }
    std::vector<int32_t> dims(v.shape.dims().begin(), v.shape.dims().end());
    auto slot = [&](const std::string& slot_name, double init) {
      Scope ss = s.NewSubScope(v.variable.node);
      Output var = ops::Variable(ss.WithOpName(slot_name), v.shape, v.dtype);
      init_ops.push_back(ops::Assign(ss.WithOpName(slot_name + "/init"), var,
                                     ops::Fill(ss, dims, Scalar(ss, v.dtype, init))).node);
      out.slot_variables.push_back(var.node);
      out.slots.push_back({var.node, v.variable.node, slot_name});
      return var;
    };
    switch (o.kind) {
      case K::kMomentum: {
        // accum = momentum * accum + g; var -= lr * (nesterov ? g + momentum * accum : accum)
        Output accum = slot("momentum", 0);
        Output mom = scalar(EffectiveMomentum(o));
        if (sparse) {
          updates.push_back(ops::Generic(vs.WithOpName("update"), "SparseApplyMomentum",
                                         {v.variable, accum, vlr, mom, g.values, g.indices},
                                         {{"use_nesterov", AttrValue(o.nesterov)}})[0].node);
          break;
        }
        Output new_accum = ops::Assign(vs.WithOpName("accum"), accum,
                                       ops::Add(vs, ops::Mul(vs, accum, mom), dense));
        Output step_dir = o.nesterov ? ops::Add(vs, dense, ops::Mul(vs, new_accum, mom)) : new_accum;
        updates.push_back(ops::AssignSub(vs.WithOpName("update"), v.variable,
                                         ops::Mul(vs, step_dir, vlr)).node);
        break;
      }
      case K::kAdam: {
        // PyTorch's formulation: var -= lr * m̂ / (sqrt(v̂) + eps), fused into
        // one ApplyAdam (one pass over var and its slots, no temporaries).
        Output m = slot("adam_m", 0);
        Output vv = slot("adam_v", 0);
        Output t = ops::Add(vs, ops::Cast(vs, step, v.dtype), scalar(1));
        if (sparse) {
          updates.push_back(ops::Generic(vs.WithOpName("update"), "SparseApplyAdam",
                                         {v.variable, m, vv, vlr, scalar(o.beta1), scalar(o.beta2),
                                          scalar(EffectiveEpsilon(o)), t, g.values, g.indices})[0]
                                .node);
          break;
        }
        updates.push_back(ops::Generic(vs.WithOpName("update"), "ApplyAdam",
                                       {v.variable, m, vv, vlr, scalar(o.beta1), scalar(o.beta2),
                                        scalar(EffectiveEpsilon(o)), t, dense})[0].node);
        break;
      }
      case K::kAdaGrad: {
        // accum += g²; var -= lr * g / (sqrt(accum) + eps)
        Output accum = slot("adagrad_accum", o.initial_accumulator);
        if (sparse) {
          updates.push_back(ops::Generic(vs.WithOpName("update"), "SparseApplyAdagrad",
                                         {v.variable, accum, vlr, scalar(EffectiveEpsilon(o)),
                                          g.values, g.indices})[0].node);
          break;
        }
        Output new_accum = ops::AssignAdd(vs.WithOpName("accum"), accum, ops::Square(vs, dense));
        Output denom = ops::Add(vs, ops::Sqrt(vs, new_accum), scalar(EffectiveEpsilon(o)));
        updates.push_back(ops::AssignSub(vs.WithOpName("update"), v.variable,
                                         ops::Div(vs, ops::Mul(vs, dense, vlr), denom)).node);
        break;
      }
      case K::kRmsProp: {
        // ms = rho * ms + (1 - rho) g²; mom = momentum * mom + lr g / sqrt(ms + eps); var -= mom
        Output ms = slot("rms", 0);
        if (sparse) {
          Output rho = scalar(o.rho), eps = scalar(EffectiveEpsilon(o));
          if (EffectiveMomentum(o) > 0) {
            Output mom = slot("rms_momentum", 0);
            updates.push_back(ops::Generic(vs.WithOpName("update"), "SparseApplyRMSProp",
                                           {v.variable, ms, mom, vlr, rho,
                                            scalar(EffectiveMomentum(o)), eps, g.values,
                                            g.indices})[0].node);
          } else {
            updates.push_back(ops::Generic(vs.WithOpName("update"), "SparseApplyRMSPropNoMomentum",
                                           {v.variable, ms, vlr, rho, eps, g.values, g.indices})[0]
                                  .node);
          }
          break;
        }
        Output new_ms = ops::Assign(vs.WithOpName("ms"), ms,
                                    ops::Add(vs, ops::Mul(vs, ms, scalar(o.rho)),
                                             ops::Mul(vs, ops::Square(vs, dense), scalar(1 - o.rho))));
        Output step_val = ops::Div(vs, ops::Mul(vs, dense, vlr),
                                   ops::Sqrt(vs, ops::Add(vs, new_ms, scalar(EffectiveEpsilon(o)))));
        if (EffectiveMomentum(o) > 0) {
          Output mom = slot("rms_momentum", 0);
          Output new_mom = ops::Assign(vs.WithOpName("mom"), mom,
                                       ops::Add(vs, ops::Mul(vs, mom, scalar(EffectiveMomentum(o))), step_val));
          updates.push_back(ops::AssignSub(vs.WithOpName("update"), v.variable, new_mom).node);
        } else {
          updates.push_back(ops::AssignSub(vs.WithOpName("update"), v.variable, step_val).node);
        }
        break;
      }
      case K::kSgd:
        break;
    }
  }
  Output inc = ops::AssignAdd(s.WithOpName("global_step/increment").WithControlDependencies(updates),
                              step, ops::Const(s, int64_t{1}));
  out.train = ops::NoOp(s.WithOpName("train"), {inc.node});
  out.init = ops::NoOp(s.WithOpName("init"), init_ops);
  return out;
}

}  // namespace flowstate
