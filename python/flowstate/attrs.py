"""Attr values as the server's JSON takes them, checked by the kind the registry declares.

Kinds: int, float, bool, string, type (a dtype name, within the attr's
allowed dtypes), shape (a list of ints with -1 or None unknown; None for an
unknown rank), tensor (small finite ones as {"dtype", "shape", "data"},
others as base64 bytes), and list(...) of each. A value of the wrong kind is
InvalidArgument naming the node and ``attrs.<name>``.
"""

import numpy as np

from . import dtypes, errors
from .graph import shape_attr


def _bad(node, attr, kind, value):
    return errors.InvalidArgument("attrs.%s: expected %s, got %r" % (attr, kind, value),
                                  node=node, field="attrs." + attr)


def _int(node, attr, v):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise _bad(node, attr, "an int", v)
    return int(v)


def _float(node, attr, v):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise _bad(node, attr, "a float", v)
    return float(v)


def _dtype(node, attr, v, allowed=None):
    try:
        d = dtypes.canonical(v)
    except errors.FlowstateError:
        raise _bad(node, attr, "a dtype", v) from None
    if allowed and d not in [dtypes.canonical(x) for x in allowed]:
        raise errors.InvalidArgument("attrs.%s: dtype %s is not allowed (allowed: %s)"
                                     % (attr, d, ", ".join(allowed)),
                                     node=node, field="attrs." + attr)
    return d


def tensor_attr(node, attr, v, dtype):
    """A tensor attr: small finite ones as {"dtype", "shape", "data"}, others as b64."""
    a = np.asarray(v)
    dtype = dtypes.canonical(dtype or dtypes.infer(v))
    try:
        cast = np.asarray(a, dtype=dtypes.numpy_dtype(dtype))
    except (TypeError, ValueError):
        raise _bad(node, attr, "a %s tensor" % dtype, v) from None
    finite = cast.dtype.kind != "f" or np.isfinite(cast).all()
    if cast.size <= 64 and dtype != "bfloat16" and finite:
        return {"dtype": dtype, "shape": list(cast.shape), "data": cast.reshape(-1).tolist()}
    return dtypes.to_json(cast, dtype)


def convert_attr(node, name, spec, value):
    """The JSON value of attr `name` (its spec from the registry) given `value`."""
    kind = spec["kind"]
    if kind == "int":
        return _int(node, name, value)
    if kind == "float":
        return _float(node, name, value)
    if kind == "bool":
        if not isinstance(value, (bool, np.bool_)):
            raise _bad(node, name, "a bool", value)
        return bool(value)
    if kind == "string":
        if not isinstance(value, str):
            raise _bad(node, name, "a string", value)
        return value
    if kind == "type":
        return _dtype(node, name, value, spec.get("allowed"))
    if kind == "shape":
        try:
            return shape_attr(value)
        except errors.FlowstateError:
            raise _bad(node, name, "a shape (a list of ints, -1 or None for unknown)",
                       value) from None
    if kind == "tensor":
        return value  # converted once the node's dtype is known
    if kind.startswith("list(") and kind.endswith(")"):
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            raise _bad(node, name, "a list", value)
        inner = {"kind": kind[5:-1], "allowed": spec.get("allowed")}
        return [convert_attr(node, name, inner, x) for x in value]
    raise errors.InvalidArgument("attrs.%s: the server's attr kind '%s' is not known to this client"
                                 % (name, kind), node=node)
