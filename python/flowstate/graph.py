"""Building graphs in Python: ``Graph``, ``Node``, ``Output``, name scopes.

A Graph is a list of nodes in the server's JSON form (``{"nodes": [{"name",
"op", "inputs", "attrs", "device"}]}``, README "Graphs as data"), checked
as it is built against the op registry of the server it came from: every op
of the registry is a method of the graph (``g.MatMul(x, w)``, also
``g.mat_mul``), generated from the registry by ``flowstate.ops``.

    g = client.graph()
    x = g.placeholder("float32", [None, 3], name="x")
    w = g.Variable([3, 1], initializer="glorot_uniform", name="w")
    y = g.MatMul(x, w, name="y")
    with client.session(g) as s:
        s.run(g.initializer())
        print(s.run(y, {x: np.ones((2, 3), np.float32)}))

Variables carry their initializer twice: as the Variable's ``init`` attrs,
which a job's training graph reads on the server, and as client-made
``Assign`` nodes (``<var>/Initializer/...``) that ``g.initializer()`` runs in
a session. Those are left out of ``g.as_dict(initializers=False)``, the form
a job takes.

Not thread-safe: build a graph from one thread.
"""

import contextlib
import json
import math
import re
import threading

import numpy as np

from . import dtypes, errors
from .control_flow import ControlFlowMixin
from .gradients import GradientsMixin

_NAME_OK = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_.\-/]*$")

INITIALIZERS = ("zeros", "ones", "constant", "uniform", "normal", "truncated_normal",
                "glorot_uniform", "glorot_normal", "he_normal", "he_uniform")


class Output:
    """Output `index` of a node: what a node's input or a fetch names."""

    __slots__ = ("node", "index", "dtype", "shape")

    def __init__(self, node, index, dtype=None, shape=None):
        self.node, self.index, self.dtype = node, index, dtype
        self.shape = None if shape is None else tuple(shape)

    @property
    def graph(self):
        return self.node.graph

    @property
    def name(self):
        """ "x" for output 0 of node x, "x:1" for output 1."""
        return self.node.name if self.index == 0 else "%s:%d" % (self.node.name, self.index)

    @property
    def op(self):
        return self.node

    def __repr__(self):
        return "<Output %s dtype=%s shape=%s>" % (self.name, self.dtype, _shape_str(self.shape))

    # Arithmetic through the graph's ops (TensorFlow's operator overloads).
    def _binary(self, op, other, reverse=False):
        a, b = (other, self) if reverse else (self, other)
        return getattr(self.graph.ops, op)(a, b)

    def __add__(self, o): return self._binary("Add", o)
    def __radd__(self, o): return self._binary("Add", o, True)
    def __sub__(self, o): return self._binary("Sub", o)
    def __rsub__(self, o): return self._binary("Sub", o, True)
    def __mul__(self, o): return self._binary("Mul", o)
    def __rmul__(self, o): return self._binary("Mul", o, True)
    def __truediv__(self, o): return self._binary("Div", o)
    def __rtruediv__(self, o): return self._binary("Div", o, True)
    def __matmul__(self, o): return self._binary("MatMul", o)
    def __rmatmul__(self, o): return self._binary("MatMul", o, True)
    def __neg__(self): return self.graph.ops.Neg(self)


class Node:
    """One node: name, op, inputs ("x", "x:1", "^x"), attrs (JSON values), device."""

    def __init__(self, graph, name, op, inputs, attrs, device=""):
        self.graph, self.name, self.op, self.inputs = graph, name, op, list(inputs)
        self.attrs, self.device = dict(attrs), device or ""
        self.outputs = []
        self.extra = {}  # the fields of a compact While or If node

    def __repr__(self):
        return "<Node %s op=%s>" % (self.name, self.op)

    def output(self, i=0):
        return self.outputs[i]

    def to_dict(self):
        d = {"name": self.name, "op": self.op}
        if self.inputs:
            d["inputs"] = list(self.inputs)
        if self.attrs:
            d["attrs"] = dict(self.attrs)
        if self.device:
            d["device"] = self.device
        d.update(self.extra)
        return d


def _shape_str(shape):
    return "?" if shape is None else "[%s]" % ", ".join("?" if d is None else str(d) for d in shape)


