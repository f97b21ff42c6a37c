#!/usr/bin/python3
"""Lazy Adam on sparse gradients, Flowstate against PyTorch's twin.

embedding_dump (embedding_dump.cc) trains e [12, 4] through Gather and a
[4, 1] layer w with Flowstate's optimizer (SparseApplyAdam on e, ApplyAdam
on w) and prints the start values, the ids of every step and the result;
this script trains the same model with nn.Embedding(sparse=True) and
torch.optim.SparseAdam on the table, torch.optim.Adam on w, in float64, and
compares. Rows a step does not use keep their moments and values in both
(lazy Adam), duplicate ids are summed (PyTorch coalesces the gradient), and
rows never used do not move.

One known difference, within the tolerance: SparseAdam adds eps to sqrt(v)
before the bias correction (lr sqrt(1 - b2^t) / (1 - b1^t) m / (sqrt(v) + eps)),
Flowstate's Adam after it (lr / (1 - b1^t) m / (sqrt(v / (1 - b2^t)) + eps),
PyTorch's dense Adam), i.e. eps differs by the factor sqrt(1 - b2^t). With
eps 1e-8 that moves e by up to ~2e-6 over 6 steps, and with eps 1e-12 by
~2e-10 (linear in eps, as it should be); the comparison runs at eps 1e-12
with a tolerance of 1e-9.

Exit status: 0 when they agree, 1 on a mismatch, 77 (ctest's skip) when
/usr/bin/python3 has no torch, with a message saying so.

  tests/torch/sparse_adam_twin.py --dump build/tests/embedding_dump
"""
import argparse
import json
import subprocess
import sys

try:
    import torch
except ImportError as e:  # the ctest's SKIP_RETURN_CODE
    print("SKIP: the SparseAdam twin test needs torch in %s (%s); install Debian's "
          "python3-torch" % (sys.executable, e))
    sys.exit(77)

RTOL = 1e-9
ATOL = 1e-9
EPS = 1e-12


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args()
    failures = 0
    for seed in (5, 11):
        out = subprocess.run([args.dump, "--steps", str(args.steps), "--seed", str(seed),
                              "--eps", str(EPS)],
                             check=True, stdout=subprocess.PIPE).stdout
        d = json.loads(out)
        rows, dim = d["rows"], d["dim"]
        torch.manual_seed(0)
        emb = torch.nn.Embedding(rows, dim, sparse=True).double()
        with torch.no_grad():
            emb.weight.copy_(torch.tensor(d["e0"], dtype=torch.float64).reshape(rows, dim))
        w = torch.nn.Parameter(torch.tensor(d["w0"], dtype=torch.float64).reshape(dim, 1))
        betas = (d["beta1"], d["beta2"])
        sparse_opt = torch.optim.SparseAdam([emb.weight], lr=d["lr"], betas=betas, eps=d["eps"])
        dense_opt = torch.optim.Adam([w], lr=d["lr"], betas=betas, eps=d["eps"])
        used = set()
        for ids in d["ids"]:
            used.update(ids)
            sparse_opt.zero_grad()
            dense_opt.zero_grad()
            pred = emb(torch.tensor(ids, dtype=torch.int64)) @ w
            loss = ((pred - 1.0) ** 2).sum() / len(ids)
            loss.backward()
            sparse_opt.step()
            dense_opt.step()
        e_ref = emb.weight.detach().reshape(-1)
        e_got = torch.tensor(d["e"], dtype=torch.float64)
        w_ref = w.detach().reshape(-1)
        w_got = torch.tensor(d["w"], dtype=torch.float64)
        for name, got, ref in (("e", e_got, e_ref), ("w", w_got, w_ref)):
            if not torch.allclose(got, ref, rtol=RTOL, atol=ATOL):
                diff = (got - ref).abs().max().item()
                print("MISMATCH seed %d: %s differs from PyTorch by up to %g" % (seed, name, diff))
                failures += 1
        e0 = torch.tensor(d["e0"], dtype=torch.float64).reshape(rows, dim)
        for r in range(rows):
            if r not in used and not torch.equal(e_got.reshape(rows, dim)[r], e0[r]):
                print("MISMATCH seed %d: row %d was never used but moved" % (seed, r))
                failures += 1
        moved = sum(1 for r in range(rows) if not torch.equal(e_got.reshape(rows, dim)[r], e0[r]))
        print("seed %d: %d steps, %d of %d rows moved; compared with SparseAdam/Adam "
              "(rtol %g)" % (seed, len(d["ids"]), moved, rows, RTOL))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
