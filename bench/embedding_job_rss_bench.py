#!/usr/bin/env python3
"""Peak RSS of a real embedding job on the server, against the table and
its optimizer slots.

Starts `flowstate serve` (one task, its embedded defaults, a data root of
its own), submits the embedding model of bench/sparse_replicas_bench.py with
one replica -- a table of R x 64 float32 (default R = 10^7: 2.4 GiB), 512
ids a step, lazy Adam (two slots as large as the table) -- runs --steps
steps, and reads the server's peak RSS (VmHWM in /proc/PID/status) at the
end -- the job's final checkpoint included -- and the largest RSS sampled
while the steps ran. Prints them against the three tensors (table, m, v),
the RSS of the idle server, and the step time.

Prints one JSON line per figure ({"name", "value", "unit"}).

    bench/embedding_job_rss_bench.py --flowstate build/flowstate [--rows 10000000] [--steps 50]
"""

import argparse
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import figure, free_ports, request  # noqa: E402
from replicas_bench import Server, wait_up  # noqa: E402
from sparse_replicas_bench import BATCH, DIM, job  # noqa: E402


def vm(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flowstate", required=True)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--steps", type=int, default=50)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="flowstate_rss_bench_") as tmp:
        data = os.path.join(tmp, "data")
        os.makedirs(data)
        rng = random.Random(1)
        with open(os.path.join(data, "ids-%d.csv" % a.rows), "w") as f:
            f.write("id,target\n")
            for _ in range(BATCH * 40):
                i = rng.randrange(a.rows)
                f.write("%d,%d\n" % (i, i % 3 - 1))
        srv = Server(tmp)
        try:
            (http,) = free_ports(1)
            srv.start([os.path.abspath(a.flowstate), "serve", "--http", "127.0.0.1:%d" % http,
                       "--grpc", "127.0.0.1:0", "--data-dir", os.path.join(tmp, "d"),
                       "--data-root", data,
                       # A 10^7 x 64 table is 2.4 GiB: over the default cap on one tensor.
                       "--set", "limits.max_shape_bytes=%d" % (1 << 33)])
            api = "http://127.0.0.1:%d" % http
            wait_up(api, 0)
            pid = srv.procs[0].pid
            idle = vm(pid, "VmRSS")
            spec = job(a.rows, a.steps, "rows", 1)
            spec["replicas"] = 1
            spec.pop("sparse_as_dense")
            spec["checkpoint"] = {"every_steps": 0}
            code, j = request(api + "/v1/jobs", "POST", spec)
            if code != 201:
                sys.exit("job refused: %s" % j)
            jid = j["job_id"]
            started = finished = None
            first_step = None
            training_peak = 0  # sampled VmRSS while the steps run
            last_step = None
            deadline = time.monotonic() + 1800
            while time.monotonic() < deadline:
                info = request(api + "/v1/jobs/" + jid)[1]
                if started is None and info["state"] == "RUNNING":
                    started = time.monotonic()
                if first_step is None and info["step"] >= 1:
                    first_step = (time.monotonic(), info["step"])
                if info["state"] == "RUNNING" and 1 <= info["step"] < a.steps:
                    training_peak = max(training_peak, vm(pid, "VmRSS"))
                if last_step is None and info["step"] >= a.steps:
                    last_step = (time.monotonic(), info["step"])  # before the final checkpoint
                if info["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
                    if info["state"] != "SUCCEEDED":
                        sys.exit("job %s: %s %s" % (jid, info["state"], info.get("error")))
                    finished = (time.monotonic(), info["step"])
                    break
                time.sleep(0.05)
            else:
                sys.exit("job %s did not finish" % jid)
            peak = vm(pid, "VmHWM")
        finally:
            srv.stop()
    tensors = 3 * a.rows * DIM * 4
    figure("embedding_job_%d_peak_rss" % a.rows, peak / 2**20, "MiB")
    figure("embedding_job_%d_rss_while_training_max_sampled" % a.rows, training_peak / 2**20, "MiB")
    figure("embedding_job_%d_table_and_slots" % a.rows, tensors / 2**20, "MiB")
    figure("embedding_job_%d_peak_rss_vs_tensors" % a.rows, peak / tensors, "x")
    figure("embedding_job_%d_idle_server_rss" % a.rows, idle / 2**20, "MiB")
    if first_step is not None and last_step is not None and last_step[1] > first_step[1]:
        figure("embedding_job_%d_step" % a.rows,
               (last_step[0] - first_step[0]) / (last_step[1] - first_step[1]) * 1e3, "ms")
    figure("embedding_job_%d_final_checkpoint_and_end" % a.rows, finished[0] - last_step[0], "s")


if __name__ == "__main__":
    main()
