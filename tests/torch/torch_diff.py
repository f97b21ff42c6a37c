#!/usr/bin/python3
"""The PyTorch differential test: forward and backward of every op with a
gradient, Flowstate against PyTorch, on the same random inputs.

Each case below is one op on float32 inputs (integer inputs are constants:
axes, shapes, labels). torch_op_dump (op_dump.cc) runs it in Flowstate and
returns the op's outputs, the weights W_k of the loss L = sum_k sum(y_k * W_k)
and dL/dx for every float input; this script recomputes the outputs and the
gradients with PyTorch (in float64, from the same float32 values and the same
weights) and compares them. It also fails when an op that has a gradient in
Flowstate has no case here (unless listed in NOT_IN_TORCH with a reason).

Exit status: 0 when everything agrees, 1 on any mismatch, 77 (ctest's skip)
when /usr/bin/python3 has no torch or numpy, with a message saying so.

  tests/torch/torch_diff.py --op-dump build/tests/torch_op_dump [--threads N] [-v]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # the ctest's SKIP_RETURN_CODE
    print("SKIP: PyTorch differential test needs torch and numpy in %s (%s); "
          "install Debian's python3-torch" % (sys.executable, e))
    sys.exit(77)

RTOL = 1e-4
ATOL = 1e-5  # times max(1, max |reference|)

# Ops with a Flowstate gradient that this test does not compare, and why.
NOT_IN_TORCH = {
    # Control flow: PyTorch runs Python's if and while, it has no dataflow
    # op that forwards a tensor or leaves it dead. Their gradients are
    # checked by finite differences (tests/gradients/control_flow_gradients_test.cc).
    "Switch": "control flow, no torch op",
    "Merge": "control flow, no torch op",
    "IdentityN": "names a Cond's results; no torch op",
}


# ---------------------------------------------------------------------------
# Inputs

class Rng:
    def __init__(self, seed):
        self.r = np.random.RandomState(seed)

    def f(self, shape, lo=-1.0, hi=1.0, away=(), gap=0.05):
        x = self.r.uniform(lo, hi, size=shape).astype(np.float32)
        for k in away:  # keep off points where the op is not smooth
            near = np.abs(x - k) < gap
            x[near] = np.where(x[near] < k, k - gap, k + gap).astype(np.float32)
        return x

    def distinct(self, shape):
        n = int(np.prod(shape))
        return ((np.arange(n) * 37 % n) + 0.5 * self.r.uniform(size=n)).reshape(shape).astype(np.float32)


def tensor(a, dtype=None):
    a = np.asarray(a)
    dt = dtype or {np.dtype("float32"): "float32", np.dtype("float64"): "float64",
                   np.dtype("int32"): "int32", np.dtype("int64"): "int64",
                   np.dtype("uint8"): "uint8", np.dtype("bool"): "bool"}[a.dtype]
    data = [bool(v) for v in a.ravel()] if dt == "bool" else [float(v) if dt.startswith("float") else int(v) for v in a.ravel()]
    return {"dtype": dt, "shape": list(a.shape), "data": data}


def i32(v):
    return np.asarray(v, dtype=np.int32)


CASES = []


def case(name, op, inputs, attrs=None, outputs=(0,), variables=(), stateful=False, ref=None,
         check=None):
    """ref(inputs as torch float64 tensors, attrs) -> list of outputs (those in `outputs`).
    check(flowstate outputs, inputs) -> error string or None, for outputs no
    reference can reproduce (random masks)."""
    CASES.append({"name": name, "op": op, "inputs": inputs, "attrs": attrs or {},
                  "outputs": list(outputs), "variables": list(variables), "stateful": stateful,
                  "ref": ref, "check": check})


# ---------------------------------------------------------------------------
# References (NHWC <-> NCHW where torch needs it; TensorFlow's SAME padding)

def same_pads(size, k, s, d=1):
    eff = (k - 1) * d + 1
    out = (size + s - 1) // s
    total = max((out - 1) * s + eff - size, 0)
    return total // 2, total - total // 2


def nchw_pad(x, ksize, strides, dilations, padding, value=0.0):
    """x NCHW; pads H and W as TensorFlow's SAME would (VALID: none)."""
    if padding == "VALID":
        return x
    ph = same_pads(x.shape[2], ksize[0], strides[0], dilations[0])
    pw = same_pads(x.shape[3], ksize[1], strides[1], dilations[1])
    return F.pad(x, (pw[0], pw[1], ph[0], ph[1]), value=value)


