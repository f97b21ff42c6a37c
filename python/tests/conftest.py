"""A real `flowstate serve` for the whole test session.

The binary is $FLOWSTATE_BINARY (ctest passes the build's), else
build/flowstate of this checkout; without one the tests are skipped (when
FLOWSTATE_BINARY is set and missing they fail). The server listens on free
ports (--port-file), keeps its data in a temporary directory and reads
datasets from a temporary data root holding a small CSV file. Every wait is
bounded; the server is stopped by its PID: SIGTERM, up to 10 s, then SIGKILL.
"""

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..")))  # the package from the source tree

import flowstate  # noqa: E402

START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0


def binary():
    explicit = os.environ.get("FLOWSTATE_BINARY")
    path = explicit or os.path.join(SOURCE, "build", "flowstate")
    if not os.access(path, os.X_OK):
        if explicit:
            pytest.fail("FLOWSTATE_BINARY=%s is not an executable" % explicit, pytrace=False)
        pytest.skip("no flowstate binary at %s (build it, or set FLOWSTATE_BINARY)" % path)
    return path


def _write_points(root):
    rng = random.Random(3)
    with open(os.path.join(root, "points.csv"), "w") as f:
        f.write("a,b,target\n")
        for _ in range(256):
            x1, x2 = rng.uniform(-1, 1), rng.uniform(-1, 1)
            f.write("%.6f,%.6f,%.6f\n" % (x1, x2, 2 * x1 - 3 * x2 + 0.5))
    # Three classes by the sign of a - b and of a + b (for layers and Sequential).
    with open(os.path.join(root, "classes.csv"), "w") as f:
        f.write("a,b,label\n")
        for _ in range(512):
            x1, x2 = rng.uniform(-1, 1), rng.uniform(-1, 1)
            f.write("%.6f,%.6f,%d\n" % (x1, x2, 0 if x1 < x2 else (1 if x1 + x2 < 0 else 2)))


class Server:
    def __init__(self, binary, tmp, extra_args=(), data_root=None):
        self.tmp = tmp
        self.data_root = data_root or os.path.join(tmp, "datasets")
        if data_root is None:
            os.makedirs(self.data_root, exist_ok=True)
            _write_points(self.data_root)
        port_file = os.path.join(tmp, "ports.json")
        self.log_path = os.path.join(tmp, "server.log")
        self.log = open(self.log_path, "wb")
        args = [binary, "serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
                "--port-file", port_file, "--data-dir", os.path.join(tmp, "data"),
                "--data-root", self.data_root, "--set", "sessions.max_sessions=256",
                *extra_args]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT
        ports = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stop()
                raise RuntimeError("flowstate serve exited with %s:\n%s"
                                   % (self.proc.returncode, self.output()))
            try:
                with open(port_file) as f:
                    ports = json.load(f)
                if ports.get("http") and ports.get("grpc"):
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        else:
            self.stop()
            raise RuntimeError("flowstate serve wrote no ports within %.0f s:\n%s"
                               % (START_TIMEOUT, self.output()))
        self.http = "http://127.0.0.1:%d" % ports["http"]
        self.grpc = "grpc://127.0.0.1:%d" % ports["grpc"]
        # Ready: /healthz answers (bounded by the same deadline).
        probe = flowstate.Client(self.http, timeout=2)
        while True:
            try:
                probe.health(timeout=2)
                break
            except flowstate.errors.FlowstateError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("flowstate serve not healthy within %.0f s" % START_TIMEOUT)
                time.sleep(0.05)
        probe.close()

    def output(self):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")[-4000:]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=STOP_TIMEOUT)
        self.log.close()
        return self.proc.returncode


@pytest.fixture(scope="session")
def server():
    path = binary()
    with tempfile.TemporaryDirectory(prefix="flowstate-pytest-") as tmp:
        s = Server(path, tmp)
        try:
            yield s
        finally:
            rc = s.stop()
            if rc not in (0, -signal.SIGTERM):
                print("flowstate serve exited with %s:\n%s" % (rc, s.output()), file=sys.stderr)


@pytest.fixture(scope="session", params=["http", "grpc"])
def client(request, server):
    """A client over each transport: every test that takes it runs twice."""
    c = flowstate.Client(getattr(server, request.param), timeout=30)
    yield c
    c.close()


@pytest.fixture(scope="session")
def rest(server):
    c = flowstate.Client(server.http, timeout=30)
    yield c
    c.close()


@pytest.fixture(scope="session")
def grpc_client(server):
    c = flowstate.Client(server.grpc, timeout=30)
    yield c
    c.close()
