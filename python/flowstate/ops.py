"""A Python function for every op of the server's registry, generated at run time.

``OpLibrary(registry)`` reads the op list (``GET /v1/ops``, gRPC
``Ops.List``: inputs, outputs, attrs with kinds, defaults and allowed
dtypes, docs) and makes one function per op, so that an op added in C++
needs no Python change. Each function takes the op's inputs positionally or
by name, its attrs by keyword, and ``name=``, ``device=``,
``control_inputs=``; it checks them before anything is sent:

- an unknown attr, a missing required attr, an attr of the wrong kind, a
  dtype outside the attr's allowed list, a wrong number of inputs, inputs
  whose dtypes disagree: ``errors.InvalidArgument`` naming the node and the
  attr or input;
- type attrs (``T``), list lengths (``N``) and type lists are inferred from
  the inputs, as the server does; attrs left out take the server's default;
- a Python or numpy value given as an input becomes a ``Const`` of the
  dtype the op wants there.

It returns the node's Output, a tuple of Outputs for several outputs, a
list for a list output, and the Node itself for an op without outputs. Each
op is reachable by its registry name (``ops.MatMul``) and by a snake_case
alias (``ops.mat_mul``) where that is unambiguous.
"""

import inspect
import keyword
import re

import numpy as np

from . import dtypes, errors
from .attrs import tensor_attr, convert_attr
from .graph import Node, Output, get_default_graph, _static_shape

_ARG = re.compile(r"^(?:(\w+) \* )?(?:Ref\((\w+)\)|(\w+))$")


def snake_case(name):
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    return s.lower()


class ArgSpec:
    """One input or output: how many tensors and of which dtype."""

    def __init__(self, op, arg, attrs):
        self.name = arg["name"]
        self.type = arg["type"]
        m = _ARG.match(self.type)
        if not m:
            raise ValueError("op %s: cannot read the type '%s' of %s" % (op, self.type, self.name))
        self.number_attr = m.group(1)  # "N" of "N * T"
        self.is_ref = m.group(2) is not None
        t = m.group(2) or m.group(3)
        self.fixed = self.type_attr = self.type_list_attr = None
        if self.number_attr and attrs.get(self.number_attr, {}).get("kind") != "int":
            raise ValueError("op %s: %s's count '%s' is not an int attr"
                             % (op, self.name, self.number_attr))
        kind = attrs.get(t, {}).get("kind")
        if kind == "type":
            self.type_attr = t
        elif kind == "list(type)" and not self.number_attr:
            self.type_list_attr = t
        else:
            try:
                self.fixed = dtypes.canonical(t)
            except errors.FlowstateError:
                raise ValueError("op %s: %s has type '%s', neither a dtype nor a type attr"
                                 % (op, self.name, self.type)) from None

    @property
    def is_list(self):
        return bool(self.number_attr or self.type_list_attr)


class OpDef:
    """An op of the registry as the client reads it."""

    def __init__(self, d):
        self.name = d["name"]
        self.doc = d.get("doc", "")
        self.stateful = d.get("stateful", False)
        self.devices = d.get("devices", [])
        self.attrs = {a["name"]: a for a in d.get("attrs", [])}
        self.inputs = [ArgSpec(self.name, a, self.attrs) for a in d.get("inputs", [])]
        self.outputs = [ArgSpec(self.name, a, self.attrs) for a in d.get("outputs", [])]
        self.raw = d

    def inferred_attrs(self):
        """Attrs the inputs determine (type attrs, counts, type lists)."""
        out = set()
        for a in self.inputs:
            for x in (a.number_attr, a.type_attr, a.type_list_attr):
                if x:
                    out.add(x)
        return out


# --- the op functions --------------------------------------------------------------


def _graph_of(values, explicit):
    if explicit is not None:
        return explicit
    for v in values:
        items = v if isinstance(v, (list, tuple)) else [v]
        for x in items:
            if isinstance(x, (Output, Node)):
                return x.graph
    return get_default_graph()


