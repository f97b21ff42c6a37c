"""Sessions over both transports: numpy in and out, every dtype, extend, close, errors."""

import json
import struct
import time

import numpy as np
import pytest

import flowstate
from flowstate import errors

DTYPES = ["float32", "float64", "int32", "int64", "uint8", "bool", "float16"]


def sample(dtype, shape=(2, 3)):
    rng = np.random.default_rng(7)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype == "uint8":
        return rng.integers(0, 256, size=shape).astype(np.uint8)
    if dtype.startswith("int"):
        return rng.integers(-1000, 1000, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def test_first_session(client):
    g = client.graph()
    a = g.placeholder("float32", [None], name="a")
    b = g.Mul(a, 2.0, name="b")
    with client.session(g) as s:
        out = s.run(b, {a: np.arange(3, dtype=np.float32)})
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [0, 2, 4])


@pytest.mark.parametrize("dtype", DTYPES)
def test_identity_round_trips_every_dtype(client, dtype):
    g = client.graph()
    x = g.placeholder(dtype, name="x")
    y = g.Identity(x, name="y")
    value = sample(dtype)
    with client.session(g) as s:
        out = s.run(y, {x: value})
    assert out.dtype == value.dtype and out.shape == value.shape
    np.testing.assert_array_equal(out, value)


def test_bfloat16_round_trips_as_float32(client):
    g = client.graph()
    x = g.placeholder("bfloat16", name="x")
    y = g.Identity(x, name="y")
    value = np.array([1.0, -2.5, 0.15625, 2.0 ** 100], np.float32)
    with client.session(g) as s:
        out = s.run(y, {x: value})
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, value)  # all exact in bfloat16


def test_fetch_structures_and_targets(client):
    g = client.graph()
    x = g.placeholder("float32", [2], name="x")
    doubled = g.Add(x, x, name="doubled")
    squared = g.Mul(x, x, name="squared")
    with client.session(g) as s:
        feed = {x: np.array([1, 2], np.float32)}
        d = s.run({"d": doubled, "pair": (doubled, squared), "list": [squared]}, feed)
        assert set(d) == {"d", "pair", "list"}
        np.testing.assert_array_equal(d["pair"][1], [1, 4])
        np.testing.assert_array_equal(d["list"][0], [1, 4])
        a, b = s.run(["doubled", "squared:0"], {"x": [3, 4]})  # by name, lists as the dtype
        np.testing.assert_array_equal(a, [6, 8])
        np.testing.assert_array_equal(b, [9, 16])


def test_variables_initializer_and_state(client):
    g = client.graph()
    w = g.Variable([2, 2], initializer="ones", name="w")
    v = g.Variable([3], initializer="glorot_uniform", name="v", seed=5)
    c = g.Variable([2], initial_value=np.array([4, 5], np.float32), name="c")
    step = g.AssignAdd(w, np.full((2, 2), 0.5, np.float32), name="step")
    init = g.initializer()
    with client.session(g) as s:
        s.run(init)
        np.testing.assert_array_equal(s.run(w), np.ones((2, 2)))
        s.run(step)
        s.run([], targets=[step])
        np.testing.assert_array_equal(s.run(w), np.full((2, 2), 2.0))
        vv = s.run(v)
        limit = np.sqrt(6.0 / 6.0)
        assert vv.shape == (3,) and np.all(np.abs(vv) <= limit)
        np.testing.assert_array_equal(s.run(c), [4, 5])


def test_reading_an_uninitialized_variable_is_failed_precondition(client):
    g = client.graph()
    w = g.Variable([2], initializer="zeros", name="w")
    with client.session(g) as s:
        with pytest.raises(errors.FailedPrecondition) as e:
            s.run(w)
        assert e.value.node == "w" or "w" in e.value.message


