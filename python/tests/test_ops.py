"""The op functions against the server's registry: one per op, checked arguments."""

import inspect

import numpy as np
import pytest

import flowstate
from flowstate import errors


def test_every_registered_op_has_a_function(client):
    registry = client.list_ops()
    names = {op["name"] for op in registry}
    lib = flowstate.OpLibrary(registry)
    assert not lib.unsupported, "ops without a Python function: %s" % lib.unsupported
    missing = sorted(names - set(lib.names()))
    assert not missing, "registered ops without a Python function: %s" % missing
    assert set(lib.names()) == names
    for op in registry:
        fn = getattr(lib, op["name"])
        params = inspect.signature(fn).parameters
        for arg in op["inputs"]:
            assert arg["name"] in params or arg["name"] + "_" in params, (op["name"], arg["name"])
        for attr in op["attrs"]:
            if attr["name"].isidentifier():
                assert attr["name"] in params, (op["name"], attr["name"])
        assert op["doc"].split("\n")[0] in (fn.__doc__ or "")


def test_both_transports_give_the_same_registry(rest, grpc_client):
    a = {op["name"]: op for op in rest.list_ops()}
    b = {op["name"]: op for op in grpc_client.list_ops()}
    assert set(a) == set(b)
    for name in a:
        for key in ("inputs", "outputs", "stateful", "devices", "doc"):
            assert a[name][key] == b[name][key], (name, key)
        assert [x.get("default") for x in a[name]["attrs"]] == \
               [x.get("default") for x in b[name]["attrs"]], name


def test_snake_case_aliases(client):
    ops = client.ops
    assert ops.mat_mul is ops.MatMul
    assert ops.bias_add is ops.BiasAdd


def test_types_are_inferred_and_python_values_become_consts(client):
    g = client.graph()
    x = g.placeholder("float64", [None, 2], name="x")
    y = g.Mul(x, 3)          # 3 becomes a float64 Const
    assert y.dtype == "float64"
    const = g.node(y.node.inputs[1])
    assert const.op == "Const" and const.attrs["dtype"] == "float64"
    assert "T" in y.node.attrs and y.node.attrs["T"] == "float64"


def test_name_scopes_and_unique_names(client):
    g = client.graph()
    with g.name_scope("layer"):
        a = g.constant(1.0, name="c")
        b = g.constant(2.0, name="c")
        with g.name_scope("inner"):
            d = g.Add(a, b)
    assert (a.name, b.name, d.name) == ("layer/c", "layer/c_1", "layer/inner/Add")


def test_unknown_attr_names_the_node_and_the_attr(client):
    g = client.graph()
    x = g.placeholder("float32", name="x")
    with pytest.raises(errors.InvalidArgument) as e:
        g.Relu(x, name="r", bogus=1)
    assert e.value.node == "r" and e.value.field == "attrs.bogus"
    assert "bogus" in e.value.message


def test_attr_of_the_wrong_kind_and_disallowed_dtype(client):
    g = client.graph()
    with pytest.raises(errors.InvalidArgument) as e:
        g.Placeholder(dtype="float32", shape="wide", name="p")
    assert e.value.field == "attrs.shape" and e.value.node == "p"
    with pytest.raises(errors.InvalidArgument) as e:
        g.Placeholder(dtype="complex64", name="q")
    assert e.value.field == "attrs.dtype"


def test_missing_required_attr_and_input(client):
    g = client.graph()
    with pytest.raises(errors.InvalidArgument) as e:
        g.Placeholder(name="p")
    assert e.value.field == "attrs.dtype"
    with pytest.raises(errors.InvalidArgument, match="missing input"):
        g.MatMul(g.constant([[1.0]]), name="m")


def test_mismatched_input_dtypes(client):
    g = client.graph()
    a = g.placeholder("float32", name="a")
    b = g.placeholder("int32", name="b")
    with pytest.raises(errors.InvalidArgument) as e:
        g.Add(a, b, name="sum")
    assert e.value.node == "sum" and "int32" in e.value.message


def test_list_inputs_infer_their_count(client):
    g = client.graph()
    parts = [g.constant(np.ones(2, np.float32)) for _ in range(3)]
    s = g.AddN(parts, name="s")
    assert s.node.attrs["N"] == 3 and s.dtype == "float32"


def test_graph_json_round_trips_through_the_server(client):
    g = client.graph()
    x = g.placeholder("float32", [None, 3], name="x")
    w = g.Variable([3, 2], initializer="ones", name="w")
    g.MatMul(x, w, name="y")
    doc = g.as_dict(initializers=False)
    assert [n["name"] for n in doc["nodes"]] == ["x", "w", "y"]
    assert doc["nodes"][1]["attrs"] == {"shape": [3, 2], "dtype": "float32", "init": "ones"}
    assert len(g.as_dict()["nodes"]) > 3  # with the initializer's nodes
    with client.session(g) as s:  # the server takes both forms
        s.extend()


def test_gradients_of_nothing_name_the_field(client):
    g = client.graph()
    with pytest.raises(errors.InvalidArgument, match="xs"):
        g.gradients(g.constant(1.0), [])
    assert len(g) == 1


def test_api_reference_lists_every_op(server, tmp_path):
    import os
    import subprocess
    import sys
    tool = os.path.join(os.path.dirname(__file__), "..", "tools", "api_reference.py")
    out = tmp_path / "api.md"
    subprocess.run([sys.executable, tool, "--server", server.http, "--out", str(out)],
                   check=True, timeout=60)
    text = out.read_text()
    names = [op["name"] for op in flowstate.Client(server.http).list_ops()]
    missing = [n for n in names if "### `%s(" % n not in text]
    assert not missing, missing
    assert "### `Session(" in text and "### `layers.Dense(" in text
