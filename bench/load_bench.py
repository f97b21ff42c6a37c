#!/usr/bin/env python3
"""The server under load, with and without 1000 idle event streams.

Starts the real `flowstate serve` (embedded defaults, fresh data directory,
free ports) and measures, in the same run:

  1. the idle server: resident memory, CPU per second, /healthz p50/p99;
  2. wrk with 64 connections for --seconds against a session Run (Add of two
     fed scalars) and against a batch-1 predict of the Fashion-MNIST MLP:
     requests/s, p50/p99, errors (non-2xx and socket errors), resident
     memory before and after;
  3. the same with --streams idle server-sent event streams open on a paused
     job (default 1000): the streams' CPU per second and /healthz p50/p99
     while they are open, then the two wrk loads again.

Prints one JSON line per figure ({"name", "value", "unit"}), like bench/'s
C++ benchmarks. Needs wrk (scripts/install-deps --bench) and the
Fashion-MNIST files (dataset-fashion-mnist) for the predict; says so and
skips that part without them.

    bench/load_bench.py --flowstate build/flowstate [--seconds 60] [--streams 1000]
"""

import argparse
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

DATA_ROOT = "/usr/share/datasets"
SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def figure(name, value, unit):
    print(json.dumps({"name": name, "value": round(value, 3), "unit": unit}), flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port, method, path, body=None, timeout=30):
    data = None if body is None else body.encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, json.loads(r.read() or b"{}")


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_per_second(pid, seconds):
    c0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - c0) / (time.monotonic() - t0)


def healthz_latency(port, n=300):
    """p50/p99 in ms of GET /healthz on one keep-alive connection."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    req = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    times = []
    buf = b""
    for _ in range(n):
        t0 = time.perf_counter()
        s.sendall(req)
        while True:
            head, sep, rest = buf.partition(b"\r\n\r\n")
            if sep:
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                if len(rest) >= length:
                    buf = rest[length:]
                    break
            chunk = s.recv(65536)
            if not chunk:
                raise RuntimeError("healthz: connection closed")
            buf += chunk
        times.append((time.perf_counter() - t0) * 1e3)
    s.close()
    times.sort()
    return times[len(times) // 2], times[int(len(times) * 0.99) - 1]


def parse_ms(text):
    units = {"us": 1e-3, "ms": 1.0, "s": 1e3}
    for u in ("us", "ms", "s"):
        if text.endswith(u):
            return float(text[: -len(u)]) * units[u]
    return float(text)


def wrk(port, path, body, seconds, connections=64):
    """requests/s, p50 ms, p99 ms, errors of wrk against POST path."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write('wrk.method = "POST"\n')
        f.write(f'wrk.body = {json.dumps(body)}\n')
        f.write('wrk.headers["Content-Type"] = "application/json"\n')
        lua = f.name
    try:
        out = subprocess.run(
            ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", lua,
             f"http://127.0.0.1:{port}{path}"],
            capture_output=True, text=True, timeout=seconds + 60, check=True).stdout
    finally:
        os.unlink(lua)
    rps = p50 = p99 = 0.0
    errors = 0
    for line in out.splitlines():
        w = line.split()
        if line.startswith("Requests/sec:"):
            rps = float(w[1])
        elif len(w) == 2 and w[0] == "50%":
            p50 = parse_ms(w[1])
        elif len(w) == 2 and w[0] == "99%":
            p99 = parse_ms(w[1])
        elif "Non-2xx" in line:
            errors += int(w[-1])
        elif line.strip().startswith("Socket errors:"):
            errors += sum(int(x.strip(",")) for x in w if x.strip(",").isdigit())
    if rps == 0:
        raise RuntimeError("no Requests/sec in wrk's output:\n" + out)
    return rps, p50, p99, errors


def open_streams(port, path, n, deadline_s=60):
    """n idle SSE connections; each has read its response head."""
    socks = []
    t_end = time.monotonic() + deadline_s
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n".encode())
        socks.append(s)
    for s in socks:
        head = b""
        while b"\r\n\r\n" not in head:
            if time.monotonic() > t_end:
                raise RuntimeError("event streams: no response head within the deadline")
            chunk = s.recv(4096)
            if not chunk:
                raise RuntimeError("event stream closed by the server: " + head.decode(errors="replace"))
            head += chunk
        if b" 200 " not in head.split(b"\r\n", 1)[0]:
            raise RuntimeError("event stream refused: " + head.split(b"\r\n", 1)[0].decode())
        s.setblocking(False)
    return socks