def test_graph_grows_between_runs(client):
    g = client.graph()
    x = g.placeholder("int32", [None], name="x")
    with client.session(g) as s:
        y = g.Add(x, 1, name="y")  # added after the session was created
        np.testing.assert_array_equal(s.run(y, {x: [1, 2]}), [2, 3])
        z = g.Mul(y, 10, name="z")
        np.testing.assert_array_equal(s.run(z, {x: [1]}), [20])
        s.extend({"nodes": [{"name": "k", "op": "Const",
                             "attrs": {"dtype": "int64", "value": [7]}}]})
        assert s.run("k").tolist() == [7]


def test_session_from_a_json_graph(client):
    graph = {"nodes": [
        {"name": "a", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1]}},
        {"name": "b", "op": "Neg", "inputs": ["a"]}]}
    with client.session(graph) as s:
        np.testing.assert_array_equal(s.run("b", {"a": np.array([1.5], np.float32)}), [-1.5])


def test_large_feed_round_trips(client):
    g = client.graph()
    x = g.placeholder("float32", name="x")
    y = g.Identity(x, name="y")
    value = np.random.default_rng(1).standard_normal((1024, 1024)).astype(np.float32)  # 4 MiB
    with client.session(g) as s:
        np.testing.assert_array_equal(s.run(y, {x: value}), value)


def test_strided_fortran_and_big_endian_feeds_arrive_as_their_values(client):
    g = client.graph()
    x = g.placeholder("float32", name="x")
    i = g.placeholder("int64", name="i")
    y, j = g.Identity(x, name="y"), g.Identity(i, name="j")
    base = np.arange(60, dtype=np.float32).reshape(6, 10)
    feeds = [base[::2, 1::3],                                   # strided
             np.asfortranarray(base),                           # column-major
             base.astype(">f4")]                                # big-endian
    with client.session(g) as s:
        for value in feeds:
            np.testing.assert_array_equal(s.run(y, {x: value}), value)
        ids = np.array([[1 << 40, -3]], dtype=">i8")
        np.testing.assert_array_equal(s.run(j, {i: ids}), ids)


def test_a_bad_binary_body_is_invalid_argument_naming_the_field(server):
    # What the package never sends, as a hostile client would: a range that is
    # not the tensor's size, then an offset past the bytes.
    c = flowstate.Client(server.http, timeout=30)
    g = c.graph()
    x = g.placeholder("float32", [2], name="x")
    g.Identity(x, name="y")
    with c.session(g) as s:
        t = c.transport
        for offsets, want in (([0, 12], "feeds.x.data_offsets: spans 12 bytes, but a float32[2]"),
                              ([0, 17], "feeds.x.data_offsets[1]: expected a byte offset from 0 to 16")):
            head = json.dumps({"feeds": {"x": {"dtype": "float32", "shape": [2],
                                               "data_offsets": offsets}},
                               "fetches": ["y"], "encoding": "binary"}).encode()
            with pytest.raises(errors.InvalidArgument) as e:
                t.request("POST", "/v1/sessions/%s/run" % s.id,
                          chunks=[struct.pack("<Q", len(head)) + head, bytes(16)])
            assert want in e.value.message
        np.testing.assert_array_equal(s.run("y", {x: np.array([1, 2], np.float32)}), [1, 2])
    c.close()


def test_feed_of_the_wrong_dtype_or_shape_is_refused_naming_the_node(client):
    g = client.graph()
    x = g.placeholder("float32", [None, 2], name="x")
    y = g.Identity(x, name="y")
    with client.session(g) as s:
        with pytest.raises(errors.InvalidArgument) as e:
            s.run(y, {x: np.ones((2, 3), np.float32)})
        assert e.value.node == "x" and e.value.field == "feeds.x"
        with pytest.raises(errors.InvalidArgument) as e:
            s.run(y, {x: np.ones((1, 2), np.int64)})
        assert e.value.node == "x"
        with pytest.raises(errors.InvalidArgument) as e:
            s.run(y, {x: [[1, "a"]]})
        assert e.value.node == "x"
        with pytest.raises(errors.InvalidArgument) as e:  # by name, the client knows it too
            s.run("y", {"x": np.ones(3, np.float32)})
        assert e.value.node == "x"
        # What the server says when the client does not check: the same.
        with pytest.raises(errors.InvalidArgument) as e:
            client.transport.run_session(s.id, {"x": ("float32", np.ones(3, np.float32))},
                                         ["y"], [])
        assert e.value.node == "x"
        assert s.run(y, {x: np.ones((1, 2), np.float32)}).shape == (1, 2)  # still usable