def conv2d_ref(t, a):
    x, f = t
    s, d = a["strides"][1:3], a.get("dilations", [1, 1, 1, 1])[1:3]
    xn = nchw_pad(x.permute(0, 3, 1, 2), f.shape[0:2], s, d, a["padding"])
    y = F.conv2d(xn, f.permute(3, 2, 0, 1), stride=tuple(s), dilation=tuple(d))
    return [y.permute(0, 2, 3, 1)]


def pool_ref(kind):
    def ref(t, a):
        x = t[0].permute(0, 3, 1, 2)
        k, s = a["ksize"][1:3], a["strides"][1:3]
        if kind == "max":
            y = F.max_pool2d(nchw_pad(x, k, s, (1, 1), a["padding"], -math.inf), k, s)
        else:  # TensorFlow divides by the number of cells inside the input
            total = F.avg_pool2d(nchw_pad(x, k, s, (1, 1), a["padding"]), k, s)
            ones = torch.ones_like(x[:1, :1])
            count = F.avg_pool2d(nchw_pad(ones, k, s, (1, 1), a["padding"]), k, s)
            y = total / count
        return [y.permute(0, 2, 3, 1)]
    return ref


def batch_norm_ref(t, a):
    x, scale, offset, mean, var = t
    c = x.shape[-1]
    y = F.batch_norm(x.reshape(-1, c), None if a["is_training"] else mean,
                     None if a["is_training"] else var, scale, offset,
                     training=a["is_training"], eps=a.get("epsilon", 0.001))
    return [y.reshape(x.shape)]


def reduce_ref(fn):
    def ref(t, a):
        x, axes = t[0], [int(v) for v in t[1].reshape(-1).tolist()]
        keep = a.get("keep_dims", False)
        dims = sorted({(d + x.dim()) % x.dim() for d in axes}) if axes else list(range(x.dim()))
        if fn == "prod":
            y = x
            for d in reversed(dims):
                y = torch.prod(y, d, keepdim=True)
            if not keep:
                for d in reversed(dims):
                    y = y.squeeze(d)
            return [y]
        f = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax, "min": torch.amin}[fn]
        return [f(x, dim=tuple(dims), keepdim=keep)]
    return ref


def strided_slice_ref(t, a):
    x, begin, end, strides = t[0], t[1].long().tolist(), t[2].long().tolist(), t[3].long().tolist()
    bm, em, sm = a.get("begin_mask", 0), a.get("end_mask", 0), a.get("shrink_axis_mask", 0)
    y, dim = x, 0
    for i in range(len(begin)):
        if sm >> i & 1:
            y = y.select(dim, begin[i] % y.shape[dim])
            continue
        idx = list(range(y.shape[dim]))[slice(None if bm >> i & 1 else begin[i],
                                              None if em >> i & 1 else end[i], strides[i])]
        y = torch.index_select(y, dim, torch.tensor(idx, dtype=torch.long))
        dim += 1
    return [y]


def slice_ref(t, a):
    x, begin, size = t[0], t[1].long().tolist(), t[2].long().tolist()
    for d, (b, s) in enumerate(zip(begin, size)):
        x = x.narrow(d, b, x.shape[d] - b if s == -1 else s)
    return [x]


def dropout_check(out, inputs, a):
    y, mask = out
    x = inputs[0]
    scale = 1.0 / (1.0 - a["rate"])
    if not np.all(np.isclose(mask, 0) | np.isclose(mask, scale, rtol=1e-6)):
        return "mask holds values other than 0 and 1/(1 - rate)"
    kept = float(np.mean(mask != 0))
    if abs(kept - (1 - a["rate"])) > 0.1:
        return "kept %.3f of the elements, expected about %.3f" % (kept, 1 - a["rate"])
    return None


def dropout_ref(t, a, out):
    return [t[0] * torch.from_numpy(out[1].astype(np.float64)), torch.from_numpy(out[1].astype(np.float64))]


# ---------------------------------------------------------------------------
# The cases

