#!/usr/bin/env python3
"""Backup replicas against a real straggler, as in the paper's
backup-worker experiment.

A 3-task cluster on loopback (`flowstate serve` as task 0 and master, two
`flowstate worker`s as tasks 1 and 2, each process with one intra-op and
one inter-op thread), the Fashion-MNIST MLP or CNN with "replicas": 3.
Task 2 is slowed from outside the process: SIGSTOP and SIGCONT at a fixed
duty cycle (by default stopped 50 ms of every 100 ms: about half speed);
no job field is involved. Measured in one run, interleaved per repetition:

  A. no slowdown, "backup_replicas": 0   (the reference)
  B. task 2 slowed, "backup_replicas": 0 (every step waits for it)
  C. task 2 slowed, "backup_replicas": 1 (the first two go on)

For each: examples/s over the steps after the warm-up (rows read, the
dropped replica's included, as the job counts them) and the p50/p99 step
time (from the job's step counter polled every 5 ms: a step's time is the
wait since the previous step, spread evenly over the steps seen at once),
and for C the steps task 2's replica was dropped from
(flowstate_replica_dropped_steps_total). Then

  D. "backup_replicas": 1 and task 2 stopped once for 2 s a third of the
     way through, unslowed before and slowed before (--pause-reps runs of
     each): every run must succeed; the median longest time without a step
     between the warm-up and the job's last step (which waits for a late
     replica to end its last chunk), and in how many runs it exceeded 1 s
     (a stop that caught task 2 among a step's contributors held that step
     until it came back, before steps could be given up).

Prints one JSON line per figure ({"name", "value", "unit"}).

    bench/backup_replicas_bench.py --flowstate build/flowstate [--model mlp|cnn]
        [--reps 1] [--steps 300] [--batch 64] [--stop-ms 50] [--period-ms 100] [--pause-reps 3]
"""

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import DutyCycle, figure, free_ports, metric, request  # noqa: E402
from replicas_bench import DATA_ROOT, Server, example_job, wait_up  # noqa: E402

WARMUP = 20


