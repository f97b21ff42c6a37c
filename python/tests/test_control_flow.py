"""while_loop and cond: the compact While and If nodes, run by the server."""

import numpy as np
import pytest

from flowstate import errors


def test_while_loop_sums(client):
    g = client.graph()
    n = g.placeholder("int32", [], name="n")
    i, total = g.while_loop(lambda i, s: g.LessEqual(i, n),
                            lambda i, s: [g.Add(i, 1), g.Add(s, i)],
                            [1, 0], name="sum")
    assert total.name == "sum:1" and total.dtype == "int32"
    doc = g.as_dict()["nodes"][-1]
    assert doc["op"] == "While" and doc["body"]["args"] == ["body_arg0", "body_arg1"]
    with client.session(g) as s:
        assert s.run(total, {n: np.int32(10)}) == 55
        assert s.run([i, total], {n: 0}) == [1, 0]


def test_nested_loop_with_a_loop_invariant_and_an_if(client):
    g = client.graph()
    x = g.placeholder("float32", [2], name="x")
    scale = g.constant(np.float32(2.0), name="scale")

    def body(k, v):
        # Doubles v (scale is a graph node: a loop invariant), negating it when k is 0.
        doubled = g.Mul(v, scale)
        flipped = g.cond(g.Less(k, 1), lambda d: g.Neg(d), lambda d: d, [doubled], name="flip")
        return [g.Add(k, 1), flipped]

    _, v = g.while_loop(lambda k, v: g.Less(k, 3), body, [0, x], name="loop")
    with client.session(g) as s:
        out = s.run(v, {x: np.array([1, -1], np.float32)})
    assert out.tolist() == [-8.0, 8.0]


def test_cond_takes_one_branch(client):
    g = client.graph()
    p = g.placeholder("bool", [], name="p")
    x = g.placeholder("float32", [None], name="x")
    y = g.cond(p, lambda v: g.Square(v), lambda v: g.Neg(v), [x], name="c")
    with client.session(g) as s:
        np.testing.assert_array_equal(s.run(y, {p: True, x: [3.0]}), [9.0])
        np.testing.assert_array_equal(s.run(y, {p: False, x: [3.0]}), [-3.0])


def test_bad_functions_are_refused(client):
    g = client.graph()
    with pytest.raises(errors.InvalidArgument, match="returns 1 tensors for 2"):
        g.while_loop(lambda a, b: g.Less(a, 3), lambda a, b: g.Add(a, 1), [0, 0])
    with pytest.raises(errors.InvalidArgument, match="int32 in then, float32 in else"):
        g.cond(True, lambda: g.constant(1), lambda: g.constant(1.0))
    # A node inside a function the server refuses is named by its full name.
    g2 = client.graph()
    x = g2.placeholder("float32", [2, 2], name="x")
    w = g2.placeholder("float32", [3, 3], name="w")
    g2.while_loop(lambda i, h: g2.Less(i, 2),
                  lambda i, h: [g2.Add(i, 1), g2.MatMul(h, w, name="mm")], [0, x], name="rnn")
    with pytest.raises(errors.InvalidArgument) as e:
        with client.session(g2):
            pass
    assert e.value.node == "rnn/body/mm"
