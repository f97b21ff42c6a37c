#!/usr/bin/env python3
"""The Python package's overhead (issue 45): a tiny s.run and a large feed, over gRPC and REST.

Starts `flowstate serve` on free ports (bench_util-free: the tests' Server
class), then measures, one after the other:

- a tiny step (a scalar float32 placeholder + 1) through flowstate's
  Session.run, against the same call through the raw generated stub
  (grpc) and through http.client with a hand-written body (REST), p50/p99
  over --runs calls after a warm-up: what the package adds;
- feeding an N MiB float32 array through Identity (a round trip: the array
  goes in and comes back), against a plain numpy copy of it and against the
  raw stub with the same bytes.

    python3 bench/python_client_bench.py --flowstate build/flowstate [--runs 2000] [--mib 32]

64 MiB cannot be fed with the defaults: limits.max_tensor_bytes,
grpc.max_message_bytes and (with base64) http.body_limit_bytes are 64 MiB.
"""

import argparse
import http.client
import json
import os
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flowstate", required=True)
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--mib", type=int, default=32)
    a = ap.parse_args()
    print("load average: %.2f %.2f %.2f" % os.getloadavg())
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
                    print("%-5s tiny run p50/p99: flowstate %.0f / %.0f us, raw %.0f / %.0f us, "
                          "package adds %.0f us at p50" % (c.transport.kind, p[0], p[1], r[0], r[1],
                                                           p[0] - r[0]))
                    arr = np.random.default_rng(1).standard_normal(a.mib << 18).astype(np.float32)
                    copy = min(timed(lambda: arr.copy(), 5))
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
        finally:
            srv.stop()


if __name__ == "__main__":
    main()
