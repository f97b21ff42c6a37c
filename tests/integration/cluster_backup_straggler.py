#!/usr/bin/env python3
"""Backup replicas against a real straggler, as users run a
cluster: `flowstate serve` as task 0 and two `flowstate worker`s as tasks 1
and 2, each its own process on loopback. Task 2 is slowed from outside the
process, with SIGSTOP/SIGCONT at a fixed duty cycle (stopped 50 ms of every
100 ms); no job field is involved.

- The Fashion-MNIST MLP with "replicas": 3 and "backup_replicas": 1 and a
  replica check every 10 steps trains to the end: task 2's replica is
  dropped from most steps (flowstate_replica_dropped_steps_total), yet every
  replica check passes (the dropped replica applies the contributors'
  update, so the three stay identical) and the model learns.
- The same job with task 2 stopped for 2 s mid-run (while slowed) neither
  fails nor loses a replica.

No timing is asserted here (bench/backup_replicas_bench.py measures the
speed). Skipped (77) without the dataset. Usage:
  tests/integration/cluster_backup_straggler.py --flowstate build/flowstate
"""
import argparse
import json
import os
import signal
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The straggler's duty cycle is the benchmark's (bench/bench_util.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from bench_util import DutyCycle  # noqa: E402
from cluster_failover import expect, print_logs, request, start_cluster, stop_processes, FAILURES  # noqa: E402

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = "/usr/share/datasets"


def job(steps):
    with open(os.path.join(SOURCE, "examples", "jobs", "fashion_mlp.json")) as f:
        graph = json.load(f)["graph"]
    return {"graph": graph, "loss": "loss",
            "optimizer": {"type": "adam", "learning_rate": 0.001},
            "input": {"format": "idx",
                      "files": {"x": "fashion-mnist/train-images-idx3-ubyte.gz",
                                "y": "fashion-mnist/train-labels-idx1-ubyte.gz"},
                      "batch_size": 32, "epochs": 10},
            "eval": {"files": {"x": "fashion-mnist/t10k-images-idx3-ubyte.gz",
                               "y": "fashion-mnist/t10k-labels-idx1-ubyte.gz"},
                     "metrics": ["accuracy"], "max_examples": 2000, "batch_size": 1000},
            "max_steps": steps, "replicas": 3, "backup_replicas": 1,
            "check_replicas_every": 10, "seed": 5}


def run(api, steps, during=None, seconds=240):
    code, j = request("POST", api + "/v1/jobs", job(steps))
    expect(code == 201, "the job is accepted (%d %s)" % (code, json.dumps(j)[:300]))
    jid = j.get("job_id", "")
    deadline = time.monotonic() + seconds
    info = {}
    while time.monotonic() < deadline:
        info = request("GET", api + "/v1/jobs/" + jid)[1]
        if during is not None:
            during(info.get("step", 0))
        if info.get("state") in ("SUCCEEDED", "FAILED", "CANCELLED"):
            break
        time.sleep(0.02)
    metrics = urllib.request.urlopen(api + "/metrics", timeout=10).read().decode()
    restarts = [x for x in metrics.splitlines()
                if x.startswith('flowstate_job_restarts_total{job_id="%s"} ' % jid)]
    info["restarts"] = float(restarts[0].split()[-1]) if restarts else 0.0
    dropped = []
    for r in range(3):
        key = 'flowstate_replica_dropped_steps_total{job_id="%s",replica="%d"} ' % (jid, r)
        line = [x for x in metrics.splitlines() if x.startswith(key)]
        dropped.append(float(line[0].split()[-1]) if line else -1)
    return info, dropped


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flowstate", required=True)
    args = ap.parse_args()
    if not os.path.exists(os.path.join(DATA, "fashion-mnist", "train-images-idx3-ubyte.gz")):
        print("SKIP: dataset-fashion-mnist is not installed (scripts/install-deps installs it)")
        sys.exit(77)
    flowstate = os.path.abspath(args.flowstate)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="flowstate_backup_straggler_") as tmp:
        procs = []
        try:
            one = ["--set", "devices.intra_op_threads=1", "--set", "jobs.inter_op_threads=1"]
            api, procs = start_cluster(flowstate, tmp, 3,
                                       lambda i: one + (["--data-root", DATA] if i == 0 else []))
            straggler = procs[2].pid

            with DutyCycle(straggler, 50, 100):
                a, dropped = run(api, 200)
            expect(a.get("state") == "SUCCEEDED",
                   "with task 2 slowed the job succeeds, every replica check passing (%s %s)" %
                   (a.get("state"), a.get("error")))
            expect(dropped[2] >= 100,
                   "task 2's replica is dropped from most of the 200 steps (%s)" % dropped)
            expect(dropped[0] + dropped[1] < dropped[2],
                   "the others are dropped less often (%s)" % dropped)
            acc = a.get("metrics", {}).get("accuracy", 0)
            expect(acc >= 0.7, "the model learns: accuracy %.3f >= 0.7" % acc)

            with DutyCycle(straggler, 50, 100) as d:
                held = {}

                def hold(step):
                    if "at" not in held and step >= 60:
                        held["at"] = step
                        d.hold(2.0)
                b, dropped = run(api, 200, during=hold)
            expect(b.get("state") == "SUCCEEDED" and b.get("restarts") == 0,
                   "stopped for 2 s mid-run, it neither fails nor restarts (%s %s, %s restarts)" %
                   (b.get("state"), b.get("error"), b.get("restarts")))
            print("slowed: dropped steps per replica %s, accuracy %.3f; stopped 2 s at step %s: %s"
                  % (dropped, acc, held.get("at"), b.get("state")))
        finally:
            for p in procs:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                except OSError:
                    pass
            stop_processes(procs)
            if FAILURES:
                print_logs(tmp, 3)
    print("%.1f s, %d failure(s)" % (time.monotonic() - t0, len(FAILURES)))
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
