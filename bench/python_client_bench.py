#!/usr/bin/env python3
"""The Python package's overhead (issue 45): a tiny s.run and a large feed, over gRPC and REST.

Starts `flowstate serve` on free ports (bench_util-free: the tests' Server
class), then measures, one after the other:

- a tiny step (a scalar float32 placeholder + 1) through flowstate's
  Session.run, against the same call through the raw generated stub
  (grpc) and through http.client with a hand-written body (REST), p50/p99
  over --runs calls after a warm-up: what the package adds;
- feeding an N MiB float32 array and fetching only its Shape, against the
  same bytes sent from a numpy array over a loopback socket to another
  process that reads them into a numpy buffer ("a plain copy over
  loopback", the issue's baseline);
- feeding it through Identity (a round trip: the array goes in and comes
  back), against a plain numpy copy of it and against the raw stub with the
  same bytes;
- with --service-bench (build/bench/service_bench), the C++ clients' round
  trip of the same tiny Run (its sync gRPC stub and REST client, the best
  p50 of 3 rounds, its own server process), run right after, and the ratio;
- with --fit-steps N, the Fashion-MNIST MLP trained N steps as
  examples/jobs/fashion_mlp.json (IDX files) and as
  examples/python/fashion_mlp.py's Sequential through fit(x, y) (numpy arrays
  uploaded as an .npz), alternating --fit-reps times: the jobs' examples/s.

    python3 bench/python_client_bench.py --flowstate build/flowstate [--runs 2000] [--mib 32]
        [--service-bench build/bench/service_bench] [--fit-steps 300 --fit-reps 2]

64 MiB cannot be fed with the defaults: limits.max_tensor_bytes,
grpc.max_message_bytes and (with base64) http.body_limit_bytes are 64 MiB.
"""

import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))

import flowstate  # noqa: E402
from conftest import Server  # noqa: E402


def percentiles(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] * 1e6, xs[int(len(xs) * 0.99)] * 1e6


def timed(fn, runs):
    for _ in range(min(200, runs)):
        fn()
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


# The receiving end of the baseline: reads each message of `n` bytes into a
# numpy buffer (as a server would into its tensor) and answers one byte.
RECEIVER = """
import socket, sys, numpy as np
n = int(sys.argv[1])
srv = socket.create_server(("127.0.0.1", 0))
print(srv.getsockname()[1], flush=True)
c, _ = srv.accept()
while True:
    buf = np.empty(n, np.uint8)
    view, got = memoryview(buf), 0
    while got < n:
        k = c.recv_into(view[got:])
        if k == 0:
            sys.exit(0)
        got += k
    c.sendall(b"k")
"""


