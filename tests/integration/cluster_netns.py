#!/usr/bin/python3
"""Two hosts: a cluster whose tasks have distinct addresses, each task in
its own network namespace (`ip netns`), joined by a veth pair —
10.213.0.1 (task 0, `flowstate serve`, the master) and 10.213.0.2 (task 1,
`flowstate worker`). A session created on task 0 runs a step whose MatMul
is placed on task 1, across the two "hosts"; GET /v1/cluster on task 0
reports both UP at their own addresses; a job with 2 replicas (one per
host, each reading its own copy of the data) trains to the end, its
all-reduce transport listening on each task's own address (it listened on
loopback, which the other host cannot reach).

Needs root (CAP_NET_ADMIN) and `ip`: without them it says why and exits 77,
which ctest reports as skipped. It removes only the namespaces it made
(which removes their veth pair) and stops only the processes it started.

  tests/integration/cluster_netns.py --flowstate build/flowstate
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
from cluster_failover import stop_processes  # noqa: E402
from cluster_replicas import job as replica_job  # noqa: E402

SKIP = 77
FAILURES = []


def expect(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILURES.append(what)


def sh(*cmd, check=True):
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True, timeout=20)


def curl(ns, method, url, body=None):
    cmd = ["ip", "netns", "exec", ns, "curl", "-sS", "--max-time", "20", "-X", method,
           "-H", "Content-Type: application/json", "-w", "\n%{http_code}", url]
    if body is not None:
        cmd += ["--data", json.dumps(body)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    text, _, code = r.stdout.rpartition("\n")
    try:
        return int(code), json.loads(text or "{}")
    except ValueError:
        return 0, {"raw": r.stdout + r.stderr}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flowstate", required=True)
    args = ap.parse_args()
    flowstate = os.path.abspath(args.flowstate)
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("curl") is None:
        print("SKIP: needs root, `ip` and `curl` to make network namespaces")
        sys.exit(SKIP)
    tag = str(os.getpid())
    ns = ["fs_a_" + tag, "fs_b_" + tag]
    veth = ["fsa" + tag, "fsb" + tag]
    addr = ["10.213.0.1", "10.213.0.2"]
    made, procs = [], []
    with tempfile.TemporaryDirectory(prefix="flowstate_netns_") as tmp:
        try:
            try:
                for n in ns:
                    sh("ip", "netns", "add", n)
                    made.append(n)
                sh("ip", "link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
                for i in range(2):
                    sh("ip", "link", "set", veth[i], "netns", ns[i])
                    sh("ip", "-n", ns[i], "addr", "add", addr[i] + "/24", "dev", veth[i])
                    sh("ip", "-n", ns[i], "link", "set", veth[i], "up")
                    sh("ip", "-n", ns[i], "link", "set", "lo", "up")
            except (subprocess.CalledProcessError, OSError) as e:
                err = getattr(e, "stderr", "") or str(e)
                print("SKIP: network namespaces are not permitted here: " + err.strip())
                sys.exit(SKIP)
            http, grpc = 18080, 50051  # each namespace has its own ports
            spec = json.dumps({"worker": ["%s:%d" % (a, grpc) for a in addr]})
            rng = random.Random(7)
            rows = ["a,b,target"]
            for _ in range(100):
                a, b = rng.uniform(-1, 1), rng.uniform(-1, 1)
                rows.append("%f,%f,%f" % (a, b, 2 * a - 3 * b + 0.5))
            for i in range(2):  # each host's own copy of the data
                os.makedirs(os.path.join(tmp, "dr%d" % i))
                with open(os.path.join(tmp, "dr%d" % i, "points.csv"), "w") as f:
                    f.write("\n".join(rows) + "\n")
            for i in range(2):
                cmd = ["ip", "netns", "exec", ns[i], flowstate]
                if i == 0:
                    cmd += ["serve", "--http", "%s:%d" % (addr[0], http),
                            "--data-dir", os.path.join(tmp, "data")]
                else:
                    cmd += ["worker"]
                cmd += ["--data-root", os.path.join(tmp, "dr%d" % i)]
                cmd += ["--grpc", "%s:%d" % (addr[i], grpc), "--cluster", spec,
                        "--task", "worker:%d" % i]
                log = open(os.path.join(tmp, "task-%d.log" % i), "wb")
                procs.append(subprocess.Popen(cmd, stdout=log, stderr=log))
            api = "http://%s:%d" % (addr[0], http)
            deadline, tasks = time.monotonic() + 30, []
            while time.monotonic() < deadline:
                code, body = curl(ns[0], "GET", api + "/v1/cluster")
                tasks = body.get("tasks", []) if code == 200 else []
                if len(tasks) == 2 and all(t["state"] == "UP" for t in tasks):
                    break
                time.sleep(0.2)
            expect(len(tasks) == 2 and all(t["state"] == "UP" for t in tasks),
                   "both tasks UP within 30 s: %s" % [(t.get("address"), t.get("state")) for t in tasks])
            expect(sorted(t.get("address") for t in tasks) == ["%s:%d" % (a, grpc) for a in addr],
                   "at their own addresses")
            graph = {"nodes": [
                {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [2, 2]},
                 "device": "/job:worker/task:0"},
                {"name": "w", "op": "Const", "attrs": {"dtype": "float32", "value": [[1, 0], [0, 2]]},
                 "device": "/job:worker/task:1"},
                {"name": "xw", "op": "MatMul", "inputs": ["x", "w"], "device": "/job:worker/task:1"},
                {"name": "y", "op": "Identity", "inputs": ["xw"], "device": "/job:worker/task:0"}]}
            code, body = curl(ns[0], "POST", api + "/v1/sessions", {"graph": graph})
            expect(code in (200, 201), "a session over the two hosts is created (%d)" % code)
            if code in (200, 201):
                sid = body["session_id"]
                code, body = curl(ns[0], "POST", api + "/v1/sessions/%s/run" % sid,
                                  {"feeds": {"x": [[1.0, 2.0], [3.0, 4.0]]}, "fetches": ["y"],
                                   "encoding": "nested"})
                y = body.get("outputs", {}).get("y")
                expect(code == 200 and y == [[1, 4], [3, 8]],
                       "a step with its MatMul on the other host: y = %s (%d)" % (y, code))
            code, body = curl(ns[0], "POST", api + "/v1/jobs", replica_job(None))
            expect(code == 201 and [p.get("device") for p in body.get("placement", [])] ==
                   ["/job:worker/task:0", "/job:worker/task:1"],
                   "a job with 2 replicas is placed one per host (%d %s)" % (code, json.dumps(body)[:200]))
            jid, j = body.get("job_id", ""), {}
            deadline = time.monotonic() + 60
            while jid and time.monotonic() < deadline:
                j = curl(ns[0], "GET", api + "/v1/jobs/" + jid)[1]
                if j.get("state") in ("SUCCEEDED", "FAILED", "CANCELLED"):
                    break
                time.sleep(0.2)
            expect(j.get("state") == "SUCCEEDED" and j.get("step") == 21,
                   "it trains to the end across the two hosts (%s at step %s: %s)" %
                   (j.get("state"), j.get("step"), j.get("error")))
        finally:
            stop_processes(procs)
            for n in made:
                sh("ip", "netns", "del", n, check=False)
            if FAILURES:
                for i in range(2):
                    path = os.path.join(tmp, "task-%d.log" % i)
                    if os.path.exists(path):
                        print("--- task %d:\n%s" % (i, open(path, errors="replace").read()[-2000:]))
    print("%d failure(s)" % len(FAILURES))
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
