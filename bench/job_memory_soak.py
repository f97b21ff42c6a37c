#!/usr/bin/python3
"""Memory over many finished jobs: one `flowstate serve`, N small
jobs run one after the other through POST /v1/jobs, the server's resident
memory (VmRSS of its /proc/PID/status) read after each. Prints the RSS after
the warm-up (--warmup jobs) and after the last, and the growth per finished
job between them; with --max-growth-kib it exits 1 when that growth is
above the bound (so ctest can run it).

--sanitizer NAME (ctest passes it in a -fsanitize=NAME build, `make asan`):
the jobs run the same (the sanitizer watches the server's job path, and
the server must exit 0 after SIGTERM, with no report), but the RSS bound is
not checked and the run exits 77, which ctest shows as skipped: the RSS of
a sanitized server holds the sanitizer's quarantine of freed blocks and
its allocator's caches (under ASan it grew 195 KiB a job after the 110th,
2026-12-07), so it measures the sanitizer, not the server.

Jobs: "mlp" is the Fashion-MNIST MLP example (--steps steps, an evaluation
of the test set at the end, a checkpoint at its last step); "linear" a
regression on a 200-row CSV written here (no dataset needed). Besides the
jobs, every round opens and closes a REST session, runs a step in it, and
opens an SSE stream of the job's events and reads it to the end; with
--python-stubs (the build's generated gRPC stubs, <build>/python, and
Debian's python3-grpcio) it does the same with a gRPC session.

    bench/job_memory_soak.py --flowstate build/flowstate [--jobs 1000] [--model mlp]
        [--warmup 10] [--max-growth-kib 100] [--python-stubs build/python]
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import free_ports, request  # noqa: E402

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


LINEAR_GRAPH = {"nodes": [
    {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1, 2]}},
    {"name": "y", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1]}},
    {"name": "w", "op": "Variable", "attrs": {"dtype": "float32", "shape": [2, 1], "init": "glorot_uniform"}},
    {"name": "p", "op": "MatMul", "inputs": ["x", "w"]},
    {"name": "flat", "op": "Const", "attrs": {"dtype": "int32", "value": [-1]}},
    {"name": "pred", "op": "Reshape", "inputs": ["p", "flat"]},
    {"name": "sq", "op": "SquaredDifference", "inputs": ["pred", "y"]},
    {"name": "axes", "op": "Const", "attrs": {"dtype": "int32", "value": []}},
    {"name": "loss", "op": "Mean", "inputs": ["sq", "axes"]}]}


def job(model, steps, k):
    if model == "linear":
        return {"name": "soak-%d" % k, "graph": LINEAR_GRAPH, "loss": "loss",
                "optimizer": {"type": "adam", "learning_rate": 0.05},
                "input": {"format": "csv", "files": {"x": "points.csv", "y": "points.csv"},
                          "columns": {"x": ["a", "b"], "y": ["target"]}, "batch_size": 20,
                          "epochs": 2},
                "eval": {"files": {"x": "points.csv", "y": "points.csv"}, "metrics": ["loss"],
                         "every_epochs": 1},
                "checkpoint": {"every_steps": 10},
                "seed": k}
    with open(os.path.join(SOURCE, "examples/jobs/fashion_mlp.json")) as f:
        j = json.load(f)
    j["name"] = "soak-%d" % k
    j["max_steps"] = steps
    j["checkpoint"] = {"every_steps": steps}
    j["eval"]["every_epochs"] = 1
    j["seed"] = k
    return j


def wait_done(api, jid, seconds=600):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        code, j = request(api + "/v1/jobs/" + jid)
        if j.get("state") in ("SUCCEEDED", "FAILED", "CANCELLED"):
            return j
        time.sleep(0.02)
    sys.exit("job %s did not end within %d s" % (jid, seconds))


def session_round(api):
    """A session created, run once and closed."""
    graph = {"nodes": [
        {"name": "a", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [2]}},
        {"name": "b", "op": "Mul", "inputs": ["a", "a"]}]}
    code, s = request(api + "/v1/sessions", "POST", {"graph": graph})
    if code not in (200, 201):
        sys.exit("session refused: %s" % s)
    sid = s["session_id"]
    code, r = request(api + "/v1/sessions/%s/run" % sid, "POST",
                      {"feeds": {"a": [1.0, 2.0]}, "fetches": ["b"]})
    if code != 200:
        sys.exit("session run failed: %s" % r)
    request(api + "/v1/sessions/" + sid, "DELETE")


def grpc_session_round(stubs, channel):
    """A gRPC session created, run once and closed."""
    pb, pb_grpc = stubs
    s = pb_grpc.SessionsStub(channel)
    graph = json.dumps({"nodes": [
        {"name": "c", "op": "Const", "attrs": {"dtype": "float32", "value": [1.0, 2.0]}},
        {"name": "d", "op": "Mul", "inputs": ["c", "c"]}]})
    sid = s.Create(pb.CreateSessionRequest(graph_json=graph), timeout=30).session_id
    s.Run(pb.RunSessionRequest(session_id=sid, fetches=["d"]), timeout=30)
    s.Close(pb.CloseSessionRequest(session_id=sid), timeout=30)


def sse_round(api, jid):
    """The finished job's event stream, opened and read to its end."""
    req = urllib.request.Request(api + "/v1/jobs/%s/events?history=1" % jid)
    with urllib.request.urlopen(req, timeout=30) as r:
        r.read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flowstate", required=True)
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--model", choices=["mlp", "linear"], default="linear")
    ap.add_argument("--steps", type=int, default=20, help="steps of each mlp job")
    ap.add_argument("--python-stubs", default="",
                    help="the build's gRPC stubs (<build>/python): also a gRPC session a round")
    ap.add_argument("--max-growth-kib", type=float, default=0,
                    help="fail when RSS grows more than this per job after the warm-up")
    ap.add_argument("--sanitizer", default="",
                    help="the server is built with -fsanitize=NAME: run the jobs, skip the RSS bound")
    a = ap.parse_args()
    if a.model == "mlp" and not os.path.exists("/usr/share/datasets/fashion-mnist"):
        print("SKIP: needs the Fashion-MNIST files")
        sys.exit(77)
    with tempfile.TemporaryDirectory(prefix="flowstate_soak_") as tmp:
        root = os.path.join(tmp, "root")
        os.makedirs(root)
        rng = random.Random(3)
        with open(os.path.join(root, "points.csv"), "w") as f:
            f.write("a,b,target\n")
            for _ in range(200):
                x, y = rng.uniform(-1, 1), rng.uniform(-1, 1)
                f.write("%f,%f,%f\n" % (x, y, 2 * x - 3 * y + 0.5))
        stubs, channel = None, None
        if a.python_stubs:
            try:
                sys.path.insert(0, os.path.abspath(a.python_stubs))
                import grpc
                import flowstate_pb2
                import flowstate_pb2_grpc
                stubs = (flowstate_pb2, flowstate_pb2_grpc)
            except ImportError as e:
                print(json.dumps({"grpc_sessions": "skipped: %s" % e}))
        http, grpc_port = free_ports(2)
        args = [os.path.abspath(a.flowstate), "serve", "--http", "127.0.0.1:%d" % http,
                "--grpc", "127.0.0.1:%d" % grpc_port, "--data-dir", os.path.join(tmp, "data")]
        if a.model == "linear":
            args += ["--data-root", root]
        log = open(os.path.join(tmp, "serve.log"), "wb")
        proc = subprocess.Popen(args, stdout=log, stderr=log)
        api = "http://127.0.0.1:%d" % http
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if request(api + "/readyz", timeout=2)[0] == 200:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline or proc.poll() is not None:
                    sys.exit("the server did not come up")
                time.sleep(0.1)
            if stubs is not None:
                channel = grpc.insecure_channel("127.0.0.1:%d" % grpc_port)
            start = rss_kib(proc.pid)
            after_warmup = None
            t0 = time.monotonic()
            for k in range(1, a.jobs + 1):
                code, j = request(api + "/v1/jobs", "POST", job(a.model, a.steps, k))
                if code != 201:
                    sys.exit("job %d refused: %s" % (k, j))
                done = wait_done(api, j["job_id"])
                if done["state"] != "SUCCEEDED":
                    sys.exit("job %d: %s %s" % (k, done["state"], done.get("error")))
                session_round(api)
                if channel is not None:
                    grpc_session_round(stubs, channel)
                sse_round(api, j["job_id"])
                if k == a.warmup:
                    after_warmup = rss_kib(proc.pid)
                if k % max(1, a.jobs // 10) == 0:
                    print(json.dumps({"jobs": k, "rss_mib": round(rss_kib(proc.pid) / 1024, 1),
                                      "seconds": round(time.monotonic() - t0, 1)}), flush=True)
            end = rss_kib(proc.pid)
        finally:
            if channel is not None:
                channel.close()
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()
            with open(os.path.join(tmp, "serve.log"), errors="replace") as f:
                log_tail = f.read()[-4000:]
    per_job = (end - after_warmup) / max(1, a.jobs - a.warmup)
    print(json.dumps({"name": "rss_at_start", "value": round(start / 1024, 1), "unit": "MiB"}))
    print(json.dumps({"name": "rss_after_warmup", "value": round(after_warmup / 1024, 1), "unit": "MiB",
                      "jobs": a.warmup}))
    print(json.dumps({"name": "rss_after_last", "value": round(end / 1024, 1), "unit": "MiB",
                      "jobs": a.jobs}))
    print(json.dumps({"name": "rss_growth_per_job", "value": round(per_job, 2), "unit": "KiB"}))
    if a.sanitizer:
        if proc.returncode != 0:
            sys.exit("FAIL: the -fsanitize=%s server exited %s after SIGTERM; its log ends:\n%s"
                     % (a.sanitizer, proc.returncode, log_tail))
        print("SKIP: the RSS bound in a -fsanitize=%s build: its RSS holds the sanitizer's "
              "quarantine and allocator caches, not only the server's memory (the %d jobs ran, "
              "and the server exited 0)" % (a.sanitizer, a.jobs))
        sys.exit(77)
    if a.max_growth_kib and per_job > a.max_growth_kib:
        print("FAIL: RSS grew %.1f KiB per finished job after the warm-up (bound %.1f KiB)" %
              (per_job, a.max_growth_kib))
        sys.exit(1)


if __name__ == "__main__":
    main()
