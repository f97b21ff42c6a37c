#!/usr/bin/env python3
"""Probes a `flowstate serve` binary the way a hostile or careless client
would: resident memory under parallel big unauthenticated bodies
(REST and gRPC), and /healthz latency and process CPU with many idle event
streams. Prints its figures; gates nothing. Not run by `make bench`.

  /usr/bin/python3 bench/frontend_probe.py build/flowstate rss [CLIENTS]
  /usr/bin/python3 bench/frontend_probe.py build/flowstate grpc-rss [CLIENTS]
  /usr/bin/python3 bench/frontend_probe.py build/flowstate streams [N]

rss/grpc-rss: CLIENTS (16) parallel 60 MiB bodies (POST /v1/jobs, or
Jobs/Submit messages) without a token to a server with auth on; prints the
server's resident memory before and at its peak. streams: a paused job, N
(1000) idle GET /v1/jobs/{id}/events streams; prints the server's CPU over
5 s and the p50/p99 of 300 sequential /healthz requests, without and with
the streams.
"""
import json, os, socket, subprocess, sys, tempfile, threading, time

TOKEN = "s3cret"
BODY = 60 << 20
JOB = {"name": "idle", "graph": {"nodes": [
    {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1, 2]}},
    {"name": "w", "op": "Variable", "attrs": {"dtype": "float32", "shape": [2, 1], "init": "glorot_uniform"}},
    {"name": "p", "op": "MatMul", "inputs": ["x", "w"]},
    {"name": "flat", "op": "Const", "attrs": {"dtype": "int32", "value": [-1]}},
    {"name": "pred", "op": "Reshape", "inputs": ["p", "flat"]},
    {"name": "sq", "op": "Square", "inputs": ["pred"]},
    {"name": "axes", "op": "Const", "attrs": {"dtype": "int32", "value": []}},
    {"name": "loss", "op": "Mean", "inputs": ["sq", "axes"]}]},
    "loss": "loss", "optimizer": {"type": "sgd", "learning_rate": 0.1},
    "input": {"format": "csv", "files": {"x": "points.csv"}, "columns": {"x": ["a", "b"]},
              "batch_size": 16, "epochs": 100000}, "seed": 1}


def start(binary):
    d = tempfile.mkdtemp(prefix="flowstate_probe")
    with open(os.path.join(d, "points.csv"), "w") as f:
        f.write("a,b\n" + "".join(f"{i * 0.01},{i * 0.02}\n" for i in range(64)))
    ports = os.path.join(d, "ports.json")
    p = subprocess.Popen([binary, "serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
                          "--data-dir", os.path.join(d, "data"), "--data-root", d, "--port-file", ports],
                         env=dict(os.environ, FLOWSTATE_AUTH_TOKENS=TOKEN), stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while not os.path.exists(ports):
        if time.time() > deadline or p.poll() is not None:
            sys.exit("the server did not start")
        time.sleep(0.05)
    return p, json.load(open(ports))


def rss(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) * 1024


def cpu_seconds(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def request(port, raw):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(raw)
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(65536)
    head, rest = data.split(b"\r\n\r\n", 1)
    n = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            n = int(line.split(b":")[1])
    while len(rest) < n:
        rest += s.recv(65536)
    s.close()
    return int(head.split()[1]), rest


def peak_while(pid, threads):
    before = peak = rss(pid)
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        peak = max(peak, rss(pid))
        time.sleep(0.05)
    return before, peak


def rest_rss(p, ports, clients):
    piece = b"x" * (1 << 20)

    def client():
        s = socket.create_connection(("127.0.0.1", ports["http"]))
        s.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % BODY)
        try:
            for _ in range(BODY // len(piece)):
                s.sendall(piece)
        except OSError:
            pass  # refused and closed
        time.sleep(1)
        s.close()

    before, peak = peak_while(p.pid, [threading.Thread(target=client) for _ in range(clients)])
    print(f"REST, {clients} x 60 MiB without a token: resident {before >> 20} MiB before, "
          f"{peak >> 20} MiB at peak (+{(peak - before) >> 20} MiB)")


def grpc_rss(p, ports, clients):
    import grpc
    n = BODY
    varint = b""
    while True:
        b, n = n & 0x7F, n >> 7
        varint += bytes([b | (0x80 if n else 0)])
        if not n:
            break
    message = b"\x0a" + varint + b"x" * BODY  # SubmitJobRequest{job_json}
    codes = []

    def client():
        ch = grpc.insecure_channel(f"127.0.0.1:{ports['grpc']}",
                                   options=[("grpc.max_send_message_length", 1 << 30)])
        try:
            ch.unary_unary("/flowstate.v1.Jobs/Submit")(message, timeout=60)
            codes.append("OK")
        except grpc.RpcError as e:
            codes.append(e.code().name)

    before, peak = peak_while(p.pid, [threading.Thread(target=client) for _ in range(clients)])
    print(f"gRPC, {clients} x 60 MiB without a token: resident {before >> 20} MiB before, "
          f"{peak >> 20} MiB at peak (+{(peak - before) >> 20} MiB); codes {sorted(set(codes))}")


def streams(p, ports, n):
    port, auth = ports["http"], f"Authorization: Bearer {TOKEN}\r\n"
    job = json.dumps(JOB)
    _, body = request(port, f"POST /v1/jobs HTTP/1.1\r\nHost: t\r\n{auth}Content-Length: {len(job)}\r\n\r\n{job}".encode())
    jid = json.loads(body)["job_id"]
    request(port, f"POST /v1/jobs/{jid}/pause HTTP/1.1\r\nHost: t\r\n{auth}Content-Length: 0\r\n\r\n".encode())
    time.sleep(1)

    def measure(label):
        c0, t0 = cpu_seconds(p.pid), time.time()
        time.sleep(5)
        cores = (cpu_seconds(p.pid) - c0) / (time.time() - t0)
        lat = []
        for _ in range(300):
            t = time.perf_counter()
            request(port, b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            lat.append((time.perf_counter() - t) * 1e3)
        lat.sort()
        print(f"{label}: server CPU {cores:.3f} cores; /healthz p50 {lat[150]:.2f} ms, p99 {lat[297]:.2f} ms")

    measure("no streams")
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(f"GET /v1/jobs/{jid}/events HTTP/1.1\r\nHost: t\r\n{auth}\r\n".encode())
        socks.append(s)
    ok = 0
    for s in socks:
        s.settimeout(10)
        ok += s.recv(4096).startswith(b"HTTP/1.1 200")
    time.sleep(1)
    measure(f"{ok} of {n} idle event streams open")


def main():
    binary, mode = sys.argv[1], sys.argv[2]
    p, ports = start(binary)
    try:
        if mode == "rss":
            rest_rss(p, ports, int(sys.argv[3]) if len(sys.argv) > 3 else 16)
        elif mode == "grpc-rss":
            grpc_rss(p, ports, int(sys.argv[3]) if len(sys.argv) > 3 else 16)
        elif mode == "streams":
            streams(p, ports, int(sys.argv[3]) if len(sys.argv) > 3 else 1000)
        else:
            sys.exit(__doc__)
    finally:
        p.terminate()
        p.wait(10)


if __name__ == "__main__":
    main()
