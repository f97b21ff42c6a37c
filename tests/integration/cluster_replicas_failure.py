#!/usr/bin/env python3
"""A replica's task killed with SIGKILL mid-training, as users run a cluster: `flowstate serve` as task 0 and two
`flowstate worker`s as tasks 1 and 2, each its own process on loopback.

- The Fashion-MNIST MLP with "replicas": 3 on the three tasks and
  checkpoints trains to the end uninterrupted; its test accuracy is the
  reference.
- The same job again (same seed and config), with "min_replicas": 2: once
  it has written a checkpoint, task 2 is killed with SIGKILL. The job
  resumes from its last checkpoint with tasks 0 and 1 (a "resume" event in
  GET /v1/jobs/{id}/events?history=true names the step and the tasks),
  succeeds, and ends within 0.01 of the reference accuracy.
- /metrics counts the restart (flowstate_job_restarts_total).

The resumed job keeps the job's global batch (the two survivors train on
three batches a step), so it repeats the uninterrupted run up to float
rounding (2-rank instead of 3-rank sums); at a learning rate of 0.001 that
rounding does not grow into a different run (at 0.003 this 512-512 MLP
amplifies it to about 0.015 of accuracy after 250 steps).

Skipped (77) without the dataset. Usage:
  tests/integration/cluster_replicas_failure.py --flowstate build/flowstate
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
from cluster_failover import expect, print_logs, request, start_cluster, stop_processes, FAILURES  # noqa: E402

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = "/usr/share/datasets"
TASKS = ["/job:worker/replica:0/task:%d/device:CPU:0" % i for i in range(3)]


def job(min_replicas):
    with open(os.path.join(SOURCE, "examples", "jobs", "fashion_mlp.json")) as f:
        graph = json.load(f)["graph"]
    return {"graph": graph, "loss": "loss",
            "optimizer": {"type": "adam", "learning_rate": 0.001},
            "input": {"format": "idx",
                      "files": {"x": "fashion-mnist/train-images-idx3-ubyte.gz",
                                "y": "fashion-mnist/train-labels-idx1-ubyte.gz"},
                      "batch_size": 32, "epochs": 3, "max_examples": 9600},
            "eval": {"files": {"x": "fashion-mnist/t10k-images-idx3-ubyte.gz",
                               "y": "fashion-mnist/t10k-labels-idx1-ubyte.gz"},
                     "metrics": ["accuracy"], "max_examples": 3000, "batch_size": 1000,
                     "every_epochs": 3},
            "checkpoint": {"every_steps": 20, "keep": 2},
            "replicas": 3, "devices": TASKS, "min_replicas": min_replicas,
            "replica_wait_seconds": 30, "check_replicas_every": 20, "seed": 11}


def get(api, jid):
    return request("GET", api + "/v1/jobs/" + jid)[1]


def checkpoint_step(j):
    return (j.get("checkpoint") or {}).get("step", -1)


def wait_for(api, jid, seconds, pred):
    deadline = time.monotonic() + seconds
    j = {}
    while time.monotonic() < deadline:
        j = get(api, jid)
        if pred(j) or j.get("state") in ("SUCCEEDED", "FAILED", "CANCELLED"):
            return j
        time.sleep(0.05)
    j = dict(j)
    j["state"] = "TIMEOUT after %d s (was %s)" % (seconds, j.get("state"))
    return j


def history(api, jid):
    """The job's notable events (a finished job's stream ends)."""
    url = api + "/v1/jobs/" + jid + "/events?history=true"
    events = []
    kind = ""
    with urllib.request.urlopen(url, timeout=20) as r:
        for raw in r:
            line = raw.decode().strip()
            if line.startswith("event:"):
                kind = line[6:].strip()
            elif line.startswith("data:"):
                try:
                    e = json.loads(line[5:])
                except ValueError:
                    continue
                e["kind"] = kind
                events.append(e)
    return events


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flowstate", required=True)
    args = ap.parse_args()
    if not os.path.exists(os.path.join(DATA, "fashion-mnist", "train-images-idx3-ubyte.gz")):
        print("SKIP: dataset-fashion-mnist is not installed (scripts/install-deps installs it)")
        sys.exit(77)
    flowstate = os.path.abspath(args.flowstate)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="flowstate_replica_kill_") as tmp:
        procs = []
        try:
            api, procs = start_cluster(flowstate, tmp, 3,
                                       lambda i: ["--data-root", DATA] if i == 0 else [])

            # The reference: uninterrupted.
            code, ref = request("POST", api + "/v1/jobs", job(3))
            expect(code == 201, "the job is accepted (%d %s)" % (code, json.dumps(ref)[:300]))
            a = wait_for(api, ref.get("job_id", ""), 90, lambda j: False)
            expect(a.get("state") == "SUCCEEDED",
                   "the uninterrupted run succeeds (%s %s)" % (a.get("state"), a.get("error")))
            acc_ref = a.get("metrics", {}).get("accuracy", 0)

            # The same job; task 2 killed once a checkpoint is written.
            code, killed = request("POST", api + "/v1/jobs", job(2))
            expect(code == 201, "the second job is accepted")
            jid = killed.get("job_id", "")
            j = wait_for(api, jid, 60, lambda j: checkpoint_step(j) >= 40)
            expect(j.get("state") == "RUNNING" and checkpoint_step(j) >= 40,
                   "it runs and writes a checkpoint at step 40 (%s, step %s)" %
                   (j.get("state"), j.get("step")))
            procs[2].send_signal(signal.SIGKILL)
            procs[2].wait(timeout=10)
            killed_at = time.monotonic()
            b = wait_for(api, jid, 90, lambda j: False)
            expect(b.get("state") == "SUCCEEDED",
                   "the job resumes and succeeds (%s %s)" % (b.get("state"), b.get("error")))
            acc = b.get("metrics", {}).get("accuracy", 0)
            expect(abs(acc - acc_ref) <= 0.01,
                   "its accuracy %.4f is within 0.01 of the uninterrupted run's %.4f" %
                   (acc, acc_ref))
            expect((b.get("resumed_from_step") or -1) >= 40,
                   "it resumed from a checkpoint (resumed_from_step %s)" % b.get("resumed_from_step"))
            resumes = [e.get("message", "") for e in history(api, jid) if e.get("kind") == "resume"]
            want = ("with 2 of 3 replicas, on /job:worker/task:0, /job:worker/task:1 "
                    "(lost: /job:worker/task:2")
            expect(any(m.startswith("resumed from the checkpoint at step") and want in m
                       for m in resumes),
                   "a resume event names the step and the tasks (%s)" % resumes)
            metrics = urllib.request.urlopen(api + "/metrics", timeout=10).read().decode()
            expect('flowstate_job_restarts_total{job_id="%s"} 1' % jid in metrics,
                   "flowstate_job_restarts_total counts the restart")
            print("uninterrupted accuracy %.4f, killed-and-resumed %.4f; resumed and finished "
                  "%.1f s after the kill; %s" % (acc_ref, acc, time.monotonic() - killed_at,
                                                 resumes))
        finally:
            stop_processes(procs)
            if FAILURES:
                print_logs(tmp, 3)
    print("%.1f s, %d failure(s)" % (time.monotonic() - t0, len(FAILURES)))
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