def test_missing_feed_names_the_placeholder(client):
    g = client.graph()
    x = g.placeholder("float32", name="x")
    y = g.Neg(x, name="y")
    with client.session(g) as s:
        with pytest.raises(errors.InvalidArgument) as e:
            s.run(y)
        assert e.value.node == "x" or "'x'" in e.value.message


def test_unknown_fetch_is_a_typed_error(client):
    g = client.graph()
    g.constant(1.0, name="one")
    with client.session(g) as s:
        with pytest.raises(errors.FlowstateError) as e:
            s.run("nope")
        assert isinstance(e.value, (errors.NotFound, errors.InvalidArgument))
        assert "nope" in str(e.value)
        assert s.run("one") == 1.0  # the session still works


def test_closed_session(client):
    g = client.graph()
    g.constant(1.0, name="one")
    s = client.session(g)
    sid = s.id
    s.close()
    s.close()  # twice is fine
    with pytest.raises(errors.FailedPrecondition):
        s.run("one")
    # The server forgot it: the same id is NotFound there.
    with pytest.raises(errors.NotFound):
        client.transport.run_session(sid, {}, ["one"], [])


def test_step_deadline(client):
    g = client.graph()
    q = g.FIFOQueue(component_types=["float32"], name="q")
    d = g.QueueDequeue(q, component_types=["float32"], name="d")
    with client.session(g) as s:
        with pytest.raises(errors.DeadlineExceeded):
            s.run(d, timeout_ms=200)


def test_bad_graph_is_refused_naming_the_node(client):
    graph = {"nodes": [{"name": "bad", "op": "NoSuchOp"}]}
    with pytest.raises(errors.InvalidArgument) as e:
        client.session(graph)
    assert e.value.node == "bad"


def test_unreachable_server_is_unavailable_within_the_deadline():
    import socket
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    for url in ("http://127.0.0.1:%d" % port, "grpc://127.0.0.1:%d" % port):
        c = flowstate.Client(url, timeout=5)
        t0 = time.monotonic()
        with pytest.raises(errors.Unavailable):
            c.list_ops()
        assert time.monotonic() - t0 < 5
        c.close()


def test_wrong_scheme():
    with pytest.raises(errors.InvalidArgument):
        flowstate.Client("ftp://x:1")


def test_ctrl_c_during_a_step_cancels_it_and_leaves_the_client_usable(client):
    import os
    import signal
    import threading
    g = client.graph()
    q = g.FIFOQueue(component_types=["float32"], name="q")
    d = g.QueueDequeue(q, component_types=["float32"], name="d")  # waits: the queue is empty
    g.constant(1.0, name="one")
    enqueue = g.QueueEnqueue(q, [g.constant(np.float32(7.0))], name="enqueue")
    size = g.QueueSize(q, name="size")
    with client.session(g) as s:
        timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
        interrupted = False
        try:
            timer.start()
            s.run(d, timeout=20)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            timer.cancel()
        assert interrupted
        # The interrupted call's connection (REST) was dropped, not reused mid-response.
        assert s.run("one") == 1.0
        # The step ended on the server too: a dequeue still waiting there would take
        # the element enqueued now.
        s.run(enqueue)
        time.sleep(0.2)
        assert s.run(size) == 1