def build_cases():
    r = Rng(1)
    # Element-wise binary ops, with NumPy broadcasting.
    binary = {
        "Add": lambda x, y: x + y, "Sub": lambda x, y: x - y, "Mul": lambda x, y: x * y,
        "Div": lambda x, y: x / y, "Pow": torch.pow, "Maximum": torch.maximum,
        "Minimum": torch.minimum, "SquaredDifference": lambda x, y: (x - y) ** 2,
    }
    for op, f in binary.items():
        for sa, sb in [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5)), ((), (2, 3))]:
            pos = op in ("Div", "Pow")
            case("%s %s %s" % (op, sa, sb), op,
                 [r.f(sa, 0.5 if pos else -1, 2), r.f(sb, 0.5 if pos else -1, 2)],
                 ref=lambda t, a, f=f: [f(t[0], t[1])])
    unary = {
        "Neg": (torch.neg, -2, 2), "Abs": (torch.abs, -2, 2), "Square": (torch.square, -2, 2),
        "Exp": (torch.exp, -2, 2), "Sin": (torch.sin, -3, 3), "Cos": (torch.cos, -3, 3),
        "Sqrt": (torch.sqrt, 0.2, 3), "Rsqrt": (torch.rsqrt, 0.2, 3), "Log": (torch.log, 0.2, 3),
        "Reciprocal": (torch.reciprocal, 0.3, 3), "Identity": (lambda x: x, -1, 1),
    }
    for op, (f, lo, hi) in unary.items():
        case(op, op, [r.f((4, 5), lo, hi, away=(0,) if op == "Abs" else ())],
             ref=lambda t, a, f=f: [f(t[0])])
    case("Cast float32 to float64", "Cast", [r.f((3, 4))], {"DstT": "float64"},
         ref=lambda t, a: [t[0]])
    case("AddN", "AddN", [r.f((2, 3)), r.f((2, 3)), r.f((2, 3))],
         ref=lambda t, a: [t[0] + t[1] + t[2]])
    case("Select", "Select", [np.array([True, False, True]), r.f((2, 3)), r.f((2, 3))],
         ref=lambda t, a: [torch.where(t[0], t[1], t[2])])
    for ta in (False, True):
        for tb in (False, True):
            a_, b_ = r.f((16, 33) if ta else (33, 16)), r.f((20, 16) if tb else (16, 20))
            case("MatMul ta=%d tb=%d" % (ta, tb), "MatMul", [a_, b_],
                 {"transpose_a": ta, "transpose_b": tb},
                 ref=lambda t, a: [(t[0].T if a["transpose_a"] else t[0]) @
                                   (t[1].T if a["transpose_b"] else t[1])])
    case("MatMul 128x784 by 784x512", "MatMul", [r.f((128, 784)), r.f((784, 512), -0.1, 0.1)],
         ref=lambda t, a: [t[0] @ t[1]])
    for ax in (False, True):
        for ay in (False, True):
            x = r.f((2, 1, 4, 3) if ax else (2, 1, 3, 4))
            y = r.f((3, 5, 4) if ay else (3, 4, 5))
            case("BatchMatMul adj_x=%d adj_y=%d" % (ax, ay), "BatchMatMul", [x, y],
                 {"adj_x": ax, "adj_y": ay},
                 ref=lambda t, a: [torch.matmul(t[0].transpose(-1, -2) if a["adj_x"] else t[0],
                                                t[1].transpose(-1, -2) if a["adj_y"] else t[1])])
    for op in ("Sum", "Mean", "Max", "Min", "Prod"):
        for axes in ([], [0], [1, 2], [-1]):
            for keep in (False, True):
                case("%s axes=%s keep=%d" % (op, axes, keep), op,
                     [r.f((3, 4, 5), 0.5, 1.5), i32(axes)], {"keep_dims": keep},
                     ref=reduce_ref(op.lower()))
    # Shapes and slices.
    case("Reshape", "Reshape", [r.f((2, 6)), i32([3, -1])], ref=lambda t, a: [t[0].reshape(3, 4)])
    case("Transpose", "Transpose", [r.f((2, 3, 4)), i32([2, 0, 1])],
         ref=lambda t, a: [t[0].permute(2, 0, 1)])
    case("ExpandDims", "ExpandDims", [r.f((2, 3)), np.int32(-1)],
         ref=lambda t, a: [t[0].unsqueeze(-1)])
    case("Squeeze", "Squeeze", [r.f((2, 1, 3, 1))], {"axis": [1]},
         ref=lambda t, a: [t[0].squeeze(1)])
    case("Tile", "Tile", [r.f((2, 3)), i32([2, 3])], ref=lambda t, a: [t[0].repeat(2, 3)])
    case("BroadcastTo", "BroadcastTo", [r.f((3, 1)), i32([2, 3, 4])],
         ref=lambda t, a: [t[0].expand(2, 3, 4)])
    case("Fill", "Fill", [i32([2, 3]), np.float32(0.7)], ref=lambda t, a: [t[1].expand(2, 3)])
    case("Concat", "Concat", [r.f((2, 3)), r.f((2, 1)), r.f((2, 2)), np.int32(1)],
         ref=lambda t, a: [torch.cat(t[:3], 1)])
    case("Split", "Split", [np.int32(0), r.f((6, 3))], {"num_split": 3}, outputs=(0, 1, 2),
         ref=lambda t, a: list(torch.chunk(t[1], 3, 0)))
    case("Slice", "Slice", [r.f((4, 5)), i32([1, 2]), i32([2, -1])], ref=slice_ref)
    case("StridedSlice", "StridedSlice", [r.f((5, 6)), i32([4, 1]), i32([0, 6]), i32([-2, 2])],
         ref=strided_slice_ref)
    case("StridedSlice masks", "StridedSlice", [r.f((4, 5, 3)), i32([1, 0, 2]), i32([3, 4, 0]),
                                                i32([1, 2, 1])],
         {"begin_mask": 2, "end_mask": 4, "shrink_axis_mask": 4}, ref=strided_slice_ref)
    case("Gather repeated rows", "Gather",
         [r.f((6, 4)), np.array([[5, 0], [5, 2], [1, 5]], dtype=np.int32)],
         ref=lambda t, a: [t[0][t[1].long()]])
    case("Gather axis 1", "Gather",
         [r.f((3, 5, 4)), np.array([[4, 0], [4, 2]], dtype=np.int64)], {"axis": 1},
         ref=lambda t, a: [t[0][:, t[1].long()]])
    case("Gather axis -1, scalar index", "Gather", [r.f((2, 3, 4)), np.int32(3)], {"axis": -1},
         ref=lambda t, a: [t[0][..., 3]])
    case("DynamicStitch two parts", "DynamicStitch",
         [i32([0, 3]), i32([1, 2, 4]), r.f((2, 3)), r.f((3, 3))], {"N": 2},
         ref=lambda t, a: [torch.zeros(5, 3, dtype=torch.float64)
                           .index_put((t[0].long(),), t[2]).index_put((t[1].long(),), t[3])])
    # Neural-network ops.
    for shape in ((4, 3), (2, 3, 3, 5)):
        case("BiasAdd %s" % (shape,), "BiasAdd", [r.f(shape), r.f((shape[-1],))],
             ref=lambda t, a: [t[0] + t[1]])
    acts = {
        "Relu": (F.relu, -2, 2, (0,), {}), "Relu6": (F.relu6, -2, 8, (0, 6), {}),
        "LeakyRelu": (lambda x: F.leaky_relu(x, 0.2), -2, 2, (0,), {}),
        "Elu": (F.elu, -2, 2, (0,), {}), "Sigmoid": (torch.sigmoid, -4, 4, (), {}),
        "Tanh": (torch.tanh, -3, 3, (), {}), "Softplus": (F.softplus, -5, 5, (), {}),
    }
    for op, (f, lo, hi, away, attrs) in acts.items():
        case(op, op, [r.f((8, 16), lo, hi, away)], attrs, ref=lambda t, a, f=f: [f(t[0])])
    case("LeakyRelu alpha=0.35", "LeakyRelu", [r.f((5, 6), -2, 2, (0,))], {"alpha": 0.35},
         ref=lambda t, a: [F.leaky_relu(t[0], 0.35)])
    for shape in ((4, 10), (2, 3, 7)):
        case("Softmax %s" % (shape,), "Softmax", [r.f(shape, -3, 3)],
             ref=lambda t, a: [torch.softmax(t[0], -1)])
        case("LogSoftmax %s" % (shape,), "LogSoftmax", [r.f(shape, -3, 3)],
             ref=lambda t, a: [torch.log_softmax(t[0], -1)])
    labels = r.f((6, 10), 0.1, 1)
    labels = (labels / labels.sum(1, keepdims=True)).astype(np.float32)
    case("SoftmaxCrossEntropyWithLogits", "SoftmaxCrossEntropyWithLogits",
         [r.f((6, 10), -3, 3), labels],
         ref=lambda t, a: [-(t[1] * torch.log_softmax(t[0], -1)).sum(-1)])
    for dt in ("int32", "int64", "uint8"):
        case("SparseSoftmaxCrossEntropyWithLogits %s" % dt, "SparseSoftmaxCrossEntropyWithLogits",
             [r.f((8, 10), -3, 3), np.array([0, 9, 3, 3, 5, 1, 7, 2], dtype=dt)],
             {"Tlabels": dt}, ref=lambda t, a: [F.cross_entropy(t[0], t[1].long(), reduction="none")])
    case("SigmoidCrossEntropyWithLogits", "SigmoidCrossEntropyWithLogits",
         [r.f((4, 6), 0, 1), r.f((4, 6), -4, 4, (0,))],
         ref=lambda t, a: [torch.clamp(t[1], min=0) - t[1] * t[0] +
                           torch.log1p(torch.exp(-torch.abs(t[1])))])
    case("L2Loss", "L2Loss", [r.f((5, 7))], ref=lambda t, a: [(t[0] ** 2).sum() / 2])
    convs = [  # input, filter, strides, dilations, padding
        ((2, 7, 7, 3), (3, 3, 3, 4), 1, 1, "SAME"),
        ((2, 8, 7, 2), (3, 2, 2, 3), 2, 1, "SAME"),
        ((1, 9, 9, 2), (3, 3, 2, 2), (2, 3), 1, "VALID"),
        ((1, 9, 8, 2), (2, 3, 2, 3), 1, 2, "SAME"),
        ((2, 9, 9, 1), (2, 2, 1, 2), 1, (3, 2), "VALID"),
        ((1, 6, 6, 3), (1, 1, 3, 2), 2, 1, "SAME"),
        ((4, 28, 28, 1), (5, 5, 1, 32), 1, 1, "SAME"),    # the CNN's first layer
        ((4, 14, 14, 32), (5, 5, 32, 64), 1, 1, "SAME"),  # and its second
    ]
    for x, f, s, d, pad in convs:
        s = s if isinstance(s, tuple) else (s, s)
        d = d if isinstance(d, tuple) else (d, d)
        case("Conv2D %s %s s=%s d=%s %s" % (x, f, s, d, pad), "Conv2D",
             [r.f(x), r.f(f, -0.3, 0.3)],
             {"strides": [1, s[0], s[1], 1], "dilations": [1, d[0], d[1], 1], "padding": pad},
             ref=conv2d_ref)
    pools = [((1, 4, 4, 1), 2, 2, "VALID"), ((2, 5, 5, 3), 3, 2, "SAME"),
             ((1, 5, 4, 2), (2, 3), 1, "VALID"), ((1, 3, 5, 2), 2, 2, "SAME"),
             ((4, 28, 28, 32), 2, 2, "SAME")]
    for x, k, s, pad in pools:
        k = k if isinstance(k, tuple) else (k, k)
        s = s if isinstance(s, tuple) else (s, s)
        attrs = {"ksize": [1, k[0], k[1], 1], "strides": [1, s[0], s[1], 1], "padding": pad}
        case("MaxPool %s k=%s s=%s %s" % (x, k, s, pad), "MaxPool", [r.distinct(x)], attrs,
             ref=pool_ref("max"))
        case("AvgPool %s k=%s s=%s %s" % (x, k, s, pad), "AvgPool", [r.f(x)], attrs,
             ref=pool_ref("avg"))
    for train in (True, False):
        for x in ((16, 5), (4, 6, 6, 8)):
            c = x[-1]
            case("BatchNorm %s training=%d" % (x, train), "BatchNorm",
                 [r.f(x, -2, 3), r.f((c,), 0.5, 1.5), r.f((c,)), r.f((c,)), r.f((c,), 0.5, 1.5)],
                 {"is_training": train, "epsilon": 0.001}, variables=(3, 4), ref=batch_norm_ref)
    case("Dropout rate=0.4", "Dropout", [r.f((64, 32))], {"rate": 0.4, "seed": 5, "seed2": 9},
         outputs=(0, 1), stateful=True, ref=dropout_ref, check=dropout_check)


