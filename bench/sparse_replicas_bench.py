#!/usr/bin/env python3
"""Two replicas of an embedding model on two tasks: sparse gradients sent as
rows (all-gather) against densified into the all-reduce, and the table
replicated on both tasks against shared between them.

Starts the real binaries on loopback (`flowstate serve` as task 0 and
master, one `flowstate worker` as task 1, each with one intra-op and one
inter-op thread), and for each table size (--rows) runs the same job twice,
interleaved: "rows" (the default: each sparse gradient is an all-gather of
its indices and values) and "dense" ("sparse_as_dense": true: the
gradient, as large as the table, goes through the ring all-reduce). The
model: a table of R x 64 float32, a batch of 512 ids per replica drawn
uniformly, the rows' dot product with a 64-vector fitted to a target by
Adam (lazy, sparse updates in both runs: only the exchange differs), or
by --optimizer sgd (no slots: what lets two tasks of the dense run of a
10^7-row table fit this machine's memory).
With --partitions P (default 2) the table is partitioned in P parts in
every run, and a third run, "shared" ("partitioned_tables": "shared"),
keeps one copy of it: part p and its Adam slots on task p % 2 only, each
lookup answered by the part's holder and each gathered gradient applied
once, by the holder. For each run the largest resident set of each task
while it trains is printed too (VmRSS sampled with the step counter).

For each: the step time (the job's step counter polled, steps after the
warm-up), the bytes sent per step over loopback (/proc/net/dev, both
processes together, so the gRPC control traffic is in it too), and the
all-reduce bytes the job reports (flowstate_allreduce_bytes_total: the
buffers its replicas hand to the collective) per step. Dense runs are skipped for
tables above --dense-max-rows (a 10^7-row gradient is 2.4 GiB a step and
a few copies of it per task).

Prints one JSON line per figure ({"name", "value", "unit"}).

    bench/sparse_replicas_bench.py --flowstate build/flowstate
        [--rows 100000,1000000] [--steps 60] [--dense-max-rows 1000000]
        [--partitions 2] [--modes rows,dense,shared] [--optimizer adam|sgd]
"""

import argparse
import json
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import figure, free_ports, metric, request  # noqa: E402
from replicas_bench import Server, wait_up  # noqa: E402

WARMUP = 10
DIM = 64
BATCH = 512


def job(rows, steps, mode, partitions, optimizer="adam"):
    dense = mode == "dense"
    nodes = [
        {"name": "id", "op": "Placeholder", "attrs": {"dtype": "int32", "shape": [-1]}},
        {"name": "y", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1]}},
        {"name": "emb", "op": "Variable",
         "attrs": {"dtype": "float32", "shape": [rows, DIM], "init": "normal", "init_stddev": 0.01,
                   "partitions": partitions}},
        {"name": "w", "op": "Variable", "attrs": {"dtype": "float32", "shape": [DIM, 1], "init": "glorot_uniform"}},
        {"name": "rows", "op": "Gather", "inputs": ["emb", "id"]},
        {"name": "p", "op": "MatMul", "inputs": ["rows", "w"]},
        {"name": "flat", "op": "Const", "attrs": {"dtype": "int32", "value": [-1]}},
        {"name": "pred", "op": "Reshape", "inputs": ["p", "flat"]},
        {"name": "sq", "op": "SquaredDifference", "inputs": ["pred", "y"]},
        {"name": "axes", "op": "Const", "attrs": {"dtype": "int32", "value": []}},
        {"name": "loss", "op": "Mean", "inputs": ["sq", "axes"]},
    ]
    spec = {
        "name": "embedding-%d-%s" % (rows, mode),
        "graph": {"nodes": nodes},
        "loss": "loss",
        "optimizer": {"type": optimizer, "learning_rate": 0.01},
        "input": {"format": "csv", "files": {"id": "ids-%d.csv" % rows, "y": "ids-%d.csv" % rows},
                  "header": True,
                  "columns": {"id": {"columns": ["id"], "dtype": "int32"}, "y": ["target"]},
                  "batch_size": BATCH, "epochs": 1000},
        "replicas": 2,
        "max_steps": steps,
        "check_replicas_every": 0,
        "sparse_as_dense": dense,
        "seed": 1,
    }
    if mode == "shared":
        spec["partitioned_tables"] = "shared"
    return spec


def rss_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def lo_bytes():
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == "lo":
                return int(rest.split()[8])  # transmitted bytes
    return 0