def wait_state(port, job, states, deadline_s=300):
    t_end = time.monotonic() + deadline_s
    while time.monotonic() < t_end:
        _, j = request(port, "GET", f"/v1/jobs/{job}")
        if j["state"] in states:
            return j["state"]
        time.sleep(0.1)
    raise RuntimeError(f"job {job} never reached {states}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flowstate", required=True)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--streams", type=int, default=1000)
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        print("load_bench: no wrk (scripts/install-deps --bench): skipping", file=sys.stderr)
        return 0
    # The streams and wrk's connections need descriptors on both sides.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 8192)), hard))

    tmp = tempfile.mkdtemp(prefix="flowstate-load-")
    http, grpc = free_port(), free_port()
    server = subprocess.Popen(
        [args.flowstate, "serve", "--http", f"127.0.0.1:{http}", "--grpc", f"127.0.0.1:{grpc}",
         "--data-dir", os.path.join(tmp, "data"), "--data-root", DATA_ROOT],
        stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "server.log"), "w"))
    socks = []
    try:
        for _ in range(300):
            try:
                if request(http, "GET", "/readyz", timeout=1)[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError("the server did not become ready")
        pid = server.pid

        graph = {"nodes": [
            {"name": "a", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": []}},
            {"name": "b", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": []}},
            {"name": "sum", "op": "Add", "inputs": ["a", "b"]}]}
        _, s = request(http, "POST", "/v1/sessions", json.dumps({"graph": graph}))
        run_path = f"/v1/sessions/{s['session_id']}/run"
        run_body = json.dumps({"feeds": {"a": 1.5, "b": 2.0}, "fetches": ["sum"]})

        loads = [("run", run_path, run_body)]
        have_data = os.path.exists(f"{DATA_ROOT}/fashion-mnist/train-images-idx3-ubyte.gz")
        job = json.load(open(os.path.join(SOURCE, "examples/jobs/fashion_mlp.json")))
        job.pop("eval", None)
        job.pop("checkpoint", None)
        if have_data:
            job["max_steps"] = 2
            _, j = request(http, "POST", "/v1/jobs", json.dumps(job))
            wait_state(http, j["job_id"], ["SUCCEEDED"])
            pixels = [(i * 7) % 256 for i in range(784)]
            predict_body = json.dumps({"inputs": {"x": {"dtype": "uint8", "shape": [1, 28, 28],
                                                        "data": pixels}},
                                       "fetches": ["logits"]})
            loads.append(("predict", f"/v1/jobs/{j['job_id']}/predict", predict_body))
        else:
            print(f"load_bench: no Fashion-MNIST under {DATA_ROOT}: skipping predict",
                  file=sys.stderr)

        def measure(tag):
            figure(f"load_{tag}_idle_cpu", cpu_per_second(pid, 5), "cores")
            p50, p99 = healthz_latency(http)
            figure(f"load_{tag}_healthz_p50", p50, "ms")
            figure(f"load_{tag}_healthz_p99", p99, "ms")
            for name, path, body in loads:
                before = rss_bytes(pid)
                rps, l50, l99, errors = wrk(http, path, body, args.seconds)
                after = rss_bytes(pid)
                figure(f"load_{tag}_{name}_rps_c64", rps, "req/s")
                figure(f"load_{tag}_{name}_p50_c64", l50, "ms")
                figure(f"load_{tag}_{name}_p99_c64", l99, "ms")
                figure(f"load_{tag}_{name}_errors_c64", errors, "count")
                figure(f"load_{tag}_{name}_rss_before", before / 2**20, "MiB")
                figure(f"load_{tag}_{name}_rss_after", after / 2**20, "MiB")

        measure("plain")

        # Idle streams: a job that is paused at once never sends a step event.
        idle = dict(job)
        idle["name"] = "idle-streams"
        idle["max_steps"] = 10**9
        if not have_data:
            raise RuntimeError("the idle-stream job needs Fashion-MNIST")
        _, j = request(http, "POST", "/v1/jobs", json.dumps(idle))
        request(http, "POST", f"/v1/jobs/{j['job_id']}/pause", "{}")
        wait_state(http, j["job_id"], ["PAUSED"])
        rss0 = rss_bytes(pid)
        socks = open_streams(http, f"/v1/jobs/{j['job_id']}/events", args.streams)
        figure("load_streams_open", len(socks), "count")
        figure("load_streams_rss_added", (rss_bytes(pid) - rss0) / 2**20, "MiB")
        measure(f"streams{args.streams}")
        return 0
    finally:
        for s in socks:
            s.close()
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