def shape_attr(shape):
    """A shape as the JSON attr: None -> unknown rank (null), None/-1 dims -> -1."""
    if shape is None:
        return None
    if isinstance(shape, (int, np.integer)):
        shape = [shape]
    out = []
    for d in shape:
        if d is None:
            out.append(-1)
        elif isinstance(d, (int, np.integer)) and d >= -1:
            out.append(int(d))
        else:
            raise errors.InvalidArgument("a shape's dimensions are ints >= 0, -1 or None; got %r"
                                         % (shape,))
    return out


def _static_shape(attr):
    return None if attr is None else tuple(None if d == -1 else d for d in attr)


_default = threading.local()


def get_default_graph():
    stack = getattr(_default, "stack", None)
    if not stack:
        raise errors.FailedPrecondition(
            "no default graph: call ops inside `with graph.as_default():`, or use graph.Op(...)")
    return stack[-1]


class Graph(ControlFlowMixin, GradientsMixin):
    """A dataflow graph checked against the op registry `ops` (a flowstate.ops.OpLibrary)."""

    def __init__(self, ops=None):
        if ops is not None and not hasattr(ops, "bind"):
            ops = ops.ops  # a Client
        self._library = ops
        self._nodes = []
        self._by_name = {}
        self._init_nodes = set()  # names of the client-made initializer nodes
        self._variables = []      # (variable node, its Assign node)
        self._scope = []
        self._scopes_taken = set()  # by unique_scope
        self._devices = []
        self._control = []
        self._in_init = 0
        self._functions = []      # the While/If functions being built, innermost last
        self.ops = ops.bind(self) if ops is not None else None

    # -- ops as methods

    def __getattr__(self, name):
        ops = self.__dict__.get("ops")
        if ops is None or name.startswith("__"):
            raise AttributeError(name)
        try:
            return getattr(ops, name)
        except AttributeError:
            raise AttributeError("Graph has no attribute or op '%s'" % name) from None

    @contextlib.contextmanager
    def as_default(self):
        """Makes this the graph of flowstate.ops' unbound functions within the block."""
        stack = getattr(_default, "stack", None)
        if stack is None:
            stack = _default.stack = []
        stack.append(self)
        try:
            yield self
        finally:
            stack.pop()

    # -- names

    @contextlib.contextmanager
    def name_scope(self, name):
        """Prefixes the nodes made within with "name/" (nested scopes join)."""
        if not name or not _NAME_OK.match(name) or "/" in name.strip("/"):
            raise errors.InvalidArgument("a name scope is one name part, got %r" % (name,))
        self._scope.append(name.strip("/"))
        try:
            yield "/".join(self._scope) + "/"
        finally:
            self._scope.pop()

    @contextlib.contextmanager
    def device(self, device):
        """Places the nodes made within on `device` ("CPU:0", "/job:worker/task:1")."""
        self._devices.append(device)
        try:
            yield
        finally:
            self._devices.pop()

    @contextlib.contextmanager
    def control_dependencies(self, nodes):
        """The nodes made within run after `nodes`."""
        self._control.append([n.node if isinstance(n, Output) else n for n in nodes])
        try:
            yield
        finally:
            self._control.pop()

    def unique_name(self, base):
        base = base.strip("/")
        full = "/".join(self._scope + [base]) if self._scope else base
        if not _NAME_OK.match(full):
            raise errors.InvalidArgument("not a node name: %r" % (full,), node=full)
        if not self._taken(full):
            return full
        i = 1
        while self._taken("%s_%d" % (full, i)):
            i += 1
        return "%s_%d" % (full, i)

    def _taken(self, name):
        # Inside a function a name must not shadow a graph node or an enclosing
        # function's arg or node either: the server resolves names innermost first.
        return name in self._by_name or any(name in f.names for f in self._functions)

    def unique_scope(self, base):
        """A scope name not used by a node or an earlier unique_scope ("dense", "dense_1")."""
        full = self.unique_name(base)
        i = 0
        while full in self._scopes_taken or any(n.startswith(full + "/") for n in self._by_name):
            i += 1
            full = self.unique_name("%s_%d" % (base, i))
        self._scopes_taken.add(full)
        return full.rsplit("/", 1)[-1]

    # -- nodes

    def add_node(self, op, inputs=(), attrs=None, name=None, device=None, output_dtypes=(),
                 output_shapes=None):
        """Adds a node as given (the generated op functions check it first)."""
        name = self.unique_name(name or op)
        inputs = list(inputs)
        for deps in self._control:
            inputs += ["^" + n.name for n in deps if ("^" + n.name) not in inputs]
        if device is None and self._devices:
            device = self._devices[-1]
        node = Node(self, name, op, inputs, attrs or {}, device or "")
        shapes = output_shapes or [None] * len(output_dtypes)
        node.outputs = [Output(node, i, d, s)
                        for i, (d, s) in enumerate(zip(output_dtypes, shapes))]
        if self._functions:
            fn = self._functions[-1]
            fn.nodes.append(node)
            fn.names.add(name)
            return node
        self._nodes.append(node)
        self._by_name[name] = node
        if self._in_init:
            self._init_nodes.add(name)
        return node

    def node(self, name):
        try:
            return self._by_name[name]
        except KeyError:
            raise errors.NotFound("no node '%s' in the graph" % name, node=name) from None

    def __getitem__(self, name):
        """The Output "x" or "x:1"."""
        node, _, index = name.partition(":")
        return self.node(node).outputs[int(index or 0)]

    def __contains__(self, name):
        return name in self._by_name

    def __len__(self):
        return len(self._nodes)

    @property
    def nodes(self):
        return list(self._nodes)

    @property
    def variables(self):
        return [v.outputs[0] for v, _ in self._variables]

    # -- the JSON form

    def as_dict(self, initializers=True, start=0):
        """{"nodes": [...]} from node `start` on; without the client's initializer
        nodes when `initializers` is False (what a job takes)."""
        nodes = self._nodes[start:]
        if not initializers:
            nodes = [n for n in nodes if n.name not in self._init_nodes]
        return {"nodes": [n.to_dict() for n in nodes]}

    def to_json(self, initializers=True, indent=None):
        return json.dumps(self.as_dict(initializers), indent=indent)

    @classmethod
    def from_dict(cls, graph, ops=None):
        """A Graph holding the nodes of a JSON graph (unchecked; outputs by index)."""
        g = cls(ops)
        for n in graph.get("nodes", []):
            attrs = n.get("attrs", {})
            dtype = attrs.get("dtype") if isinstance(attrs.get("dtype"), str) else None
            shape = attrs.get("shape") if n.get("op") in ("Placeholder", "Variable") else None
            node = Node(g, n["name"], n["op"], n.get("inputs", []), attrs, n.get("device", ""))
            node.outputs = [Output(node, 0, dtype, _static_shape(shape))]
            g._nodes.append(node)
            g._by_name[node.name] = node
        return g

    # -- conveniences over the generated ops

    def placeholder(self, dtype, shape=None, name="Placeholder"):
        """A fed value: dtype and shape (None or -1 for an unknown dimension; None: any rank)."""
        attrs = {"dtype": dtypes.canonical(dtype)}
        if shape is not None:
            attrs["shape"] = shape_attr(shape)
        return self.ops.Placeholder(name=name, **attrs)

    def constant(self, value, dtype=None, name="Const"):
        return self.ops.Const(value=value, dtype=dtype or dtypes.infer(value), name=name)

    def Variable(self, shape, dtype="float32", initializer="glorot_uniform", name="Variable",
                 initial_value=None, seed=0, **init_args):
        """A variable with an initializer.

        `initializer` is one of INITIALIZERS (init_args: value for "constant";
        minval, maxval for "uniform"; mean, stddev for the normals), or None
        with `initial_value` (an array) to start from given values (a job
        cannot initialize those: give it an initializer or init_from).
        """
        dtype = dtypes.canonical(dtype)
        shape = shape_attr(shape)
        if shape is None or any(d < 0 for d in shape):
            raise errors.InvalidArgument("a Variable needs a fully defined shape, got %r"
                                         % (shape,))
        attrs = {"shape": shape, "dtype": dtype}
        if initial_value is None:
            if initializer not in INITIALIZERS:
                raise errors.InvalidArgument("unknown initializer %r (expected one of %s)"
                                             % (initializer, ", ".join(INITIALIZERS)),
                                             field="initializer")
            attrs["init"] = initializer
            for k, v in init_args.items():
                if k not in ("value", "minval", "maxval", "mean", "stddev"):
                    raise errors.InvalidArgument("initializer %s takes no argument '%s'"
                                                 % (initializer, k), field=k)
                attrs["init_" + k] = float(v)
            if seed:
                attrs["seed"] = int(seed)
        elif init_args:
            raise errors.InvalidArgument("initial_value takes no initializer arguments")
        var = self.ops.Variable(name=name, **attrs)
        with self._initializer_scope(var.node.name):
            if initial_value is not None:
                value = self.ops.Const(value=np.asarray(initial_value), dtype=dtype, name="value")
            else:
                value = self._init_value(var.node.name, initializer, shape, dtype, attrs, seed)
            assign = self.ops.Assign(var, value, name="assign")
        self._variables.append((var.node, assign.node))
        return var

    @contextlib.contextmanager
    def _initializer_scope(self, var_name):
        saved, self._scope = self._scope, var_name.split("/") + ["Initializer"]
        saved_control, self._control = self._control, []
        self._in_init += 1
        try:
            yield
        finally:
            self._in_init -= 1
            self._scope, self._control = saved, saved_control

    def _init_value(self, var_name, init, shape, dtype, attrs, seed):
        """The initializer's value, as graph/initializers.cc computes it on the server."""
        ops = self.ops
        dims = ops.Const(value=np.asarray(shape, np.int32), dtype="int32", name="shape")
        if init in ("zeros", "ones", "constant"):
            v = 0.0 if init == "zeros" else 1.0 if init == "ones" else attrs.get("init_value", 0.0)
            scalar = ops.Const(value=np.asarray(v).astype(dtypes.numpy_dtype(dtype)), dtype=dtype,
                               name="value")
            return ops.Fill(dims, scalar)
        if dtype not in ("float32", "float64"):
            raise errors.InvalidArgument("initializer '%s' needs a float32 or float64 variable"
                                         % init, node=var_name)
        fan_in = fan_out = 1.0
        if len(shape) == 1:
            fan_in = fan_out = float(shape[0])
        elif len(shape) >= 2:
            receptive = float(np.prod(shape[:-2])) if len(shape) > 2 else 1.0
            fan_in, fan_out = shape[-2] * receptive, shape[-1] * receptive
        rnd = {"dtype": dtype, "seed": int(seed), "seed2": 0}
        trunc = 0.87962566103423978
        if init == "uniform":
            return ops.RandomUniform(dims, minval=attrs.get("init_minval", -0.05),
                                     maxval=attrs.get("init_maxval", 0.05), **rnd)
        if init == "normal":
            return ops.RandomNormal(dims, mean=attrs.get("init_mean", 0.0),
                                    stddev=attrs.get("init_stddev", 0.05), **rnd)
        if init == "truncated_normal":
            return ops.TruncatedNormal(dims, mean=attrs.get("init_mean", 0.0),
                                       stddev=attrs.get("init_stddev", 0.05), **rnd)
        if init == "glorot_uniform":
            limit = math.sqrt(6.0 / (fan_in + fan_out))
            return ops.RandomUniform(dims, minval=-limit, maxval=limit, **rnd)
        if init == "glorot_normal":
            return ops.TruncatedNormal(dims, mean=0.0,
                                       stddev=math.sqrt(2.0 / (fan_in + fan_out)) / trunc, **rnd)
        if init == "he_normal":
            return ops.TruncatedNormal(dims, mean=0.0, stddev=math.sqrt(2.0 / fan_in) / trunc,
                                       **rnd)
        limit = math.sqrt(6.0 / fan_in)  # he_uniform
        return ops.RandomUniform(dims, minval=-limit, maxval=limit, **rnd)

    def initializer(self, name="init"):
        """A NoOp that assigns every variable made so far its initial value (run it first)."""
        saved, self._scope = self._scope, []
        self._in_init += 1
        try:
            return self.ops.NoOp(name=name,
                                 control_inputs=[assign for _, assign in self._variables])
        finally:
            self._in_init -= 1
            self._scope = saved

