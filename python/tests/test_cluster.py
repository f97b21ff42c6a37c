"""The package against a two-task cluster: `flowstate serve` as task 0 (the
master, HTTP and the public gRPC API on its cluster port) and `flowstate
worker` as task 1, each its own process on loopback with its own data root.

Sessions place nodes on task 1 with `g.device(...)`; `Sequential.fit(...,
replicas=2)` places one replica per task. Uploaded arrays (`fit(x, y)`) live
under task 0's data root only, so replicas on task 1 cannot read them: the
job fails naming the task and the file (README, "Python").
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import time

import numpy as np
import pytest

import flowstate
from flowstate import errors, layers

from conftest import STOP_TIMEOUT, _write_points, binary

TASK1 = "/job:worker/replica:0/task:1/device:CPU:0"


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _stop(procs):
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=STOP_TIMEOUT)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    path = binary()
    tmp = str(tmp_path_factory.mktemp("cluster"))
    roots = [os.path.join(tmp, "root0"), os.path.join(tmp, "root1")]
    os.makedirs(roots[0])
    _write_points(roots[0])
    shutil.copytree(roots[0], roots[1])  # each task reads its own copy
    http, g0, g1 = _free_ports(3)
    spec = json.dumps({"worker": ["127.0.0.1:%d" % g0, "127.0.0.1:%d" % g1]})
    procs, logs = [], []
    for i, g in enumerate((g0, g1)):
        logs.append(open(os.path.join(tmp, "task-%d.log" % i), "wb"))
        cmd = [path, "serve", "--http", "127.0.0.1:%d" % http, "--data-dir",
               os.path.join(tmp, "data")] if i == 0 else [path, "worker"]
        cmd += ["--data-root", roots[i], "--grpc", "127.0.0.1:%d" % g, "--cluster", spec,
                "--task", "worker:%d" % i]
        procs.append(subprocess.Popen(cmd, stdout=logs[-1], stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL))
    try:
        probe = flowstate.Client("http://127.0.0.1:%d" % http, timeout=2)
        deadline = time.monotonic() + 30
        tasks = []
        while time.monotonic() < deadline:
            try:
                tasks = probe.cluster()["tasks"]
                if len(tasks) == 2 and all(t["state"] == "UP" for t in tasks):
                    break
            except errors.FlowstateError:
                pass
            time.sleep(0.1)
        else:
            pytest.fail("the two tasks were not UP within 30 s: %s" % tasks)
        probe.close()
        yield {"http": "http://127.0.0.1:%d" % http, "grpc": "grpc://127.0.0.1:%d" % g0}
    finally:
        _stop(procs)
        for f in logs:
            f.close()


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_a_session_runs_nodes_on_the_other_task(cluster, transport):
    c = flowstate.Client(cluster[transport], timeout=30)
    g = c.graph()
    x = g.placeholder("float32", [None], name="x")
    with g.device(TASK1):
        w = g.Variable([1], initial_value=np.array([3.0], np.float32), name="w")
        y = g.Mul(x, w, name="y")
    z = g.Add(y, np.float32(1), name="z")  # back on task 0
    with c.session(g) as s:
        s.run(g.initializer())
        np.testing.assert_array_equal(s.run(z, {x: np.arange(4, dtype=np.float32)}),
                                      [1, 4, 7, 10])
        s.run(g.AssignAdd(w, np.array([1.0], np.float32)))  # state kept on task 1
        np.testing.assert_array_equal(s.run(y, {x: np.ones(2, np.float32)}), [4, 4])
    c.close()


def _model(c):
    m = flowstate.Sequential(c, [layers.Dense(16, activation="relu"), layers.Dense(3)],
                             input_shape=(2,), label_dtype="float32", name="py-replicas")
    m.compile(optimizer="adam", learning_rate=0.02, metrics=["accuracy"])
    return m


def test_fit_with_replicas_places_one_per_task(cluster):
    c = flowstate.Client(cluster["grpc"], timeout=30)
    m = _model(c)
    files = {"x": "classes.csv", "y": "classes.csv"}
    history = m.fit(files=files, columns={"x": ["a", "b"], "y": ["label"]},
                    validation_files=files, epochs=4, batch_size=32, replicas=2, verbose=0,
                    timeout=120)
    m.job.refresh()
    assert [p["device"] for p in m.job.info["placement"]] == ["/job:worker/task:0",
                                                            "/job:worker/task:1"]
    assert len(history["accuracy"]) == 4 and history["accuracy"][-1] > 0.8
    m.job.delete()
    c.close()


def test_fit_of_uploaded_arrays_across_tasks_fails_naming_the_task_and_file(cluster):
    c = flowstate.Client(cluster["http"], timeout=30)
    m = _model(c)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (256, 2)).astype(np.float32)
    y = (x[:, 0] > x[:, 1]).astype(np.float32)
    with pytest.raises(errors.FlowstateError) as e:
        m.fit(x, y, epochs=1, batch_size=32, replicas=2, verbose=0, timeout=120)
    assert "/job:worker/task:1" in e.value.message and "uploads/ds-" in e.value.message
    assert c.datasets.list() == []  # the upload was deleted once the job ended
    c.close()
