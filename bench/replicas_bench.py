#!/usr/bin/env python3
"""The data-parallel step of the Fashion-MNIST MLP or CNN across processes.

Starts the real binaries on loopback and measures, interleaved in the same run:

  A. two replicas, each its own process with one thread (`flowstate serve`
     as task 0 and master, `flowstate worker` as task 1, each pinned to one
     core with taskset when there are two), batch B per replica;
  B. the reference: one replica in one process with two threads, batch 2B
     (the same global batch).

  C. when /usr/bin/python3 has PyTorch: the same model in PyTorch, two
     processes of one thread with DistributedDataParallel over Gloo, pinned
     as A, batch B each (bench/torch_reference.py --ddp-world 2).

For each: the job's step time (flowstate_job_step_duration_seconds, steps
after the warm-up only), and for A replica 0's all-reduce wait
(flowstate_replica_allreduce_wait_seconds) as a share of its step
(flowstate_replica_step_seconds). From A's compute time per step (step
minus wait) and the gradient bytes it prints a model of scaling efficiency
up to 64 replicas on a 25 Gb/s network (ring all-reduce; assumptions
printed with it).

Prints one JSON line per figure ({"name", "value", "unit"}).

    bench/replicas_bench.py --flowstate build/flowstate [--model mlp|cnn] [--reps 3]
        [--steps 200] [--batch 64] [--no-pin] [--no-torch]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import figure, free_ports, job_figures, metric, request  # noqa: E402,F401

DATA_ROOT = "/usr/share/datasets"
SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WARMUP = 20


# Float32 gradient bytes of the examples' variables.
GRADIENT_BYTES = {
    "mlp": 4 * (784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10),
    "cnn": 4 * (5 * 5 * 32 + 32 + 5 * 5 * 32 * 64 + 64 + 3136 * 1024 + 1024 + 1024 * 10 + 10),
}


def example_job(model, batch, steps, replicas, bucket_bytes=None):
    """An example job; its replicas placed by the server (one per task)."""
    with open(os.path.join(SOURCE, "examples/jobs/fashion_%s.json" % model)) as f:
        job = json.load(f)
    job.pop("eval", None)
    job.pop("checkpoint", None)
    job.pop("devices", None)
    job["input"]["batch_size"] = batch
    job["max_steps"] = steps
    job["input"]["epochs"] = 100
    job["replicas"] = replicas
    if bucket_bytes:
        job["bucket_bytes"] = bucket_bytes
    job["optimizer"].pop("schedule", None)
    return job


class Server:
    """flowstate processes started and stopped by PID."""

    def __init__(self, tmp):
        self.tmp, self.procs = tmp, []

    def start(self, args, cpu=None):
        log = open(os.path.join(self.tmp, "p%d.log" % len(self.procs)), "ab")
        if cpu is not None and shutil.which("taskset"):
            args = ["taskset", "-c", str(cpu)] + args
        self.procs.append(subprocess.Popen(args, stdout=log, stderr=log))

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def wait_up(api, tasks, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if tasks == 0:
                request(api + "/readyz")
                return
            t = request(api + "/v1/cluster")[1]["tasks"]
            if len(t) == tasks and all(x["state"] == "UP" for x in t):
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    sys.exit("the server at %s did not come up within %d s" % (api, seconds))


def run_job(api, job, replicas, seconds=600):
    """Submits `job`, waits for it; the per-step figures after the warm-up."""
    code, j = request(api + "/v1/jobs", "POST", job)
    if code != 201:
        sys.exit("job refused: %s" % j)
    jid = j["job_id"]
    first = None
    deadline = time.monotonic() + seconds
    def snapshot():
        return job_figures(request(api + "/metrics")[1], jid)

    # The job's state is polled (a small response); the metrics are read
    # only twice, so that the harness takes little of the master's core.
    while time.monotonic() < deadline:
        info = request(api + "/v1/jobs/" + jid)[1]
        if first is None and info["step"] >= WARMUP and info["state"] == "RUNNING":
            first = snapshot()
        if info["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            if info["state"] != "SUCCEEDED":
                sys.exit("job %s: %s %s" % (jid, info["state"], info.get("error")))
            break
        time.sleep(0.05)
    else:
        sys.exit("job %s did not finish within %d s" % (jid, seconds))
    if first is None:
        sys.exit("job %s ended before its warm-up" % jid)
    snap = snapshot()
    d = {k: snap[k] - first[k] for k in snap}
    out = {"step": d["step_sum"] / max(d["step_n"], 1)}
    if replicas > 1:
        out["replica_step"] = d["rstep_sum"] / max(d["rstep_n"], 1)
        out["wait"] = d["wait_sum"] / max(d["rstep_n"], 1)
    return out


def torch_ddp(model, batch, steps, pin):
    """Examples/s of PyTorch DDP with 2 pinned processes of one thread."""
    port = free_ports(1)[0]
    procs = []
    for rank in (0, 1):
        args = ["/usr/bin/python3", os.path.join(SOURCE, "bench/torch_reference.py"), "--model", model,
                "--threads", "1", "--steps", str(steps), "--batch-size", str(batch),
                "--warmup", str(WARMUP), "--ddp-world", "2", "--ddp-rank", str(rank),
                "--ddp-init", "tcp://127.0.0.1:%d" % port]
        if pin and shutil.which("taskset"):
            args = ["taskset", "-c", str(rank)] + args
        procs.append(subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    try:
        out, err = procs[0].communicate(timeout=900)
        procs[1].wait(timeout=60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if procs[0].returncode != 0:
        sys.exit("torch DDP failed: %s" % err.decode()[-2000:])
    return json.loads(out.decode().strip().splitlines()[-1])["examples_per_sec"]


def has_torch():
    return subprocess.run(["/usr/bin/python3", "-c", "import torch"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def model(compute_s, grad_bytes, link_gbps, alpha_s, n, overlap=False, bucket=25 * 2**20):
    """Ring all-reduce time and efficiency of n replicas. Without overlap the
    whole all-reduce follows the compute; with it, every bucket but the last
    is reduced while the backward pass (2/3 of the compute) goes on."""
    if n == 1:
        return 0.0, 1.0
    bw = link_gbps * 1e9 / 8 * 0.9  # bytes/s, 90% of the line rate
    t_ar = 2 * (n - 1) / n * grad_bytes / bw + 2 * (n - 1) * alpha_s
    exposed = t_ar
    if overlap:
        last = t_ar * min(1.0, bucket / grad_bytes)
        exposed = max(last, t_ar - 2 / 3 * compute_s)
    return t_ar, compute_s / (compute_s + exposed)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flowstate", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch DDP run")
    ap.add_argument("--no-pin", action="store_true", help="do not pin the two tasks to one core each")
    ap.add_argument("--bucket-bytes", type=int, default=0,
                    help="the 2-process job's bucket_bytes (default: the job's default)")
    a = ap.parse_args()
    flowstate = os.path.abspath(a.flowstate)
    if not os.path.exists(os.path.join(DATA_ROOT, "fashion-mnist")):
        sys.exit("needs the Fashion-MNIST files (Debian's dataset-fashion-mnist)")
    ncpu = 1 if a.no_pin else (os.cpu_count() or 1)
    with tempfile.TemporaryDirectory(prefix="flowstate_replicas_bench_") as tmp:
        srv = Server(tmp)
        try:
            http, g0, g1, http1 = free_ports(4)
            spec = json.dumps({"worker": ["127.0.0.1:%d" % g0, "127.0.0.1:%d" % g1]})
            one = ["--set", "devices.intra_op_threads=1", "--set", "jobs.inter_op_threads=1"]
            srv.start([flowstate, "serve", "--http", "127.0.0.1:%d" % http, "--grpc",
                       "127.0.0.1:%d" % g0, "--data-dir", os.path.join(tmp, "d0"),
                       "--cluster", spec, "--task", "worker:0"] + one, cpu=0 if ncpu >= 2 else None)
            srv.start([flowstate, "worker", "--grpc", "127.0.0.1:%d" % g1, "--cluster", spec,
                       "--task", "worker:1"] + one, cpu=1 if ncpu >= 2 else None)
            srv.start([flowstate, "serve", "--http", "127.0.0.1:%d" % http1, "--grpc",
                       "127.0.0.1:0", "--data-dir", os.path.join(tmp, "d1"),
                       "--set", "devices.intra_op_threads=2"])
            across, single = "http://127.0.0.1:%d" % http, "http://127.0.0.1:%d" % http1
            wait_up(across, 2)
            wait_up(single, 0)
            torch = not a.no_torch and has_torch()
            runs_a, runs_b, runs_c = [], [], []
            for _ in range(a.reps):
                runs_a.append(run_job(across, example_job(a.model, a.batch, a.steps, 2,
                                                          a.bucket_bytes), 2))
                runs_b.append(run_job(single, example_job(a.model, 2 * a.batch, a.steps, 1), 1))
                if torch:
                    runs_c.append(torch_ddp(a.model, a.batch, a.steps, ncpu >= 2))
        finally:
            srv.stop()
    med = lambda rs, k: statistics.median(r[k] for r in rs)  # noqa: E731
    step_a, step_b = med(runs_a, "step"), med(runs_b, "step")
    wait, rstep = med(runs_a, "wait"), med(runs_a, "replica_step")
    figure("n2_processes_step", step_a * 1e3, "ms")
    figure("one_process_two_threads_step", step_b * 1e3, "ms")
    figure("n2_vs_one_process_speed", step_b / step_a, "x")
    figure("n2_global_examples_per_second", 2 * a.batch / step_a, "examples/s")
    figure("one_process_examples_per_second", 2 * a.batch / step_b, "examples/s")
    figure("n2_allreduce_wait_share", wait / rstep if rstep else 0, "fraction")
    if runs_c:
        ddp = statistics.median(runs_c)
        figure("torch_ddp_n2_global_examples_per_second", ddp, "examples/s")
        figure("n2_vs_torch_ddp_speed", 2 * a.batch / step_a / ddp, "x")
    else:
        print(json.dumps({"torch_ddp": "skipped: no PyTorch for /usr/bin/python3 (scripts/install-deps --bench)"
                          if not a.no_torch else "skipped: --no-torch"}))
    # The scaling model.
    grad_bytes = GRADIENT_BYTES[a.model]
    compute = max(rstep - wait, 1e-6)
    print(json.dumps({"model": "ring all-reduce, 25 Gb/s at 90%, 10 us per message",
                      "gradient_bytes": grad_bytes, "compute_per_step_s": round(compute, 6)}))
    # Its buckets: the first at most 1 MiB (the gradients produced first),
    # the rest in the last one.
    for n in (2, 4, 8, 16, 32, 64):
        for overlap in (False, True):
            t_ar, eff = model(compute, grad_bytes, 25, 10e-6, n, overlap, grad_bytes - 2**20)
            figure("model_%s_b%d_%s_efficiency_n%d" % (a.model, a.batch, "overlap" if overlap
                                                        else "serial", n), eff, "fraction")
    # A ResNet-101-sized model (44.5 M parameters, 178 MB of float32
    # gradients) at 0.3 s of compute per step, for comparison with Horovod.
    for n in (8, 64):
        for overlap in (False, True):
            t_ar, eff = model(0.3, 178e6, 25, 10e-6, n, overlap)
            figure("model_resnet101_%s_efficiency_n%d" % ("overlap" if overlap else "serial", n),
                   eff, "fraction")


if __name__ == "__main__":
    main()