def run(api, spec, pids, seconds=1800):
    code, j = request(api + "/v1/jobs", "POST", spec)
    if code != 201:
        sys.exit("job refused: %s" % j)
    jid = j["job_id"]
    start = end = None
    rss = [0 for _ in pids]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        info = request(api + "/v1/jobs/" + jid)[1]
        if start is not None and info["state"] == "RUNNING" and info["step"] < spec["max_steps"]:
            # While it trains (not the final checkpoint after its last step).
            rss = [max(r, rss_bytes(p)) for r, p in zip(rss, pids)]
        if start is None and info["state"] == "RUNNING" and info["step"] >= WARMUP:
            text = request(api + "/metrics")[1]
            start = (time.monotonic(), info["step"], lo_bytes(),
                     metric(text, "flowstate_allreduce_bytes_total", {"job_id": jid}))
        elif (start is not None and info["state"] == "RUNNING" and
              start[1] < info["step"] < spec["max_steps"]):
            # The window ends at the last step seen before the final one
            # (after it comes the final checkpoint, not a step).
            end = (time.monotonic(), info["step"], lo_bytes())
        if info["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            if info["state"] != "SUCCEEDED":
                sys.exit("job %s: %s %s" % (jid, info["state"], info.get("error")))
            break
        time.sleep(0.02)
    else:
        sys.exit("job %s did not finish within %d s" % (jid, seconds))
    if start is None or end is None:
        sys.exit("job %s ended before its warm-up" % jid)
    steps = end[1] - start[1]
    total = metric(request(api + "/metrics")[1], "flowstate_allreduce_bytes_total", {"job_id": jid})
    return {"step_s": (end[0] - start[0]) / steps, "lo_bytes": (end[2] - start[2]) / steps,
            "allreduce_bytes": (total - start[3]) / (info["step"] - start[1]), "rss": rss}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flowstate", required=True)
    ap.add_argument("--rows", default="100000,1000000")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--dense-max-rows", type=int, default=1000000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--modes", default="rows,dense,shared")
    ap.add_argument("--optimizer", default="adam", choices=["adam", "sgd"])
    a = ap.parse_args()
    modes = a.modes.split(",")
    flowstate = os.path.abspath(a.flowstate)
    sizes = [int(x) for x in a.rows.split(",")]
    with tempfile.TemporaryDirectory(prefix="flowstate_sparse_bench_") as tmp:
        data = os.path.join(tmp, "data")
        os.makedirs(data)
        rng = random.Random(1)
        for rows in sizes:
            with open(os.path.join(data, "ids-%d.csv" % rows), "w") as f:
                f.write("id,target\n")
                for _ in range(BATCH * 2 * 40):
                    i = rng.randrange(rows)
                    f.write("%d,%d\n" % (i, i % 3 - 1))

        def run_alone(spec):
            # Fresh processes for each run: the resident sets are its own.
            srv = Server(tmp)
            try:
                http, g0, g1 = free_ports(3)
                cluster = json.dumps({"worker": ["127.0.0.1:%d" % g for g in (g0, g1)]})
                one = ["--set", "devices.intra_op_threads=1", "--set", "jobs.inter_op_threads=1",
                       # a 10^7 x 64 table (or half of it) is over the 1 GiB cap on one tensor
                       "--set", "limits.max_shape_bytes=%d" % (1 << 33)]
                srv.start([flowstate, "serve", "--http", "127.0.0.1:%d" % http, "--grpc",
                           "127.0.0.1:%d" % g0, "--data-dir", tempfile.mkdtemp(dir=tmp),
                           "--data-root", data, "--cluster", cluster, "--task", "worker:0"] + one)
                srv.start([flowstate, "worker", "--grpc", "127.0.0.1:%d" % g1, "--cluster", cluster,
                           "--task", "worker:1", "--set", "data_root=" + data] + one)
                api = "http://127.0.0.1:%d" % http
                wait_up(api, 2)
                return run(api, spec, [p.pid for p in srv.procs])
            finally:
                srv.stop()

        for rows in sizes:
            results = {}
            for mode in modes:
                if mode == "dense" and rows > a.dense_max_rows:
                    continue
                results[mode] = run_alone(job(rows, a.steps, mode, a.partitions, a.optimizer))
            for kind, r in results.items():
                figure("embedding_%d_%s_step" % (rows, kind), r["step_s"] * 1e3, "ms")
                figure("embedding_%d_%s_loopback_bytes_per_step" % (rows, kind), r["lo_bytes"], "bytes")
                figure("embedding_%d_%s_allreduce_bytes_per_step" % (rows, kind), r["allreduce_bytes"],
                       "bytes")
                for t, b in enumerate(r["rss"]):
                    figure("embedding_%d_%s_task%d_rss" % (rows, kind, t), b / 2**20, "MiB")
            if "shared" in results and "rows" in results:
                figure("embedding_%d_shared_vs_replicated_step" % rows,
                       results["rows"]["step_s"] / results["shared"]["step_s"], "x faster")
                figure("embedding_%d_shared_vs_replicated_task1_rss" % rows,
                       results["shared"]["rss"][1] / max(results["rows"]["rss"][1], 1), "x")
            if "dense" in results and "rows" in results:
                figure("embedding_%d_rows_vs_dense_step" % rows,
                       results["dense"]["step_s"] / results["rows"]["step_s"], "x faster")
                figure("embedding_%d_rows_vs_dense_bytes" % rows,
                       results["dense"]["lo_bytes"] / max(results["rows"]["lo_bytes"], 1), "x fewer")


if __name__ == "__main__":
    main()