class _Builder:
    """Builds one node of `op` in `graph`: inputs resolved, attrs inferred and checked."""

    def __init__(self, graph, op, name):
        self.graph, self.op = graph, op
        self.name = graph.unique_name(name or op.name)  # for messages; add_node re-derives it
        self.attrs = {}
        self.inputs = []

    def fail(self, message, field=None):
        return errors.InvalidArgument(message, node=self.name, field=field)

    def type_of(self, attr):
        if attr in self.attrs:
            return self.attrs[attr]
        d = self.op.attrs.get(attr, {}).get("default")
        return d if isinstance(d, str) else None

    def bind_type(self, attr, dtype, what):
        if dtype is None:
            return
        have = self.attrs.get(attr)
        if have is None:
            spec = self.op.attrs[attr]
            allowed = spec.get("allowed") or []
            if allowed and dtype not in [dtypes.canonical(a) for a in allowed]:
                raise self.fail("%s: dtype %s is not allowed for %s (allowed: %s)"
                                % (what, dtype, attr, ", ".join(allowed)), field="inputs")
            self.attrs[attr] = dtype
        elif have != dtype:
            raise self.fail("%s has dtype %s but %s is %s (from the other inputs or attrs)"
                            % (what, dtype, attr, have), field="inputs")

    def tensor(self, value, want, what):
        """The input name of `value`, a Const made for it where it is a Python value."""
        if isinstance(value, Node):
            if not value.outputs:
                raise self.fail("%s: node '%s' has no outputs (use control_inputs)"
                                % (what, value.name))
            value = value.outputs[0]
        if isinstance(value, Output):
            if value.graph is not self.graph:
                raise self.fail("%s: '%s' belongs to another graph" % (what, value.name))
            return value.name, value.dtype
        if isinstance(value, str):
            raise self.fail("%s: a string %r is not a tensor (pass graph['%s'] for a node's output)"
                            % (what, value, value))
        dtype = want or dtypes.infer(value)
        arr = np.asarray(value)
        try:
            converted = np.asarray(arr, dtype=dtypes.numpy_dtype(dtype))
        except (TypeError, ValueError):
            raise self.fail("%s: cannot make a %s tensor of %r" % (what, dtype, value)) from None
        if arr.dtype.kind == "f" and dtype not in ("float32", "float64", "float16", "bfloat16") \
                and not np.array_equal(converted, arr):
            raise self.fail("%s: %r is not a whole number, as dtype %s needs"
                            % (what, value, dtype))
        with self.graph.name_scope(self.name.rsplit("/", 1)[-1]):
            c = self.graph.ops.Const(value=converted, dtype=dtype, name="Const")
        return c.name, dtype

    def want_dtype(self, arg, i=None):
        if arg.fixed:
            return arg.fixed
        if arg.type_attr:
            return self.type_of(arg.type_attr)
        if arg.type_list_attr:
            types = self.attrs.get(arg.type_list_attr)
            return types[i] if types and i is not None and i < len(types) else None
        return None

    def add_input(self, arg, value):
        what = "input '%s'" % arg.name
        if not arg.is_list:
            if isinstance(value, (list, tuple)) and value and isinstance(value[0], (Output, Node)):
                raise self.fail("%s takes one tensor, got a list of %d" % (what, len(value)))
            name, dt = self.tensor(value, self.want_dtype(arg), what)
            if arg.fixed and dt and dt != arg.fixed:
                raise self.fail("%s must be %s, got %s ('%s')" % (what, arg.fixed, dt, name),
                                field="inputs")
            if arg.type_attr:
                self.bind_type(arg.type_attr, dt, "%s ('%s')" % (what, name))
            self.inputs.append(name)
            return
        if not isinstance(value, (list, tuple)):
            raise self.fail("%s takes a list of tensors, got %r" % (what, value))
        if arg.number_attr:
            n = self.attrs.get(arg.number_attr)
            if n is None:
                self.attrs[arg.number_attr] = len(value)
            elif n != len(value):
                raise self.fail("%s has %d tensors but %s is %d" % (what, len(value),
                                                                      arg.number_attr, n))
        got = []
        for i, v in enumerate(value):
            name, dt = self.tensor(v, self.want_dtype(arg, i), "%s[%d]" % (what, i))
            if arg.fixed and dt and dt != arg.fixed:
                raise self.fail("%s[%d] must be %s, got %s" % (what, i, arg.fixed, dt),
                                field="inputs")
            if arg.type_attr:
                self.bind_type(arg.type_attr, dt, "%s[%d] ('%s')" % (what, i, name))
            got.append(dt)
            self.inputs.append(name)
        if arg.type_list_attr:
            if arg.type_list_attr not in self.attrs:
                if any(d is None for d in got):
                    raise self.fail("%s: the dtypes of its tensors are not all known; give %s"
                                    % (what, arg.type_list_attr))
                self.attrs[arg.type_list_attr] = got
            elif len(self.attrs[arg.type_list_attr]) != len(got):
                raise self.fail("%s has %d tensors but %s lists %d dtypes"
                                % (what, len(got), arg.type_list_attr,
                                   len(self.attrs[arg.type_list_attr])))

    def output_specs(self):
        out = []
        for arg in self.op.outputs:
            if arg.number_attr:
                n = self.attrs.get(arg.number_attr, self.op.attrs[arg.number_attr].get("default"))
                if n is None:
                    raise self.fail("the number of outputs '%s' needs attr %s"
                                    % (arg.name, arg.number_attr))
                out.append((arg, [self.want_dtype(arg)] * int(n)))
            elif arg.type_list_attr:
                types = self.attrs.get(arg.type_list_attr,
                                       self.op.attrs[arg.type_list_attr].get("default"))
                if types is None:
                    raise self.fail("the outputs '%s' need attr %s"
                                    % (arg.name, arg.type_list_attr))
                out.append((arg, list(types)))
            else:
                out.append((arg, [self.want_dtype(arg)]))
        return out


