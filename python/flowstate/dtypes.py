"""The server's dtypes and numpy arrays in its wire formats.

The server's tensors are little-endian and row-major: over gRPC a
``Tensor {dtype, shape, content}`` with the raw bytes, over REST the same
bytes base64-encoded (``{"dtype", "shape", "b64"}``). numpy has no bfloat16:
a bfloat16 tensor comes back as float32 (exact), and a float32 array fed
where bfloat16 is wanted is rounded to nearest even.
"""

import base64

import numpy as np

from . import errors

# Canonical names, in the server's order.
FLOAT32, FLOAT64, INT32, INT64, UINT8, BOOL, FLOAT16, BFLOAT16 = (
    "float32", "float64", "int32", "int64", "uint8", "bool", "float16", "bfloat16")
ALL = (FLOAT32, FLOAT64, INT32, INT64, UINT8, BOOL, FLOAT16, BFLOAT16)

ALIASES = {"float": FLOAT32, "double": FLOAT64, "int": INT32, "half": FLOAT16}

# The numpy dtype of each wire dtype (bfloat16: its raw 16 bits).
_NUMPY = {FLOAT32: np.dtype("<f4"), FLOAT64: np.dtype("<f8"), INT32: np.dtype("<i4"),
          INT64: np.dtype("<i8"), UINT8: np.dtype("u1"), BOOL: np.dtype("?"),
          FLOAT16: np.dtype("<f2"), BFLOAT16: np.dtype("<u2")}


def canonical(name):
    """The canonical dtype name of `name` (a name, an alias, a numpy dtype or type)."""
    if isinstance(name, str):
        n = ALIASES.get(name, name)
        if n in _NUMPY:
            return n
        raise errors.InvalidArgument("unknown dtype '%s' (expected one of %s)"
                                     % (name, ", ".join(ALL)))
    try:
        d = np.dtype(name)
    except TypeError:
        raise errors.InvalidArgument("not a dtype: %r" % (name,)) from None
    return from_numpy(d)


def from_numpy(d):
    """The wire dtype of numpy dtype `d` (narrower integers widen losslessly)."""
    d = np.dtype(d)
    if d.byteorder == ">":
        d = d.newbyteorder("<")
    for name, nd in _NUMPY.items():
        if name != BFLOAT16 and nd == d:
            return name
    if d.kind in "iu" and d.itemsize <= 2:
        return INT32
    if d.kind == "u" and d.itemsize == 4:
        return INT64
    raise errors.InvalidArgument("numpy dtype %s has no server dtype (the server has %s)"
                                 % (d, ", ".join(ALL)))


def numpy_dtype(name):
    """The numpy dtype a tensor of wire dtype `name` is returned as."""
    name = canonical(name)
    return np.dtype(np.float32) if name == BFLOAT16 else _NUMPY[name]


def _bf16_from_f32(a):
    bits = np.ascontiguousarray(a, dtype="<f4").view("<u4").astype(np.uint64)
    # Round to nearest even; NaNs stay NaN (a quiet bit set).
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    nan = np.isnan(np.asarray(a, dtype=np.float32))
    rounded = np.where(nan, (bits >> 16) | 0x40, rounded)
    return rounded.astype("<u2")


def _f32_from_bf16(raw):
    return (raw.astype("<u4") << 16).view("<f4")


def to_bytes(array, dtype):
    """(shape, little-endian bytes) of `array` as wire dtype `dtype`."""
    a = np.asarray(array)
    if dtype == BFLOAT16:
        raw = _bf16_from_f32(a)
        return list(a.shape), raw.tobytes()
    nd = _NUMPY[dtype]
    if a.dtype != nd:
        a = a.astype(nd)
    return list(a.shape), np.ascontiguousarray(a).tobytes()


def to_view(array, dtype):
    """(shape, flat little-endian byte view) of `array` as wire dtype `dtype`: the
    array's own memory where it is C-contiguous in that dtype (nothing is copied),
    else a converted copy's."""
    a = np.asarray(array)
    if dtype == BFLOAT16:
        raw = _bf16_from_f32(a)
    else:
        raw = np.ascontiguousarray(a, dtype=_NUMPY[dtype].newbyteorder("<"))
    return list(a.shape), memoryview(raw).cast("B")


def from_bytes(dtype, shape, content):
    """The numpy array of a wire tensor (a read-only view of `content` where it can be)."""
    dtype = canonical(dtype)
    shape = tuple(int(d) for d in shape)
    nd = _NUMPY[dtype]
    count = 1
    for d in shape:
        count *= d
    if len(content) != count * nd.itemsize:
        raise errors.DataLoss("a %s tensor of shape %s needs %d bytes, got %d"
                              % (dtype, list(shape), count * nd.itemsize, len(content)))
    a = np.frombuffer(content, dtype=nd, count=count).reshape(shape)
    if dtype == BFLOAT16:
        return _f32_from_bf16(a)
    return a


def infer(value):
    """The wire dtype a Python or numpy value is sent as when nothing says otherwise.

    Python floats are float32, ints int32 (int64 when they do not fit), bools
    bool: the server's own rule for JSON numbers.
    """
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        return from_numpy(value.dtype)
    a = np.asarray(value)
    if a.dtype == np.bool_:
        return BOOL
    if a.dtype.kind in "iu":
        if a.size and (a.min() < -2**31 or a.max() >= 2**31):
            return INT64
        return INT32
    if a.dtype.kind == "f":
        return FLOAT32
    raise errors.InvalidArgument("cannot make a tensor of %r (dtype %s)" % (value, a.dtype))


def to_json(array, dtype):
    """REST's b64 form of `array` as wire dtype `dtype`."""
    shape, raw = to_bytes(array, dtype)
    return {"dtype": dtype, "shape": shape, "b64": base64.b64encode(raw).decode("ascii")}


def _nested_dtype(values):
    a = np.asarray(values)
    if a.dtype == np.bool_:
        return BOOL
    if a.dtype.kind in "iu":
        return INT64 if a.size and (a.min() < -2**31 or a.max() >= 2**31) else INT32
    return FLOAT32


def _float_of(x):
    if isinstance(x, str):  # "NaN", "Infinity", "-Infinity"
        return float(x.replace("Infinity", "inf"))
    return x


def from_json(value, dtype=None):
    """The numpy array of any of REST's three tensor forms."""
    if isinstance(value, dict):
        dtype = canonical(value.get("dtype", dtype or FLOAT32))
        shape = value.get("shape", [])
        if "b64" in value:
            return from_bytes(dtype, shape, base64.b64decode(value["b64"]))
        data = value.get("data", [])
        if dtype in (FLOAT32, FLOAT64, FLOAT16, BFLOAT16):
            data = [_float_of(x) for x in data]
        return np.asarray(data, dtype=numpy_dtype(dtype)).reshape(shape)
    dtype = canonical(dtype) if dtype else _nested_dtype(value)
    if dtype in (FLOAT32, FLOAT64, FLOAT16, BFLOAT16) and np.asarray(value).dtype.kind in "OU":
        value = np.vectorize(_float_of, otypes=[float])(value)  # "NaN", "Infinity" inside
    return np.asarray(value, dtype=numpy_dtype(dtype))