def loopback_copy(n, runs):
    """Best seconds to send n bytes from a numpy array to another process over
    loopback TCP and hear back: "a plain copy over loopback"."""
    proc = subprocess.Popen([sys.executable, "-c", RECEIVER, str(n)], stdout=subprocess.PIPE,
                            text=True)
    try:
        port = int(proc.stdout.readline())
        arr = np.random.default_rng(2).integers(0, 255, n, dtype=np.uint8)
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def once():
                sock.sendall(memoryview(arr))
                if sock.recv(1) != b"k":
                    raise RuntimeError("the loopback receiver went away")
            return min(timed(once, runs))
    finally:
        proc.kill()
        proc.wait(timeout=10)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flowstate", required=True)
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--mib", type=int, default=32)
    ap.add_argument("--service-bench", help="build/bench/service_bench: the C++ clients' round trip")
    ap.add_argument("--fit-steps", type=int, default=0)
    ap.add_argument("--fit-reps", type=int, default=2)
    ap.add_argument("--data-root", default="/usr/share/datasets")
    a = ap.parse_args()
    tiny = {}
    print("load average: %.2f %.2f %.2f" % os.getloadavg())
    loopback = loopback_copy(a.mib << 20, 5)
    with tempfile.TemporaryDirectory() as tmp:
        srv = Server(a.flowstate, tmp, extra_args=["--set", "limits.max_tensor_bytes=134217728",
                                                   "--set", "http.body_limit_bytes=268435456",
                                                   "--set", "grpc.max_message_bytes=268435456"])
        try:
            for url in (srv.grpc, srv.http):
                c = flowstate.Client(url)
                g = c.graph()
                x = g.placeholder("float32", [], name="x")
                y = g.Add(x, np.float32(1), name="y")
                big_in = g.placeholder("float32", None, name="big")
                big_out = g.Identity(big_in, name="big_out")
                big_shape = g.Shape(big_in, name="big_shape")
                one = np.float32(1)
                with c.session(g) as s:
                    pkg = timed(lambda: s.run(y, {x: one}), a.runs)
                    if c.transport.kind == "grpc":
                        t = c.transport
                        req = t.pb.RunSessionRequest(session_id=s.id, fetches=["y"])
                        req.feeds["x"].CopyFrom(t.pb.Tensor(dtype="float32", content=one.tobytes()))
                        raw = timed(lambda: t.sessions.Run(req, timeout=30), a.runs)
                    else:
                        conn = http.client.HTTPConnection(c.transport.host, c.transport.port)
                        body = json.dumps({"feeds": {"x": 1.0}, "fetches": ["y"]}).encode()

                        def post():
                            conn.request("POST", "/v1/sessions/%s/run" % s.id, body,
                                         {"Content-Type": "application/json"})
                            r = conn.getresponse()
                            r.read()
                        raw = timed(post, a.runs)
                    p, r = percentiles(pkg), percentiles(raw)
                    tiny[c.transport.kind] = p[0]
                    print("%-5s tiny run p50/p99: flowstate %.0f / %.0f us, raw %.0f / %.0f us, "
                          "package adds %.0f us at p50" % (c.transport.kind, p[0], p[1], r[0], r[1],
                                                           p[0] - r[0]))
                    arr = np.random.default_rng(1).standard_normal(a.mib << 18).astype(np.float32)
                    copy = min(timed(lambda: arr.copy(), 5))
                    feed_only = min(timed(lambda: s.run(big_shape, {big_in: arr}), 5))
                    print("%-5s %d MiB feed (fetching its shape): best %.1f ms; the same bytes "
                          "over a loopback socket to another process %.1f ms: %.2fx"
                          % (c.transport.kind, a.mib, feed_only * 1e3, loopback * 1e3,
                             feed_only / loopback))
                    feed = timed(lambda: s.run(big_out, {big_in: arr}), 5)
                    line = ("%-5s %d MiB feed+fetch round trip: best %.1f ms "
                            "(a numpy copy %.1f ms: %.1fx)"
                            % (c.transport.kind, a.mib, min(feed) * 1e3, copy * 1e3,
                               min(feed) / copy))
                    if c.transport.kind == "grpc":
                        t = c.transport
                        req = t.pb.RunSessionRequest(session_id=s.id, fetches=["big_out"])
                        req.feeds["big"].CopyFrom(t.pb.Tensor(dtype="float32", shape=[arr.size],
                                                              content=arr.tobytes()))
                        raw = timed(lambda: t.sessions.Run(req, timeout=60), 5)
                        line += "; the raw stub %.1f ms" % (min(raw) * 1e3)
                    print(line)
                c.close()
            if a.fit_steps:
                fit_bench(srv, a)
        finally:
            srv.stop()
    if a.service_bench:
        figures = {}
        out = subprocess.run([a.service_bench, "--rounds", "3", "--requests", str(a.runs),
                              "--no-wrk", "--no-predict"], capture_output=True, text=True,
                             timeout=600, check=True).stdout
        for line in out.splitlines():
            if line.startswith("{"):
                f = json.loads(line)
                figures[f["name"]] = f["value"]
        for kind, name in (("grpc", "service_run_grpc_p50"), ("http", "service_run_rest_p50")):
            print("%-5s tiny run p50: Python package %.0f us, C++ client %.0f us: %.2fx"
                  % (kind, tiny[kind], figures[name], tiny[kind] / figures[name]))


def fit_bench(srv, a):
    """The MLP as a JSON job (IDX files) and as Sequential.fit(x, y) (uploaded arrays)."""
    import gzip
    from flowstate import layers
    c = flowstate.Client(srv.grpc, timeout=600)
    src = os.path.join(a.data_root, "fashion-mnist")
    dst = os.path.join(srv.data_root, "fashion-mnist")
    if not os.path.exists(dst):
        shutil.copytree(src, dst)
    with gzip.open(os.path.join(src, "train-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
    with gzip.open(os.path.join(src, "train-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    spec_path = os.path.join(HERE, "..", "examples", "jobs", "fashion_mlp.json")
    rates = {"json": [], "fit": []}
    for _ in range(a.fit_reps):
        job = c.jobs.submit(spec_path, max_steps=a.fit_steps)
        job.wait(timeout=600)
        rates["json"].append(job.info["examples_per_sec"])
        job.delete()
        model = flowstate.Sequential(c, [
            layers.Rescale(2.832861 / 255, -0.286 * 2.832861), layers.Flatten(),
            layers.Dense(512, activation="relu"), layers.Dense(512, activation="relu"),
            layers.Dense(10)], input_shape=(28, 28), input_dtype="uint8", name="fit-bench")
        model.compile(optimizer={"type": "adam", "learning_rate": 0.001,
                                 "schedule": {"type": "cosine_decay", "decay_steps": 1407}},
                      metrics=["accuracy", "loss"])
        model.fit(x, y, epochs=3, batch_size=128, max_steps=a.fit_steps, verbose=0)
        rates["fit"].append(model.job.refresh().info["examples_per_sec"])
        model.job.delete()
    j, f = max(rates["json"]), max(rates["fit"])
    print("MLP %d steps, best of %d: JSON job (IDX) %.0f ex/s, Sequential.fit(x, y) %.0f ex/s: "
          "%.3fx (runs: json %s, fit %s)" % (a.fit_steps, a.fit_reps, j, f, f / j,
                                            ["%.0f" % v for v in rates["json"]],
                                            ["%.0f" % v for v in rates["fit"]]))


if __name__ == "__main__":
    main()
