#!/usr/bin/env python3
"""A job's data-parallel replicas on the tasks of a cluster, as users run one
(the built binary: `flowstate serve` as task 0 and the master, `flowstate
worker` as task 1, each its own process on loopback):

- a job with "replicas": 2 and no "devices" is placed one replica per
  task (the job view's "placement" says so) and trains to the end: replica
  1 runs on task 1 and reads its examples under task 1's own data root,
  the two meet in task 0's collective store and all-reduce with Gloo;
- it ends with the loss of the same job's 2 replicas in task 0 alone
  (within float tolerance: the same global batches, the same average).

Usage: tests/integration/cluster_replicas.py --flowstate build/flowstate
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_failover import expect, free_ports, print_logs, request, stop_processes, FAILURES  # noqa: E402

GRAPH = {"nodes": [
    {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1, 2]}},
    {"name": "y", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1]}},
    {"name": "w", "op": "Variable",
     "attrs": {"dtype": "float32", "shape": [2, 1], "init": "glorot_uniform"}},
    {"name": "p", "op": "MatMul", "inputs": ["x", "w"]},
    {"name": "b", "op": "Variable", "attrs": {"dtype": "float32", "shape": [1], "init": "zeros"}},
    {"name": "pb", "op": "BiasAdd", "inputs": ["p", "b"]},
    {"name": "flat", "op": "Const", "attrs": {"dtype": "int32", "value": [-1]}},
    {"name": "pred", "op": "Reshape", "inputs": ["pb", "flat"]},
    {"name": "sq", "op": "SquaredDifference", "inputs": ["pred", "y"]},
    {"name": "axes", "op": "Const", "attrs": {"dtype": "int32", "value": []}},
    {"name": "loss", "op": "Mean", "inputs": ["sq", "axes"]}]}


def job(devices):
    j = {"graph": GRAPH, "loss": "loss", "optimizer": {"type": "adam", "learning_rate": 0.05},
         "input": {"format": "csv", "files": {"x": "points.csv", "y": "points.csv"},
                   "columns": {"x": ["a", "b"], "y": ["target"]}, "batch_size": 8, "epochs": 3},
         "replicas": 2, "seed": 5}
    if devices:
        j["devices"] = devices
    return j


def wait_done(api, jid, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        code, j = request("GET", api + "/v1/jobs/" + jid)
        if j.get("state") in ("SUCCEEDED", "FAILED", "CANCELLED"):
            return j
        time.sleep(0.1)
    return {"state": "TIMEOUT", "error": "did not end within %d s" % seconds}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flowstate", required=True)
    args = ap.parse_args()
    flowstate = os.path.abspath(args.flowstate)
    with tempfile.TemporaryDirectory(prefix="flowstate_replicas_") as tmp:
        os.makedirs(os.path.join(tmp, "dr"))
        rng = random.Random(7)
        with open(os.path.join(tmp, "dr", "points.csv"), "w") as f:
            f.write("a,b,target\n")
            for _ in range(100):  # 13 batches an epoch: the last step has one
                a, b = rng.uniform(-1, 1), rng.uniform(-1, 1)
                f.write("%f,%f,%f\n" % (a, b, 2 * a - 3 * b + 0.5))
        http, g0, g1 = free_ports(3)
        spec = json.dumps({"worker": ["127.0.0.1:%d" % g0, "127.0.0.1:%d" % g1]})
        api = "http://127.0.0.1:%d" % http
        procs = []
        try:
            for i, g in enumerate([g0, g1]):
                log = open(os.path.join(tmp, "task-%d.log" % i), "ab")
                if i == 0:
                    cmd = [flowstate, "serve", "--http", "127.0.0.1:%d" % http,
                           "--data-dir", os.path.join(tmp, "data"),
                           "--data-root", os.path.join(tmp, "dr")]
                else:
                    # Its own copy of the data, under its own data root.
                    os.makedirs(os.path.join(tmp, "dr1"))
                    shutil.copy(os.path.join(tmp, "dr", "points.csv"), os.path.join(tmp, "dr1"))
                    cmd = [flowstate, "worker", "--data-root", os.path.join(tmp, "dr1")]
                cmd += ["--grpc", "127.0.0.1:%d" % g, "--cluster", spec, "--task", "worker:%d" % i]
                procs.append(subprocess.Popen(cmd, stdout=log, stderr=log))
            up = False
            deadline = time.monotonic() + 30
            while not up and time.monotonic() < deadline:
                try:
                    tasks = request("GET", api + "/v1/cluster", timeout=5)[1]["tasks"]
                    up = len(tasks) == 2 and all(t["state"] == "UP" for t in tasks)
                except (OSError, ValueError, KeyError):
                    pass
                time.sleep(0.1)
            expect(up, "both tasks are UP within 30 s")
            code, across = request("POST", api + "/v1/jobs", job(None))
            expect(code == 201, "the job with 2 replicas and no devices is accepted (%d %s)" %
                   (code, json.dumps(across)[:200]))
            expect([p.get("device") for p in across.get("placement", [])] ==
                   ["/job:worker/task:0", "/job:worker/task:1"],
                   "it is placed one replica per task (%s)" % across.get("placement"))
            a = wait_done(api, across.get("job_id", ""), 60)
            expect(a["state"] == "SUCCEEDED", "it trains to the end (%s %s)" %
                   (a["state"], a.get("error")))
            code, local = request("POST", api + "/v1/jobs", job(
                ["/job:worker/replica:0/task:0/device:CPU:0",
                 "/job:worker/replica:0/task:0/device:CPU:0"]))
            expect(code == 201, "the same job with both replicas on task 0 is accepted")
            b = wait_done(api, local.get("job_id", ""), 60)
            expect(b["state"] == "SUCCEEDED", "it trains to the end too")
            expect(a.get("step") == b.get("step") == 21, "both ran 21 steps (3 epochs of 7)")
            la, lb = a.get("loss", 0), b.get("loss", 1)
            expect(abs(la - lb) <= 1e-4 * (1 + abs(lb)),
                   "the final losses agree (%.7f across tasks, %.7f in one)" % (la, lb))
        finally:
            stop_processes(procs)
            if FAILURES:
                print_logs(tmp, 2)
    print("%d failure(s)" % len(FAILURES))
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
