"""Binary bodies: how runs and predictions travel over REST.

8 bytes (the JSON's length, unsigned little-endian), the JSON request or answer,
then the tensors' bytes, which the JSON points into: a tensor is {"dtype",
"shape", "data_offsets": [begin, end]} (safetensors' layout; the server's
README, "Large tensors"). An array's memory is sent as it is and an answer's
tensors are views of one numpy buffer, so a 64 MiB feed is neither copied nor
base64-encoded on the client.
"""

import json
import struct

import numpy as np

from . import dtypes, errors

TENSORS = "application/x-flowstate-tensors"


def encode(doc, key, tensors):
    """The chunks of a binary body: `doc` with doc[key] the tensors (name ->
    (wire dtype, array)) and "encoding": "binary" (a binary answer)."""
    views, entries, offset = [], {}, 0
    for name, (d, a) in tensors.items():
        shape, view = dtypes.to_view(a, d)
        entries[name] = {"dtype": d, "shape": shape,
                         "data_offsets": [offset, offset + view.nbytes]}
        if view.nbytes:
            views.append(view)
        offset += view.nbytes
    doc = dict(doc, encoding="binary")
    doc[key] = entries
    head = json.dumps(doc).encode()
    return [struct.pack("<Q", len(head)) + head] + views


def _read_exactly(resp, n):
    data = resp.read(n)
    if len(data) != n:
        raise errors.DataLoss("a binary answer ended after %d of %d bytes" % (len(data), n))
    return data


def read(resp):
    """(JSON, numpy uint8 array of the tensor bytes) of a binary answer; the tensor
    bytes are read into numpy's memory (huge pages for a large buffer), not into
    a bytes object."""
    length = resp.length
    (n,) = struct.unpack("<Q", _read_exactly(resp, 8))
    if length is not None and n > length - 8:
        raise errors.DataLoss("a binary answer's JSON of %d bytes is longer than the answer" % n)
    doc = json.loads(_read_exactly(resp, n))
    if length is None:
        return doc, np.frombuffer(resp.read(), dtype=np.uint8)
    rest = length - 8 - n
    buf = np.empty(rest, dtype=np.uint8)
    view, got = memoryview(buf), 0
    while got < rest:
        k = resp.readinto(view[got:])
        if not k:
            raise errors.DataLoss("a binary answer ended after %d of %d tensor bytes"
                                  % (got, rest))
        got += k
    return doc, buf


def decode_outputs(doc, buf):
    """name -> numpy array of a binary answer's "outputs" (views of `buf`)."""
    out = {}
    for name, t in doc.get("outputs", {}).items():
        if "data_offsets" not in t:
            out[name] = dtypes.from_json(t)
            continue
        b, e = t["data_offsets"]
        if not 0 <= b <= e <= buf.size:
            raise errors.DataLoss("outputs.%s: data_offsets %r lie outside the %d tensor bytes"
                                  % (name, t["data_offsets"], buf.size))
        out[name] = dtypes.from_bytes(t["dtype"], t["shape"], buf[b:e])
    return out
