#!/usr/bin/python3
"""`flowstate serve` and `flowstate worker` with a cluster, as users start
them (the built binary, child processes with deadlines):

- bad cluster specs (a duplicate address, also spelled differently; a
  malformed address; a task index out of range; an unknown task type;
  TF_CONFIG and MASTER_* mistakes) exit 2 with the field named on stderr,
  before anything listens (the HTTP and gRPC ports never accept a
  connection while it runs) or opens the data directory;
- a MASTER_* cluster of three processes (task 0 `serve`, tasks 1 and 2
  `worker`) assembles through task 0's registry: GET /v1/cluster on task 0
  lists the three tasks at the addresses the workers listen on, its devices
  are named /job:worker/replica:0/task:0/...; a worker has no REST port;
- a MASTER_* task 0 whose world does not assemble exits 1 within its
  join timeout, naming the missing rank;
- a task told to stop (SIGTERM) while it waits for its world stops at once;
- a static cluster (--cluster, --task) names the devices after the task.

  tests/integration/cluster_cli.py --flowstate build/flowstate
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

FAILURES = []


def expect(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL " + what)
    else:
        print("ok   " + what)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def accepts(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def base_env():
    env = dict(os.environ)
    for k in ("TF_CONFIG", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "POD_IP",
              "FLOWSTATE_CONFIG", "FLOWSTATE_CLUSTER", "FLOWSTATE_TASK_TYPE", "FLOWSTATE_TASK_INDEX"):
        env.pop(k, None)
    return env


def refused(flowstate, tmp, name, cmd, args, env_extra, want, want_rc=2):
    """Runs a command that must refuse its cluster: polls its ports while it
    runs (none may accept), then checks the exit code and stderr."""
    http, grpc = free_port(), free_port()
    data = os.path.join(tmp, "data-" + name)
    argv = [flowstate, cmd, "--grpc", "127.0.0.1:%d" % grpc]
    if cmd == "serve":
        argv += ["--http", "127.0.0.1:%d" % http, "--data-dir", data]
    env = base_env()
    env.update(env_extra)
    p = subprocess.Popen(argv + args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    listened = False
    deadline = time.time() + 30
    while p.poll() is None and time.time() < deadline:
        listened = listened or accepts(http) or accepts(grpc)
        time.sleep(0.01)
    if p.poll() is None:
        p.kill()
        p.wait()
        expect(False, "%s: exits within 30 s" % name)
        return
    err = p.stderr.read()
    expect(p.returncode == want_rc, "%s: exit code %d (got %d; stderr %r)" % (name, want_rc, p.returncode, err))
    expect(want in err, "%s: stderr names it: %r (got %r)" % (name, want, err))
    expect(not listened and not accepts(http) and not accepts(grpc), "%s: listened on nothing" % name)
    expect(not os.path.exists(data), "%s: the data directory was not created" % name)


def bad_input(flowstate, tmp):
    g = free_port()
    dup = json.dumps({"worker": ["127.0.0.1:%d" % g, "localhost:%d" % g]})
    refused(flowstate, tmp, "duplicate address", "serve", ["--cluster", dup, "--task", "worker:0"], {},
            "cluster.worker[1]: duplicate address 'localhost:%d' (cluster.worker[0] has the same host and port)" % g)
    refused(flowstate, tmp, "duplicate address across jobs", "serve",
            ["--cluster", json.dumps({"ps": ["h1:7"], "worker": ["H1:07"]}), "--task", "ps:0"], {},
            "duplicate address 'H1:07'")
    refused(flowstate, tmp, "malformed address (no port)", "serve",
            ["--cluster", json.dumps({"worker": ["127.0.0.1:5000", "10.0.0.2"]}), "--task", "worker:0"], {},
            "cluster.worker[1]: address '10.0.0.2' has no port")
    refused(flowstate, tmp, "malformed address (space)", "worker",
            ["--cluster", json.dumps({"worker": ["my host:5000"]}), "--task", "worker:0"], {},
            "cluster.worker[0]: address 'my host:5000' contains a space")
    refused(flowstate, tmp, "index out of range", "serve",
            ["--cluster", json.dumps({"worker": ["a:1", "b:1"]}), "--task", "worker:2"], {},
            "task.index: 2 is out of range: job 'worker' has 2 task(s)")
    refused(flowstate, tmp, "negative index", "worker",
            ["--cluster", json.dumps({"worker": ["a:1", "b:1"]}), "--task", "worker:-1"], {},
            "--task worker:-1: the index must be >= 0")
    refused(flowstate, tmp, "task without index", "serve",
            ["--cluster", json.dumps({"worker": ["a:1", "b:1"]}), "--set", "task.type=worker"], {},
            "task.index: required with a cluster")
    refused(flowstate, tmp, "task without a cluster", "serve", ["--task", "worker:0"], {},
            "task: given (type 'worker', index 0) but there is no cluster")
    refused(flowstate, tmp, "unknown task type", "serve",
            ["--cluster", json.dumps({"worker": ["a:1"]}), "--task", "chief:0"], {},
            "task.type: 'chief' is not a job of the cluster (jobs: worker)")
    conf = os.path.join(tmp, "cluster.json")
    with open(conf, "w") as f:
        json.dump({"cluster": {"worker": ["a:70000"]}, "task": {"type": "worker", "index": 0}}, f)
    refused(flowstate, tmp, "port out of range in the config file", "serve", ["--config", conf], {},
            "cluster.worker[0]: address 'a:70000' has a port out of range (1..65535)")
    # TF_CONFIG wins over MASTER_* (valid here): its error is the one named.
    refused(flowstate, tmp, "TF_CONFIG index out of range", "serve", [],
            {"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 5}}),
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "2", "RANK": "0"},
            "TF_CONFIG.task.index: 5 is out of range")
    refused(flowstate, tmp, "TF_CONFIG duplicate", "worker", [],
            {"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1", "a:1"]}, "task": {"type": "worker", "index": 0}})},
            "TF_CONFIG.cluster.worker[1]: duplicate address 'a:1'")
    m = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2", "RANK": "2"}
    refused(flowstate, tmp, "RANK >= WORLD_SIZE", "serve", [], m, "RANK: 2 is out of range: WORLD_SIZE is 2")
    m.update({"WORLD_SIZE": "two", "RANK": "0"})
    refused(flowstate, tmp, "WORLD_SIZE not an integer", "worker", [], m, "WORLD_SIZE: 'two' is not an integer")
    refused(flowstate, tmp, "worker without a cluster", "worker", [], {}, "no cluster")


def start(flowstate, tmp, name, cmd, args, env_extra):
    port_file = os.path.join(tmp, name + ".ports")
    env = base_env()
    env.update(env_extra)
    log = open(os.path.join(tmp, name + ".log"), "w")
    p = subprocess.Popen([flowstate, cmd, "--port-file", port_file] + args, env=env,
                         stdout=subprocess.DEVNULL, stderr=log)
    return p, port_file


def wait_ports(p, port_file, what, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if os.path.exists(port_file):
            with open(port_file) as f:
                return json.load(f)
        if p.poll() is not None:
            break
        time.sleep(0.05)
    expect(False, "%s: started within %d s" % (what, seconds))
    return None


def stop(procs):
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def get_json(port, path):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as r:
        return json.load(r)


def master_cluster(flowstate, tmp):
    master = free_port()
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(master), "WORLD_SIZE": "3"}
    procs = []
    try:
        p0, f0 = start(flowstate, tmp, "rank0", "serve",
                       ["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--data-dir", os.path.join(tmp, "d0")],
                       dict(env, RANK="0"))
        procs.append(p0)
        workers = []
        for r in (1, 2):
            p, f = start(flowstate, tmp, "rank%d" % r, "worker", ["--grpc", "127.0.0.1:0"], dict(env, RANK=str(r)))
            procs.append(p)
            workers.append((p, f))
        ports0 = wait_ports(p0, f0, "rank 0")
        wports = [wait_ports(p, f, "rank %d" % (i + 1)) for i, (p, f) in enumerate(workers)]
        if ports0 is None or None in wports:
            return
        expect(all(w["http"] == 0 for w in wports), "MASTER_*: a worker has no REST port")
        c = get_json(ports0["http"], "/v1/cluster")
        addrs = [t["address"] for t in c["tasks"]]
        want = ["127.0.0.1:%d" % master] + ["127.0.0.1:%d" % w["grpc"] for w in wports]
        expect(addrs == want, "MASTER_*: the cluster's addresses are task 0's and the workers' (%s; want %s)" % (addrs, want))
        expect([t["name"] for t in c["tasks"]] == ["/job:worker/replica:0/task:%d" % i for i in range(3)],
               "MASTER_*: three tasks of job worker")
        expect(c["tasks"][0]["is_self"] and c["tasks"][0]["state"] == "UP", "MASTER_*: task 0 is itself and UP")
        expect(c["tasks"][0]["devices"][0]["name"] == "/job:worker/replica:0/task:0/device:CPU:0",
               "MASTER_*: task 0's devices carry its task")
        d = get_json(ports0["http"], "/v1/devices")
        expect(any(x["name"].startswith("/job:worker/replica:0/task:0/") for x in d["devices"]),
               "MASTER_*: GET /v1/devices names task 0's devices")
        expect(accepts(master), "MASTER_*: task 0 listens on MASTER_PORT")
        out = subprocess.run([flowstate, "cluster", "--server", "http://127.0.0.1:%d" % ports0["http"]],
                             capture_output=True, text=True, timeout=30)
        lines = out.stdout.splitlines()
        expect(out.returncode == 0 and len(lines) == 3 and lines[0].startswith(
                   "/job:worker/replica:0/task:0  127.0.0.1:%d  UP  incarnation " % master) and
               lines[0].endswith("(self)") and "/job:worker/replica:0/task:2  " + want[2] in lines[2],
               "flowstate cluster: one line per task (%r)" % out.stdout)
    finally:
        stop(procs)
    for p in procs:
        expect(p.returncode == 0, "MASTER_*: a task stops cleanly on SIGTERM (rc %s)" % p.returncode)


def join_timeout(flowstate, tmp):
    env = base_env()
    env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2", "RANK": "0"})
    t0 = time.time()
    try:
        p = subprocess.run([flowstate, "serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
                            "--data-dir", os.path.join(tmp, "dj"), "--set", "cluster_options.join_timeout_seconds=1"],
                           env=env, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        expect(False, "join timeout: exits within 30 s")
        return
    expect(p.returncode == 1, "join timeout: exit code 1 (got %d)" % p.returncode)
    expect("missing rank(s): 1" in p.stderr and "did not assemble within 1 s" in p.stderr,
           "join timeout: names the missing rank (%r)" % p.stderr)
    expect(time.time() - t0 < 15, "join timeout: within its deadline")


def sigterm_while_joining(flowstate, tmp):
    env = base_env()
    env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2", "RANK": "1"})
    log = open(os.path.join(tmp, "sigterm.log"), "w+")
    p = subprocess.Popen([flowstate, "worker", "--grpc", "127.0.0.1:0"], env=env,
                         stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.time() + 30
    while time.time() < deadline and "joining the cluster" not in open(log.name).read():
        time.sleep(0.05)
    t0 = time.time()
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    expect(p.returncode == 0 and time.time() - t0 < 5,
           "SIGTERM while joining: stops at once (rc %s in %.1f s)" % (p.returncode, time.time() - t0))
    expect("CANCELLED" in open(log.name).read(), "SIGTERM while joining: says it stopped waiting")


def static_cluster(flowstate, tmp):
    """The configuration's cluster wins over TF_CONFIG and MASTER_* (both
    malformed here, so using either would fail)."""
    g = free_port()
    cluster = json.dumps({"ps": ["127.0.0.1:%d" % free_port()], "worker": ["127.0.0.1:%d" % g]})
    p, f = start(flowstate, tmp, "static", "serve",
                 ["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:%d" % g, "--data-dir", os.path.join(tmp, "ds"),
                  "--cluster", cluster, "--task", "worker:0"],
                 {"TF_CONFIG": "{not json", "MASTER_ADDR": "x", "WORLD_SIZE": "two"})
    try:
        ports = wait_ports(p, f, "static cluster")
        if ports is None:
            return
        c = get_json(ports["http"], "/v1/cluster")
        expect([(t["job"], t["index"], t["is_self"]) for t in c["tasks"]] == [("ps", 0, False), ("worker", 0, True)],
               "static: the tasks of the spec, this one marked")
        d = get_json(ports["http"], "/v1/devices")
        expect([x["name"] for x in d["devices"]] == ["/job:worker/replica:0/task:0/device:CPU:0"],
               "static: devices named after the task (%s)" % [x["name"] for x in d["devices"]])
    finally:
        stop([p])


def task_from_config_over_tf_config(flowstate, tmp):
    """One TF_CONFIG for every task, each task's index from its own
    environment (FLOWSTATE_TASK_INDEX), as a Kubernetes pod gets it."""
    g0, g1 = free_port(), free_port()
    tf = {"cluster": {"worker": ["127.0.0.1:%d" % g0, "127.0.0.1:%d" % g1]}, "task": {"type": "worker", "index": 0}}
    p, f = start(flowstate, tmp, "tfindex", "serve",
                 ["--http", "127.0.0.1:0", "--grpc", "127.0.0.1:%d" % g1, "--data-dir", os.path.join(tmp, "dt")],
                 {"TF_CONFIG": json.dumps(tf), "FLOWSTATE_TASK_INDEX": "1"})
    try:
        ports = wait_ports(p, f, "TF_CONFIG with FLOWSTATE_TASK_INDEX")
        if ports is None:
            return
        c = get_json(ports["http"], "/v1/cluster")
        expect([t["index"] for t in c["tasks"] if t["is_self"]] == [1],
               "TF_CONFIG + FLOWSTATE_TASK_INDEX=1: this task is worker 1")
        d = get_json(ports["http"], "/v1/devices")
        expect(d["devices"][0]["name"].startswith("/job:worker/replica:0/task:1/"),
               "TF_CONFIG + FLOWSTATE_TASK_INDEX=1: devices of task 1")
    finally:
        stop([p])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flowstate", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="flowstate_cluster_cli_") as tmp:
        bad_input(a.flowstate, tmp)
        master_cluster(a.flowstate, tmp)
        join_timeout(a.flowstate, tmp)
        sigterm_while_joining(a.flowstate, tmp)
        static_cluster(a.flowstate, tmp)
        task_from_config_over_tf_config(a.flowstate, tmp)
    if FAILURES:
        print("%d failure(s)" % len(FAILURES))
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
