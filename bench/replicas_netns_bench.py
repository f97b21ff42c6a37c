#!/usr/bin/python3
"""Three hosts on a shaped network: the data-parallel step of the
Fashion-MNIST MLP and CNN with 3 replicas, one per task, each task in its
own network namespace on a bridge whose links are limited with `tc` (a token
bucket on both ends of each host's veth, so each host sends and receives at
the rate), at each --rates value; for each model and rate, with overlap
(small buckets, reduced while the backward pass goes on) and without (one
bucket after the first 1 MiB: the all-reduce follows the backward pass).

From the measured figures it recomputes the scaling model to 64 replicas:
the compute per step is replica 0's step minus its all-reduce wait; the
all-reduce time at n = 3 without overlap gives the link's effective
bandwidth; the share of it hidden by overlap at n = 3 is assumed to stay
the same at every n. Assumptions are printed with it.

Needs root, `ip`, `tc` and the Fashion-MNIST files; exits 77 saying why
otherwise. Removes only the namespaces it made and stops only the
processes it started. The three tasks share this machine's cores (no
pinning: on 2 cores each gets about 2/3 of one), so the compute figures are
those of a shared machine; the network figures are the shaped links'.

Prints one JSON line per figure ({"name", "value", "unit"}).

    bench/replicas_netns_bench.py --flowstate build/flowstate [--rates 1gbit,10gbit]
        [--models mlp,cnn] [--steps 60]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import replicas_bench as rb  # noqa: E402

SKIP = 77
TASKS = 3
WARMUP = 10


def sh(*cmd, check=True):
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True, timeout=30)


class Net:
    """TASKS namespaces joined by a bridge in a namespace of its own."""

    def __init__(self):
        tag = str(os.getpid())
        self.br = "fsbr_" + tag
        self.ns = ["fsh%d_%s" % (i, tag) for i in range(TASKS)]
        self.addr = ["10.214.0.%d" % (i + 1) for i in range(TASKS)]
        self.made = []

    def make(self):
        for n in [self.br] + self.ns:
            sh("ip", "netns", "add", n)
            self.made.append(n)
        sh("ip", "-n", self.br, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.br, "link", "set", "br0", "up")
        for i, n in enumerate(self.ns):
            host, port = "h%d" % i, "p%d" % i
            sh("ip", "link", "add", host, "netns", n, "type", "veth", "peer", "name", port, "netns", self.br)
            sh("ip", "-n", n, "addr", "add", self.addr[i] + "/24", "dev", host)
            sh("ip", "-n", n, "link", "set", host, "up")
            sh("ip", "-n", n, "link", "set", "lo", "up")
            sh("ip", "-n", self.br, "link", "set", port, "master", "br0")
            sh("ip", "-n", self.br, "link", "set", port, "up")

    def shape(self, rate):
        """A token bucket of `rate` on both ends of every host's link."""
        for i, n in enumerate(self.ns):
            for ns, dev in ((n, "h%d" % i), (self.br, "p%d" % i)):
                sh("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf",
                   "rate", rate, "burst", "512kb", "latency", "100ms")

    def remove(self):
        for n in self.made:
            sh("ip", "netns", "del", n, check=False)


def curl(ns, url, body=None, raw=False):
    cmd = ["ip", "netns", "exec", ns, "curl", "-sS", "--max-time", "30", "-w", "\n%{http_code}", url]
    if body is not None:
        cmd += ["-X", "POST", "-H", "Content-Type: application/json", "--data", json.dumps(body)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=40)
    text, _, code = r.stdout.rpartition("\n")
    if raw:
        return int(code or 0), text
    try:
        return int(code or 0), json.loads(text or "{}")
    except ValueError:
        return 0, {"raw": r.stdout + r.stderr}


