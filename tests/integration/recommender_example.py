#!/usr/bin/python3
"""The recommender example as a user runs it: examples/data/make_clicks.py
writes a small click dataset into a temporary data root (same seed twice:
the same bytes), and `flowstate train examples/jobs/recommender.json`, cut
to fewer epochs, learns the planted user/item groups: test accuracy well
above chance (0.5) and the majority class, within reach of the Bayes rate
the generator prints. Then the same job as 2 replicas on a cluster of two
processes on loopback (`flowstate serve` as task 0, `flowstate worker` as
task 1, each with its own copy of the data under its own data root),
submitted with POST /v1/jobs: placed one replica per task, it trains to
the end and reaches the same bar. The cluster jobs and a second in-process
run have their tables partitioned ("partitions": 2 on the items, 3 by
"div" on the users); the second cluster job shares them between the tasks
("partitioned_tables": "shared": each part on one task).

  tests/integration/recommender_example.py --flowstate build/flowstate --source .
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_failover import free_ports, print_logs, request, stop_processes  # noqa: E402


def train_on_cluster(flowstate, root, job, failures):
    """Runs `job` with 2 replicas on a serve + worker cluster; appends failures."""
    http, g0, g1 = free_ports(3)
    spec = json.dumps({"worker": ["127.0.0.1:%d" % g0, "127.0.0.1:%d" % g1]})
    api = "http://127.0.0.1:%d" % http
    shutil.copytree(os.path.join(root, "clicks"), os.path.join(root, "dr1", "clicks"))
    procs = []
    try:
        for i, g in enumerate([g0, g1]):
            log = open(os.path.join(root, "task-%d.log" % i), "ab")
            if i == 0:
                cmd = [flowstate, "serve", "--http", "127.0.0.1:%d" % http,
                       "--data-dir", os.path.join(root, "data"), "--data-root", root]
            else:
                cmd = [flowstate, "worker", "--data-root", os.path.join(root, "dr1")]
            cmd += ["--grpc", "127.0.0.1:%d" % g, "--cluster", spec, "--task", "worker:%d" % i]
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=log))
        deadline, up = time.monotonic() + 30, False
        while not up and time.monotonic() < deadline:
            try:
                tasks = request("GET", api + "/v1/cluster", timeout=5)[1]["tasks"]
                up = len(tasks) == 2 and all(t["state"] == "UP" for t in tasks)
            except (OSError, ValueError, KeyError):
                time.sleep(0.1)
        if not up:
            failures.append("the two tasks were not UP within 30 s")
            return
        # No "devices": the replicas go one per task. The tables replicated
        # (each task holds them whole), then shared (each part on one task).
        for tables in ("replicated", "shared"):
            spec = {k: v for k, v in job.items() if k != "devices"}
            spec["replicas"] = 2
            spec["partitioned_tables"] = tables
            code, sub = request("POST", api + "/v1/jobs", spec)
            if code != 201:
                failures.append("POST /v1/jobs with 2 replicas, %s tables: %d %s"
                                % (tables, code, json.dumps(sub)[:300]))
                return
            placed = [p.get("device") for p in sub.get("placement", [])]
            if placed != ["/job:worker/task:0", "/job:worker/task:1"]:
                failures.append("the replicas are not one per task: %s" % placed)
            deadline, j = time.monotonic() + 180, {}
            while time.monotonic() < deadline:
                j = request("GET", api + "/v1/jobs/" + sub.get("job_id", ""))[1]
                if j.get("state") in ("SUCCEEDED", "FAILED", "CANCELLED"):
                    break
                time.sleep(0.2)
            acc = j.get("metrics", {}).get("accuracy")
            print("2 replicas on 2 tasks, %s tables: %s, test accuracy %s"
                  % (tables, j.get("state"), acc))
            if j.get("state") != "SUCCEEDED":
                failures.append("the cluster job (%s tables) ended %s: %s"
                                % (tables, j.get("state"), j.get("error")))
            elif acc is None or acc < 0.75:
                failures.append("cluster test accuracy %s (%s tables), expected >= 0.75"
                                % (acc, tables))
    finally:
        stop_processes(procs)
        if failures:
            print_logs(root, 2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flowstate", required=True)
    ap.add_argument("--source", required=True)
    a = ap.parse_args()
    make = os.path.join(a.source, "examples", "data", "make_clicks.py")
    small = ["--users", "500", "--items", "100", "--train", "30000", "--test", "4000"]
    failures = []

    with tempfile.TemporaryDirectory() as root:
        out = os.path.join(root, "clicks")
        p = subprocess.run([sys.executable, make, out] + small, capture_output=True, text=True,
                           check=True)
        print(p.stdout, end="")
        m = re.search(r"Bayes rate[^:]*: ([0-9.]+)", p.stdout)
        bayes = float(m.group(1)) if m else 0.0
        if not 0.8 < bayes < 0.95:
            failures.append("make_clicks.py printed no plausible Bayes rate")
        again = os.path.join(root, "again")
        subprocess.run([sys.executable, make, again] + small, capture_output=True, check=True)
        for name in ("train.csv", "test.csv"):
            with open(os.path.join(out, name), "rb") as f1, open(os.path.join(again, name), "rb") as f2:
                if f1.read() != f2.read():
                    failures.append(name + " differs between two runs with the same seed")

        with open(os.path.join(a.source, "examples", "jobs", "recommender.json")) as f:
            job = json.load(f)
        job["input"]["epochs"] = 2
        job_path = os.path.join(root, "recommender.json")
        with open(job_path, "w") as f:
            json.dump(job, f)
        metrics = os.path.join(root, "metrics.json")
        p = subprocess.run([a.flowstate, "train", job_path, "--data-root", root,
                            "--metrics-out", metrics, "--threads", "2"],
                           capture_output=True, text=True, timeout=240)
        if p.returncode != 0:
            print(p.stdout[-4000:], p.stderr[-4000:])
            failures.append("flowstate train exited %d" % p.returncode)
        else:
            with open(metrics) as f:
                m = json.load(f)
            acc = m.get("accuracy")
            print("test accuracy %.4f (Bayes rate %.4f)" % (acc or 0.0, bayes))
            if acc is None or acc < 0.75:
                failures.append("test accuracy %s, expected >= 0.75" % acc)

        # The same job with its tables partitioned (item: 2 parts by mod,
        # user: 3 contiguous ranges) learns as well, in-process and as 2
        # replicas on the cluster (POST /v1/jobs).
        for node in job["graph"]["nodes"]:
            if node["name"] == "item_emb/table":
                node["attrs"]["partitions"] = 2
            if node["name"] == "user_emb/table":
                node["attrs"].update({"partitions": 3, "partition_strategy": "div"})
        with open(job_path, "w") as f:
            json.dump(job, f)
        p = subprocess.run([a.flowstate, "train", job_path, "--data-root", root,
                            "--metrics-out", metrics, "--threads", "2"],
                           capture_output=True, text=True, timeout=240)
        if p.returncode != 0:
            print(p.stdout[-4000:], p.stderr[-4000:])
            failures.append("flowstate train of the partitioned job exited %d" % p.returncode)
        else:
            with open(metrics) as f:
                acc = json.load(f).get("accuracy")
            print("partitioned tables: test accuracy %.4f" % (acc or 0.0))
            if acc is None or acc < 0.75:
                failures.append("partitioned tables: test accuracy %s, expected >= 0.75" % acc)

        train_on_cluster(a.flowstate, root, job, failures)

    for f in failures:
        print("FAIL " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
