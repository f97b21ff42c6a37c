"""Graph.gradients over both transports: the server differentiates the client's graph,
the nodes come back into it, a session runs them (also one opened before)."""

import numpy as np
import pytest

import flowstate
from flowstate import errors


def _least_squares(client):
    g = client.graph()
    x = g.placeholder("float32", [None, 3], name="x")
    y = g.placeholder("float32", [None, 1], name="y")
    w = g.Variable([3, 1], initializer="zeros", name="w")
    b = g.Variable([1], initializer="zeros", name="b")
    err = g.Sub(g.BiasAdd(g.MatMul(x, w), b), y, name="err")
    loss = g.Mean(g.Square(err), np.array([0, 1], np.int32), name="loss")
    return g, x, y, w, b, loss


def test_gradients_match_the_analytic_ones_and_train_by_hand(client):
    g, x, y, w, b, loss = _least_squares(client)
    rng = np.random.default_rng(5)
    xv = rng.normal(size=(64, 3)).astype(np.float32)
    true_w = np.array([[1.5], [-2.0], [0.5]], np.float32)
    yv = xv @ true_w + 0.25
    with client.session(g) as s:
        s.run(g.initializer())
        # Added after the session opened: the next run extends it.
        dw, db = g.gradients(loss, [w, b])
        assert dw.name.startswith("gradients/") and dw.dtype == "float32"
        gw, gb = s.run([dw, db], {x: xv, y: yv})
        residual = xv @ np.zeros((3, 1), np.float32) - yv
        np.testing.assert_allclose(gw, 2 * xv.T @ residual / 64, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(gb, [2 * residual.mean()], rtol=1e-5)
        step = [g.AssignSub(w, g.Mul(dw, 0.1)), g.AssignSub(b, g.Mul(db, 0.1))]
        for _ in range(200):
            s.run(step, {x: xv, y: yv})
        np.testing.assert_allclose(s.run(w), true_w, atol=1e-3)
        np.testing.assert_allclose(s.run(b), [0.25], atol=1e-3)


def test_a_second_call_gets_a_prefix_of_its_own_and_unused_xs_none(client):
    g, x, y, w, b, loss = _least_squares(client)
    unused = g.Variable([2], initializer="ones", name="unused")
    dw = g.gradients(loss, w)
    db, du = g.gradients(loss, [b, unused])
    assert dw.name.startswith("gradients/") and db.name.startswith("gradients_1/")
    assert du is None


def test_a_gather_gives_rows(client):
    g = client.graph()
    table = g.Variable([5, 2], initializer="ones", name="table")
    ids = g.placeholder("int32", [None], name="ids")
    rows = g.Gather(table, ids, name="rows")
    loss = g.Sum(g.Mul(rows, 3.0), np.array([0, 1], np.int32), name="loss")
    d = g.gradients(loss, table)
    assert isinstance(d, flowstate.IndexedSlices)
    with client.session(g) as s:
        s.run(g.initializer())
        idx, vals, shape = s.run([d.indices, d.values, d.dense_shape],
                                 {ids: np.array([4, 1, 4], np.int32)})
    assert idx.tolist() == [4, 1, 4] and shape.tolist() == [5, 2]
    np.testing.assert_array_equal(vals, np.full((3, 2), 3.0, np.float32))


def test_bad_requests_name_the_field_or_node(client):
    g, x, y, w, b, loss = _least_squares(client)
    before = len(g)
    with pytest.raises(errors.NotFound, match="y: the graph has no node 'nope'"):
        g.gradients("nope", [w])
    with pytest.raises(errors.NotFound, match=r"xs\[1\]: the graph has no node 'ghost'") as e:
        g.gradients(loss, [w, "ghost"])
    assert e.value.node == "ghost"
    cast = g.Cast(loss, DstT="int32", name="int_loss")
    with pytest.raises(errors.InvalidArgument, match="int_loss"):
        g.gradients(cast, [w])
    assert len(g) == before + 1  # only the Cast: nothing of the refused calls
    other = client.graph()
    with pytest.raises(errors.InvalidArgument, match="another graph"):
        g.gradients(loss, [other.placeholder("float32", [1], name="p")])


def test_through_a_loop_says_to_use_a_job(client):
    g = client.graph()
    v = g.Variable([], initializer="ones", name="v")
    _, acc = g.while_loop(lambda i, a: g.Less(i, 3), lambda i, a: [g.Add(i, 1), g.Mul(a, v)],
                          [0, 1.0], name="pow")
    with pytest.raises(errors.Unimplemented, match="loop"):
        g.gradients(acc, [v])


def test_a_graph_without_a_client_says_so():
    g = flowstate.Graph()
    with pytest.raises(errors.FailedPrecondition, match="client.graph"):
        g.gradients("loss", ["w"])