def run_job(api, job, seconds=900, during=None):
    """Submits `job` and polls its step; `during(step)` is called at each
    poll. Returns the per-step times after the warm-up, the examples/s over
    them, the job's final state, and the metrics text at the end."""
    code, j = request(api + "/v1/jobs", "POST", job)
    if code != 201:
        sys.exit("job refused: %s" % j)
    jid = j["job_id"]
    batch = job["input"]["batch_size"] * job["replicas"]
    samples = []  # (time, step)
    deadline = time.monotonic() + seconds
    info = {}
    while time.monotonic() < deadline:
        info = request(api + "/v1/jobs/" + jid)[1]
        samples.append((time.monotonic(), info["step"]))
        if during is not None:
            during(info["step"])
        if info["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            break
        time.sleep(0.005)
    else:
        sys.exit("job %s did not finish within %d s" % (jid, seconds))
    steps = []
    last_t, last_s = None, None
    for t, s in samples:
        if s < WARMUP:
            continue
        if last_t is not None and s > last_s:
            steps += [(t - last_t) / (s - last_s)] * (s - last_s)
        if last_t is None or s > last_s:
            last_t, last_s = t, s
    # The longest time without a step, from the warm-up to the job's last
    # step (which waits for late replicas to end their last chunks, so
    # that every replica ends identical: not a stall of the run).
    longest = 0.0
    last = max(s for _, s in samples)
    prev_t, prev_s = None, None
    for t, s in samples:
        if prev_s is not None and s > prev_s and prev_s >= WARMUP and s < last:
            longest = max(longest, t - prev_t)
        if prev_s is None or s > prev_s:
            prev_t, prev_s = t, s
    text = request(api + "/metrics")[1]
    total = sum(steps)
    return {"state": info.get("state"), "error": info.get("error"), "steps": steps,
            "examples_per_s": batch * len(steps) / total if total else 0.0,
            "longest_gap": longest, "metrics": text, "job_id": jid}


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flowstate", required=True)
    ap.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--stop-ms", type=int, default=50)
    ap.add_argument("--period-ms", type=int, default=100)
    ap.add_argument("--pause-reps", type=int, default=3, help="runs of each 2 s stop (D); 0: none")
    a = ap.parse_args()
    flowstate = os.path.abspath(a.flowstate)
    if not os.path.exists(os.path.join(DATA_ROOT, "fashion-mnist")):
        sys.exit("needs the Fashion-MNIST files (Debian's dataset-fashion-mnist)")
    with tempfile.TemporaryDirectory(prefix="flowstate_backup_bench_") as tmp:
        srv = Server(tmp)
        try:
            http, g0, g1, g2 = free_ports(4)
            spec = json.dumps({"worker": ["127.0.0.1:%d" % g for g in (g0, g1, g2)]})
            one = ["--set", "devices.intra_op_threads=1", "--set", "jobs.inter_op_threads=1"]
            srv.start([flowstate, "serve", "--http", "127.0.0.1:%d" % http, "--grpc",
                       "127.0.0.1:%d" % g0, "--data-dir", os.path.join(tmp, "d0"),
                       "--data-root", DATA_ROOT, "--cluster", spec, "--task", "worker:0"] + one)
            for i, g in ((1, g1), (2, g2)):
                srv.start([flowstate, "worker", "--grpc", "127.0.0.1:%d" % g, "--cluster", spec,
                           "--task", "worker:%d" % i] + one)
            api = "http://127.0.0.1:%d" % http
            wait_up(api, 3)
            straggler = srv.procs[2].pid

            def job(backup):
                j = example_job(a.model, a.batch, a.steps, 3)
                j["backup_replicas"] = backup
                return j

            runs = {"A": [], "B": [], "C": []}
            for _ in range(a.reps):
                runs["A"].append(run_job(api, job(0)))
                with DutyCycle(straggler, a.stop_ms, a.period_ms):
                    runs["B"].append(run_job(api, job(0)))
                with DutyCycle(straggler, a.stop_ms, a.period_ms):
                    runs["C"].append(run_job(api, job(1)))
            pauses = {"unslowed": [], "slowed": []}
            for _ in range(a.pause_reps):
                # D: task 2 stops for 2 s once the job is a third through:
                # at full speed before (it may be among the step's
                # contributors then), and slowed before (it is behind).
                stopped = {}

                def stop_once(step):
                    now = time.monotonic()
                    if "at" not in stopped and step >= a.steps // 3:
                        stopped["at"] = now
                        os.kill(straggler, signal.SIGSTOP)
                    elif "at" in stopped and "resumed" not in stopped and now - stopped["at"] >= 2.0:
                        stopped["resumed"] = now
                        os.kill(straggler, signal.SIGCONT)
                try:
                    pauses["unslowed"].append(run_job(api, job(1), during=stop_once))
                finally:
                    os.kill(straggler, signal.SIGCONT)
                with DutyCycle(straggler, a.stop_ms, a.period_ms) as d:
                    held = {}

                    def hold_once(step):
                        if "done" not in held and step >= a.steps // 3:
                            held["done"] = True
                            d.hold(2.0)
                    pauses["slowed"].append(run_job(api, job(1), during=hold_once))
        finally:
            srv.stop()
    for k, rs in runs.items():
        for r in rs:
            if r["state"] != "SUCCEEDED":
                sys.exit("run %s: %s %s" % (k, r["state"], r["error"]))
    med = lambda k, f: statistics.median(f(r) for r in runs[k])  # noqa: E731
    name = {"A": "unslowed_backup0", "B": "slowed_backup0", "C": "slowed_backup1"}
    eps = {}
    for k in "ABC":
        eps[k] = med(k, lambda r: r["examples_per_s"])
        figure("%s_%s_examples_per_second" % (a.model, name[k]), eps[k], "examples/s")
        figure("%s_%s_step_p50" % (a.model, name[k]), med(k, lambda r: pct(r["steps"], 0.5)) * 1e3, "ms")
        figure("%s_%s_step_p99" % (a.model, name[k]), med(k, lambda r: pct(r["steps"], 0.99)) * 1e3, "ms")
    figure("%s_slowed_backup0_vs_unslowed" % a.model, eps["B"] / eps["A"], "x")
    figure("%s_slowed_backup1_vs_unslowed" % a.model, eps["C"] / eps["A"], "x")
    for r in runs["C"]:
        for i in range(3):
            figure("%s_slowed_backup1_replica%d_dropped_steps" % (a.model, i),
                   metric(r["metrics"], "flowstate_replica_dropped_steps_total",
                          {"job_id": r["job_id"], "replica": str(i)}), "steps")
    for kind, rs in pauses.items():
        if not rs:
            continue
        for r in rs:
            if r["state"] != "SUCCEEDED":
                sys.exit("pause run (%s): %s %s" % (kind, r["state"], r["error"]))
        gaps = [r["longest_gap"] for r in rs]
        figure("%s_pause_2s_%s_longest_gap_median" % (a.model, kind), statistics.median(gaps) * 1e3, "ms")
        figure("%s_pause_2s_%s_runs_stalled_over_1s" % (a.model, kind), sum(g > 1.0 for g in gaps),
               "of %d" % len(gaps))
        figure("%s_pause_2s_%s_examples_per_second" % (a.model, kind),
               statistics.median(r["examples_per_s"] for r in rs), "examples/s")

if __name__ == "__main__":
    main()