def _static_output_shape(op, attrs):
    if op == "Placeholder":
        return _static_shape(attrs.get("shape")) if "shape" in attrs else None
    if op == "Variable":
        return _static_shape(attrs.get("shape"))
    if op == "Const":
        v = attrs.get("value")
        if isinstance(v, dict):
            return tuple(v.get("shape", []))
    return None


def make_op_function(op):
    """The Python function of OpDef `op`."""
    inferred = op.inferred_attrs()

    def build(graph, args, kwargs):
        name = kwargs.pop("name", None)
        device = kwargs.pop("device", None)
        control = kwargs.pop("control_inputs", None) or []
        b = _Builder(graph, op, name)
        # Given attrs first: they fix the dtypes inputs are made in.
        input_names = [a.name for a in op.inputs]
        given_inputs = dict(zip(input_names, args))
        if len(args) > len(input_names):
            raise b.fail("op %s takes %d inputs (%s), got %d"
                         % (op.name, len(input_names), ", ".join(input_names) or "none", len(args)))
        for k in list(kwargs):
            if k in input_names and k not in op.attrs:
                if k in given_inputs:
                    raise b.fail("input '%s' given twice" % k)
                given_inputs[k] = kwargs.pop(k)
        tensor_attrs = {}
        for k, v in kwargs.items():
            spec = op.attrs.get(k)
            if spec is None:
                raise errors.InvalidArgument(
                    "attrs.%s: op %s has no attr '%s' (it has: %s)"
                    % (k, op.name, k, ", ".join(op.attrs) or "none"),
                    node=b.name, field="attrs." + k)
            if v is None and k not in inferred and "default" in spec:
                continue
            if spec["kind"] == "tensor":
                tensor_attrs[k] = v
            else:
                b.attrs[k] = convert_attr(b.name, k, spec, v)
        for arg in op.inputs:
            if arg.name not in given_inputs:
                raise b.fail("op %s: missing input '%s'" % (op.name, arg.name))
            b.add_input(arg, given_inputs[arg.name])
        # Tensor attrs take the node's dtype attr, else theirs.
        for k, v in tensor_attrs.items():
            has_dtype = "dtype" in op.attrs and op.attrs["dtype"]["kind"] == "type"
            if has_dtype and "dtype" not in b.attrs:
                b.attrs["dtype"] = dtypes.infer(v)
            b.attrs[k] = tensor_attr(b.name, k, v, b.attrs.get("dtype"))
        for k, spec in op.attrs.items():
            if k not in b.attrs and "default" not in spec and k not in inferred:
                raise errors.InvalidArgument("attrs.%s: op %s needs attr '%s' (%s)"
                                             % (k, op.name, k, spec["kind"]),
                                             node=b.name, field="attrs." + k)
        outputs = b.output_specs()
        flat = [d for _, ds in outputs for d in ds]
        control_names = []
        for c in control:
            c = c.node if isinstance(c, Output) else c
            if not isinstance(c, Node):
                raise b.fail("control_inputs: expected nodes or outputs, got %r" % (c,))
            control_names.append("^" + c.name)
        shape = _static_output_shape(op.name, b.attrs)
        node = graph.add_node(op.name, b.inputs + control_names, b.attrs, name=name or op.name,
                              device=device, output_dtypes=flat,
                              output_shapes=[shape] + [None] * (len(flat) - 1) if flat else None)
        if not op.outputs:
            return node
        result, i = [], 0
        for arg, ds in outputs:
            if arg.is_list:
                result.append(node.outputs[i:i + len(ds)])
            else:
                result.append(node.outputs[i])
            i += len(ds)
        return result[0] if len(result) == 1 else tuple(result)

    def fn(*args, **kwargs):
        graph = _graph_of(list(args) + list(kwargs.values()), kwargs.pop("graph", None))
        return build(graph, args, kwargs)

    params = []
    for a in op.inputs:
        pname = a.name if a.name.isidentifier() and not keyword.iskeyword(a.name) else a.name + "_"
        params.append(inspect.Parameter(pname, inspect.Parameter.POSITIONAL_OR_KEYWORD))
    for k, spec in op.attrs.items():
        if not k.isidentifier() or keyword.iskeyword(k):
            continue
        default = inspect.Parameter.empty
        if "default" in spec or k in inferred:
            default = spec.get("default")
        params.append(inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=default))
    for k in ("name", "device", "control_inputs", "graph"):
        if k not in op.attrs:
            params.append(inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=None))
    fn.__signature__ = inspect.Signature(params)
    fn.__name__ = op.name
    fn.__qualname__ = op.name
    lines = [op.doc or op.name, ""]
    if op.inputs:
        lines.append("Inputs: " + ", ".join("%s (%s)" % (a.name, a.type) for a in op.inputs))
    if op.outputs:
        lines.append("Outputs: " + ", ".join("%s (%s)" % (a.name, a.type) for a in op.outputs))
    for k, spec in op.attrs.items():
        default = " = %r" % (spec["default"],) if "default" in spec else ""
        allowed = " in {%s}" % ", ".join(spec["allowed"]) if spec.get("allowed") else ""
        lines.append("Attr %s: %s%s%s" % (k, spec["kind"], allowed, default))
    if op.devices:
        lines.append("Kernels: " + ", ".join(op.devices))
    fn.__doc__ = "\n".join(lines)
    fn.op_def = op
    return fn


