#!/usr/bin/python3
"""A checkpoint's .npz export against its .fsck export, read with numpy.

    compare_npz_fsck.py FILE.npz FILE.fsck

The .fsck file is parsed here as checkpoints/FORMAT.md ("Export files")
gives it; the .npz is read with numpy.load. Every tensor of the .fsck must
be in the .npz under its name with the dtype of its Flowstate dtype
(bfloat16: float32, converted), its shape, C order and the same values
(bit for bit), and the .npz must hold nothing else. Exit status 0 when they
agree, 1 otherwise. Run with Debian's /usr/bin/python3 (python3-numpy).
"""
import struct
import sys

import numpy

# Flowstate's dtype codes (FORMAT.md, "Tensor record") -> numpy dtype strings.
DTYPES = {1: "<f4", 2: "<f8", 3: "<i4", 4: "<i8", 5: "|u1", 6: "|b1", 7: "<f2", 8: "bfloat16"}


def read_fsck(path):
    with open(path, "rb") as f:
        b = f.read()
    if b[:8] != b"FSCKPT\r\n":
        sys.exit(f"{path}: not an FSCK export")
    _version, _crc, step, n, meta_len = struct.unpack_from("<IIQQQ", b, 8)
    pos = 8 + 4 + 4 + 24 + meta_len
    tensors = {}
    for _ in range(n):
        _crc, name_len = struct.unpack_from("<II", b, pos)
        pos += 8
        name = b[pos:pos + name_len].decode()
        pos += name_len
        dtype, rank = b[pos], struct.unpack_from("<I", b, pos + 4)[0]
        pos += 8
        dims = struct.unpack_from(f"<{rank}Q", b, pos)
        pos += 8 * rank
        nbytes = struct.unpack_from("<Q", b, pos)[0]
        pos += 8
        tensors[name] = (dtype, tuple(dims), b[pos:pos + nbytes])
        pos += nbytes
    if b[pos:pos + 8] != b"FSCKEND\n":
        sys.exit(f"{path}: bad trailer")
    return step, tensors


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    step, tensors = read_fsck(sys.argv[2])
    problems = []
    with numpy.load(sys.argv[1]) as z:
        names = set(z.files)
        for name, (dtype, dims, data) in tensors.items():
            if name not in names:
                problems.append(f"{name}: missing from the .npz")
                continue
            a = z[name]
            want = DTYPES[dtype]
            if want == "bfloat16":
                # bfloat16 is written as float32: the 16 bits are the high half.
                bits = numpy.frombuffer(data, dtype="<u2").astype("<u4") << 16
                data, want = bits.tobytes(), "<f4"
            if a.dtype.str != want:
                problems.append(f"{name}: dtype {a.dtype.str}, want {want}")
            if a.shape != dims:
                problems.append(f"{name}: shape {a.shape}, want {dims}")
            if not a.flags["C_CONTIGUOUS"]:
                problems.append(f"{name}: not C order")
            if a.tobytes() != data:
                problems.append(f"{name}: values differ")
        extra = names - set(tensors)
        if extra:
            problems.append(f"the .npz has tensors the checkpoint lacks: {sorted(extra)}")
        summary = ", ".join(f"{k} {z[k].dtype.str} {z[k].shape}" for k in sorted(names))
    if problems:
        print("the .npz and the .fsck disagree:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    print(f"step {step}: {len(tensors)} tensors agree ({summary})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