# ---------------------------------------------------------------------------

def to_np(t):
    dt = {"float32": np.float32, "float64": np.float64}[t["dtype"]]
    return np.asarray(t["data"], dtype=dt).reshape(t["shape"])


def compare(what, got, want):
    want = np.asarray(want, dtype=np.float64)
    got = np.asarray(got, dtype=np.float64)
    if got.shape != want.shape:
        return "%s: shape %s, PyTorch %s" % (what, list(got.shape), list(want.shape)), 0.0
    if want.size == 0:
        return None, 0.0
    scale = max(1.0, float(np.max(np.abs(want))))
    err = np.abs(got - want)
    rel = float(np.max(err / (ATOL * scale + RTOL * np.abs(want))))
    if not np.all(err <= ATOL * scale + RTOL * np.abs(want)):
        i = int(np.argmax(err / (ATOL * scale + RTOL * np.abs(want))))
        return ("%s: element %d is %.7g, PyTorch %.7g (%d of %d differ)" %
                (what, i, got.ravel()[i], want.ravel()[i],
                 int(np.sum(err > ATOL * scale + RTOL * np.abs(want))), want.size)), rel
    return None, rel


def run_case(c, res, verbose):
    if "error" in res:
        return ["flowstate: " + res["error"]]
    outs = [to_np(o) for o in res["outputs"]]
    errors = []
    if c["check"]:
        e = c["check"](outs, c["inputs"], c["attrs"])
        if e:
            errors.append(e)
    ts = []
    for k, x in enumerate(c["inputs"]):
        t = torch.tensor(np.asarray(x).astype(np.float64) if np.asarray(x).dtype.kind == "f"
                         else np.asarray(x))
        if k in res["checked"]:
            t.requires_grad_(True)
        ts.append(t)
    if c["ref"] is dropout_ref:
        ref = dropout_ref(ts, c["attrs"], outs)
    else:
        ref = c["ref"](ts, c["attrs"])
    worst = 0.0
    loss = 0
    for k, (y, w) in enumerate(zip(ref, res["weights"])):
        e, rel = compare("output %d" % c["outputs"][k], outs[k], y.detach().numpy())
        worst = max(worst, rel)
        if e:
            errors.append(e)
        loss = loss + (y * torch.from_numpy(to_np(w).astype(np.float64))).sum()
    want = torch.autograd.grad(loss, [ts[k] for k in res["checked"]], allow_unused=True)
    for k, g, wg in zip(res["checked"], res["grads"], want):
        wg = np.zeros(ts[k].shape) if wg is None else wg.numpy()
        gg = np.zeros(ts[k].shape) if g is None else to_np(g)
        e, rel = compare("gradient of input %d" % k, gg, wg)
        worst = max(worst, rel)
        if e:
            errors.append(e)
    if verbose:
        print("  %-60s worst error %.3f of tolerance" % (c["name"], worst))
    return errors


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--op-dump", required=True, help="the torch_op_dump binary")
    p.add_argument("--threads", type=int, default=2, help="Flowstate's intra-op threads")
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args()
    torch.set_default_dtype(torch.float64)
    build_cases()

    with tempfile.TemporaryDirectory() as tmp:
        req = {"cases": [{"name": c["name"], "node": {"op": c["op"], "attrs": c["attrs"]},
                          "inputs": [tensor(x) for x in c["inputs"]], "outputs": c["outputs"],
                          "variables": c["variables"], "stateful": c["stateful"]}
                         for c in CASES]}
        req_path, res_path = os.path.join(tmp, "request.json"), os.path.join(tmp, "result.json")
        with open(req_path, "w") as f:
            json.dump(req, f)
        subprocess.run([a.op_dump, req_path, res_path, "--threads", str(a.threads)], check=True)
        with open(res_path) as f:
            results = json.load(f)["results"]
        gradient_ops = subprocess.run([a.op_dump, "--gradient-ops"], check=True,
                                      capture_output=True, text=True).stdout.split()

    failed = 0
    for c, res in zip(CASES, results):
        errors = run_case(c, res, a.verbose)
        if errors:
            failed += 1
            print("FAIL %s\n  %s" % (c["name"], "\n  ".join(errors)))
    covered = {c["op"] for c in CASES}
    missing = [op for op in gradient_ops if op not in covered and op not in NOT_IN_TORCH]
    for op in missing:
        print("FAIL %s has a gradient but no case here" % op)
    print("%d cases over %d ops (torch %s): %d failed; %d op(s) with a gradient not compared" %
          (len(CASES), len(covered), torch.__version__, failed, len(missing)))
    return 1 if failed or missing else 0


if __name__ == "__main__":
    sys.exit(main())