class OpLibrary:
    """The op functions of one registry (a list of op dicts as GET /v1/ops gives them)."""

    def __init__(self, registry):
        self._defs = {}
        self._fns = {}
        self.unsupported = {}  # op name -> why no function could be made
        for d in registry:
            try:
                op = OpDef(d)
                self._defs[op.name] = op
                self._fns[op.name] = make_op_function(op)
            except (ValueError, KeyError) as e:
                self.unsupported[d.get("name", "?")] = str(e)
        self._aliases = {}
        counts = {}
        for n in self._fns:
            counts[snake_case(n)] = counts.get(snake_case(n), 0) + 1
        for n in self._fns:
            s = snake_case(n)
            if counts[s] == 1 and s not in self._fns and not keyword.iskeyword(s):
                self._aliases[s] = n

    def names(self):
        """The registry names of the ops with a function."""
        return sorted(self._fns)

    def op_def(self, name):
        return self._defs[name]

    def __contains__(self, name):
        return name in self._fns or name in self._aliases

    def __getattr__(self, name):
        fns = self.__dict__.get("_fns", {})
        if name in fns:
            return fns[name]
        aliases = self.__dict__.get("_aliases", {})
        if name in aliases:
            return fns[aliases[name]]
        raise AttributeError("the server's registry has no op '%s'" % name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._fns) | set(self._aliases))

    def bind(self, graph):
        return BoundOps(self, graph)


class BoundOps:
    """The op functions of a library, building in one graph (graph.ops)."""

    def __init__(self, library, graph):
        self._library, self._graph = library, graph

    @property
    def library(self):
        return self._library

    def __getattr__(self, name):
        fn = getattr(self._library, name)

        def bound(*args, **kwargs):
            kwargs.setdefault("graph", self._graph)
            return fn(*args, **kwargs)
        bound.__name__ = fn.__name__
        bound.__doc__ = fn.__doc__
        bound.__signature__ = fn.__signature__
        return bound

    def __contains__(self, name):
        return name in self._library

    def __dir__(self):
        return dir(self._library)

    def bind(self, graph):
        return self._library.bind(graph)