def run_job(ns, api, job, seconds=900):
    code, j = curl(ns, api + "/v1/jobs", job)
    if code != 201:
        sys.exit("job refused: %s" % j)
    jid = j["job_id"]

    def snapshot():
        return rb.job_figures(curl(ns, api + "/metrics", raw=True)[1], jid)

    first, deadline = None, time.monotonic() + seconds
    while time.monotonic() < deadline:
        info = curl(ns, api + "/v1/jobs/" + jid)[1]
        if first is None and info.get("step", 0) >= WARMUP and info.get("state") == "RUNNING":
            first = snapshot()
        if info.get("state") in ("SUCCEEDED", "FAILED", "CANCELLED"):
            if info["state"] != "SUCCEEDED":
                sys.exit("job %s: %s %s" % (jid, info["state"], info.get("error")))
            break
        time.sleep(0.2)
    else:
        sys.exit("job %s did not finish within %d s" % (jid, seconds))
    if first is None:
        sys.exit("job %s ended before its warm-up" % jid)
    last = snapshot()
    d = {k: last[k] - first[k] for k in last}
    n = max(d["rstep_n"], 1)
    return {"step": d["step_sum"] / max(d["step_n"], 1), "replica_step": d["rstep_sum"] / n,
            "wait": d["wait_sum"] / n}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flowstate", required=True)
    ap.add_argument("--rates", default="1gbit,10gbit")
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=64)
    a = ap.parse_args()
    flowstate = os.path.abspath(a.flowstate)
    for tool in ("ip", "tc", "curl"):
        if shutil.which(tool) is None:
            print("SKIP: needs `%s`" % tool)
            sys.exit(SKIP)
    if os.geteuid() != 0:
        print("SKIP: needs root to make network namespaces")
        sys.exit(SKIP)
    if not os.path.exists(os.path.join(rb.DATA_ROOT, "fashion-mnist")):
        print("SKIP: needs the Fashion-MNIST files (Debian's dataset-fashion-mnist)")
        sys.exit(SKIP)
    net, procs = Net(), []
    results = {}
    with tempfile.TemporaryDirectory(prefix="flowstate_netns_bench_") as tmp:
        try:
            try:
                net.make()
            except (subprocess.CalledProcessError, OSError) as e:
                print("SKIP: network namespaces are not permitted here: %s" % (getattr(e, "stderr", "") or e))
                sys.exit(SKIP)
            http, grpc = 18080, 50051  # each namespace has its own ports
            spec = json.dumps({"worker": ["%s:%d" % (ad, grpc) for ad in net.addr]})
            one = ["--set", "devices.intra_op_threads=1", "--set", "jobs.inter_op_threads=1"]
            for i in range(TASKS):
                cmd = ["ip", "netns", "exec", net.ns[i], flowstate]
                if i == 0:
                    cmd += ["serve", "--http", "%s:%d" % (net.addr[0], http), "--data-dir",
                            os.path.join(tmp, "data")]
                else:
                    cmd += ["worker"]
                cmd += ["--grpc", "%s:%d" % (net.addr[i], grpc), "--cluster", spec, "--task",
                        "worker:%d" % i] + one
                log = open(os.path.join(tmp, "task-%d.log" % i), "wb")
                procs.append(subprocess.Popen(cmd, stdout=log, stderr=log))
            api = "http://%s:%d" % (net.addr[0], http)
            deadline = time.monotonic() + 60
            while True:
                code, body = curl(net.ns[0], api + "/v1/cluster")
                t = body.get("tasks", []) if code == 200 else []
                if len(t) == TASKS and all(x["state"] == "UP" for x in t):
                    break
                if time.monotonic() > deadline:
                    sys.exit("the cluster did not come up within 60 s")
                time.sleep(0.2)
            for rate in a.rates.split(","):
                net.shape(rate)
                for model in a.models.split(","):
                    for overlap, bucket in ((False, 1 << 30), (True, 1 << 20)):
                        job = rb.example_job(model, a.batch, a.steps, TASKS, bucket)
                        r = run_job(net.ns[0], api, job)
                        results[(rate, model, overlap)] = r
                        tag = "%s_%s_%s" % (model, rate, "overlap" if overlap else "serial")
                        rb.figure("n3_%s_step" % tag, r["step"] * 1e3, "ms")
                        rb.figure("n3_%s_global_examples_per_second" % tag, TASKS * a.batch / r["step"],
                                  "examples/s")
                        rb.figure("n3_%s_allreduce_wait_share" % tag,
                                  r["wait"] / r["replica_step"] if r["replica_step"] else 0, "fraction")
                        rb.figure("n3_%s_compute" % tag, (r["replica_step"] - r["wait"]) * 1e3, "ms")
        finally:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            net.remove()
            failed = any(p.returncode not in (0, -15) for p in procs)
            if failed or not results:
                for i in range(TASKS):
                    path = os.path.join(tmp, "task-%d.log" % i)
                    if os.path.exists(path):
                        print("--- task %d:\n%s" % (i, open(path, errors="replace").read()[-2000:]))
    # The scaling model from the measured figures.
    print(json.dumps({"model": "ring all-reduce; compute = replica 0's step minus its wait (serial run); "
                      "effective bandwidth B from the serial run's wait at n = 3: "
                      "wait = 2(n-1)/n * S / B; overlap hides the share of the exposed all-reduce "
                      "(step minus compute) it hid at n = 3; "
                      "latency per message 10 us"}))
    for (rate, model, overlap), r in sorted(results.items()):
        if overlap:
            continue
        s = results[(rate, model, False)]
        o = results.get((rate, model, True))
        grad = rb.GRADIENT_BYTES[model]
        compute = max(s["replica_step"] - s["wait"], 1e-6)
        t_ar = max(s["wait"], 1e-6)
        bw = 2 * (TASKS - 1) / TASKS * grad / t_ar
        # The share of the serial run's exposed all-reduce (its step minus
        # the compute) that the overlapped run's step no longer shows.
        hidden = 0.0
        if o is not None and s["step"] > compute:
            hidden = min(max(1 - (o["step"] - compute) / (s["step"] - compute), 0.0), 1.0)
        rb.figure("measured_%s_%s_effective_bandwidth" % (model, rate), bw * 8 / 1e9, "Gb/s")
        rb.figure("measured_%s_%s_overlap_hidden_share" % (model, rate), hidden, "fraction")
        for n in (3, 8, 16, 64):
            ar = 2 * (n - 1) / n * grad / bw + 2 * (n - 1) * 10e-6
            for ov in (False, True):
                exposed = ar * (1 - hidden) if ov else ar
                rb.figure("model_%s_%s_%s_efficiency_n%d" % (model, rate, "overlap" if ov else "serial", n),
                          compute / (compute + exposed), "fraction")


if __name__ == "__main__":
    main()
