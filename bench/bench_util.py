"""What the Python benchmarks of bench/ share: their JSON figure lines, free
loopback ports, a JSON-over-HTTP request, reading a job's step figures
out of the server's Prometheus text, and a process slowed from outside
(DutyCycle, also used by tests/integration/cluster_backup_straggler.py)."""

import json
import os
import re
import signal
import socket
import threading
import urllib.error
import urllib.request


def figure(name, value, unit):
    print(json.dumps({"name": name, "value": round(value, 6), "unit": unit}), flush=True)


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def request(url, method="GET", body=None, timeout=30):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    return status, (json.loads(text) if text.startswith(("{", "[")) else text)


def metric(text, name, labels):
    """The value of one sample of the Prometheus text `text`."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        m = re.match(r'^[a-z_]+(?:\{(.*)\})? ([0-9.e+-]+|NaN)$', line)
        if not m:
            continue
        got = dict(re.findall(r'([a-z_]+)="([^"]*)"', m.group(1) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            return float(m.group(2))
    return 0.0


def job_figures(text, job_id):
    """A job's step totals in the Prometheus text `text`: the job's step
    duration (sum, count), and replica 0's step and all-reduce wait."""
    lab = {"job_id": job_id}
    r0 = dict(lab, replica="0")
    return {
        "step_sum": metric(text, "flowstate_job_step_duration_seconds_sum", lab),
        "step_n": metric(text, "flowstate_job_step_duration_seconds_count", lab),
        "rstep_sum": metric(text, "flowstate_replica_step_seconds_sum", r0),
        "rstep_n": metric(text, "flowstate_replica_step_seconds_count", r0),
        "wait_sum": metric(text, "flowstate_replica_allreduce_wait_seconds_sum", r0),
    }


class DutyCycle:
    """SIGSTOP/SIGCONT of one process at a fixed duty cycle, on a thread;
    hold(s) keeps it stopped for s seconds once."""

    def __init__(self, pid, stop_ms, period_ms):
        self.pid, self.stop_s, self.run_s = pid, stop_ms / 1e3, (period_ms - stop_ms) / 1e3
        self.done = threading.Event()
        self.hold_s = 0.0
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def hold(self, seconds):
        self.hold_s = seconds

    def loop(self):
        try:
            while not self.done.is_set():
                os.kill(self.pid, signal.SIGSTOP)
                held, self.hold_s = self.hold_s, 0.0
                self.done.wait(self.stop_s + held)
                os.kill(self.pid, signal.SIGCONT)
                if self.run_s > 0:
                    self.done.wait(self.run_s)
        finally:
            os.kill(self.pid, signal.SIGCONT)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()
