#!/usr/bin/python3
"""Sparse embeddings: the training step of an embedding model as its table
grows from 10^4 to 10^7 rows, Flowstate against PyTorch.

The model: a float32 [rows, 64] table looked up by 512 ids per step, a
64-16-1 MLP with ReLU, the mean squared error, Adam -- Flowstate's lazy
SparseApplyAdam on the table (bench/embedding_bench.cc, through the job's
BuildTrainingGraph), PyTorch's nn.Embedding(sparse=True) with
torch.optim.SparseAdam on the table and torch.optim.Adam on the MLP. Each
(system, size) runs in its own process with the same intra-op thread count
(--threads), fresh random ids every step; the step time is the best of
--reps repetitions of at least --min-time seconds each. The growth from the
smallest to the largest table is measured side by side in one more process
(embedding_bench --beside: the two models' repetitions alternate, 4 x --reps
of --min-time / 4 each), so that a change in the machine's load between
two processes cannot pass for growth. Also reported: the
time to initialize the table and Adam's slots (PyTorch creates SparseAdam's
state on the first step, so its figure is construction plus first step) and
each process's peak RSS.

Before a size, the script checks MemAvailable for the table and two Adam
slots plus 25%, and skips the size with a printed note when it is short.

JSON lines (bench_util.py's format), e.g.
  {"name": "embedding/flowstate/rows_10000000/step", "value": 0.6, "unit": "ms"}
  {"name": "embedding/flowstate/step_growth_1e+04_to_1e+07", "value": 1.1, "unit": "x"}
  {"name": "embedding/speedup_vs_torch/rows_10000000", "value": 2.0, "unit": "x"}
Targets: growth <= 1.5x, speedup >= 1.5x.

  bench/embedding_bench.py --bench build/bench/embedding_bench [--threads 1]
                           [--sizes 10000,100000,1000000,10000000]
                           [--huge-pages-min-bytes B]   (0: none; default: the
                                                         allocator's, 64 MiB)
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_util import figure  # noqa: E402

DIM, HIDDEN, BATCH = 64, 16, 512


def mem_available_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def run(cmd):
    """Runs cmd; returns (stdout, peak RSS in bytes of that process)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    out, err = p.stdout.read().decode(), p.stderr.read().decode()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.stderr.write(err)
        raise SystemExit("%s failed with %d" % (" ".join(cmd), code))
    return out, usage.ru_maxrss * 1024


def torch_worker(rows, threads, min_time, reps):
    """One PyTorch run (in its own process); prints {"init": s, "step": s}."""
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    emb = torch.nn.Embedding(rows, DIM, sparse=True)
    torch.nn.init.uniform_(emb.weight, -0.05, 0.05)
    mlp = torch.nn.Sequential(torch.nn.Linear(DIM, HIDDEN, bias=False), torch.nn.ReLU(),
                              torch.nn.Linear(HIDDEN, 1, bias=False))
    sparse_opt = torch.optim.SparseAdam(list(emb.parameters()), lr=1e-3)
    dense_opt = torch.optim.Adam(mlp.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(42)
    feeds = [(torch.randint(0, rows, (BATCH,), generator=g),
              torch.randn(BATCH, 1, generator=g)) for _ in range(64)]
    k = [0]

    def step():
        ids, y = feeds[k[0] % len(feeds)]
        k[0] += 1
        sparse_opt.zero_grad()
        dense_opt.zero_grad()
        loss = ((mlp(emb(ids)) - y) ** 2).mean()
        loss.backward()
        sparse_opt.step()
        dense_opt.step()

    step()  # SparseAdam allocates its state here
    init = time.perf_counter() - t0
    best = float("inf")
    for _ in range(reps):
        calls, start = 0, time.perf_counter()
        while True:
            step()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time:
                break
        best = min(best, elapsed / calls)
    print(json.dumps({"init": init, "step": best}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default="build/bench/embedding_bench")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--sizes", default="10000,100000,1000000,10000000")
    ap.add_argument("--min-time", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--huge-pages-min-bytes", type=int, default=None)
    ap.add_argument("--torch-worker", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_worker:
        torch_worker(args.torch_worker, args.threads, args.min_time, args.reps)
        return
    try:
        subprocess.run(["/usr/bin/python3", "-c", "import torch"], check=True,
                       stderr=subprocess.DEVNULL)
        have_torch = True
    except subprocess.CalledProcessError:
        print("note: /usr/bin/python3 has no torch; Flowstate's figures only", file=sys.stderr)
        have_torch = False
    sizes = [int(s) for s in args.sizes.split(",")]
    huge = ([] if args.huge_pages_min_bytes is None
            else ["--huge-pages-min-bytes", str(args.huge_pages_min_bytes)])
    steps = {}
    for rows in sizes:
        need = int(rows * DIM * 4 * 3 * 1.25)
        avail = mem_available_bytes()
        if avail < need:
            print("note: skipping %d rows: table and Adam slots need ~%.1f GiB, %.1f GiB available"
                  % (rows, need / 2**30, avail / 2**30), file=sys.stderr)
            continue
        tag = "rows_%d" % rows
        out, rss = run([args.bench, "--rows", str(rows), "--threads", str(args.threads),
                        "--min-time=%g" % args.min_time, "--reps=%d" % args.reps] + huge)
        fs = {json.loads(l)["name"].rsplit("/", 1)[1]: json.loads(l)["value"]
              for l in out.splitlines() if l.startswith("{")}
        steps[rows] = fs["step"]
        figure("embedding/flowstate/%s/step" % tag, fs["step"], "ms")
        figure("embedding/flowstate/%s/init" % tag, fs["init"], "s")
        figure("embedding/flowstate/%s/peak_rss" % tag, rss / 2**20, "MiB")
        figure("embedding/flowstate/%s/rss_over_table_and_slots" % tag,
               rss / (rows * DIM * 4 * 3), "x")
        if have_torch:
            out, trss = run(["/usr/bin/python3", os.path.abspath(__file__), "--torch-worker",
                             str(rows), "--threads", str(args.threads),
                             "--min-time", str(args.min_time), "--reps", str(args.reps)])
            t = json.loads(out.strip().splitlines()[-1])
            figure("embedding/torch/%s/step" % tag, t["step"] * 1e3, "ms")
            figure("embedding/torch/%s/init" % tag, t["init"], "s")
            figure("embedding/torch/%s/peak_rss" % tag, trss / 2**20, "MiB")
            figure("embedding/speedup_vs_torch/%s" % tag, t["step"] * 1e3 / fs["step"], "x")
    if len(steps) >= 2:
        lo, hi = min(steps), max(steps)
        out, _ = run([args.bench, "--rows", str(hi), "--beside", str(lo),
                      "--threads", str(args.threads), "--min-time=%g" % (args.min_time / 4),
                      "--reps=%d" % (4 * args.reps)] + huge)
        side = {json.loads(l)["name"]: json.loads(l) for l in out.splitlines()
                if l.startswith("{")}
        big = side["embedding/flowstate/side_by_side/rows_%d/step" % hi]
        small = side[big["ratio_to"]]
        figure("embedding/flowstate/side_by_side/rows_%d/step" % lo, small["value"], "ms")
        figure("embedding/flowstate/side_by_side/rows_%d/step" % hi, big["value"], "ms")
        figure("embedding/flowstate/step_growth_%.0e_to_%.0e" % (lo, hi), big["ratio"], "x")


if __name__ == "__main__":
    main()
