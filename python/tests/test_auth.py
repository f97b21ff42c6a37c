"""Bearer tokens over both transports: refused without, accepted with (watch included)."""

import pytest

import flowstate
from conftest import Server, binary
from flowstate import errors


@pytest.fixture(scope="module")
def token_server(tmp_path_factory):
    s = Server(binary(), str(tmp_path_factory.mktemp("auth")),
               extra_args=["--set", "auth.tokens=s3cret"])
    yield s
    s.stop()


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_token(token_server, transport, monkeypatch):
    monkeypatch.delenv("FLOWSTATE_TOKEN", raising=False)
    url = getattr(token_server, transport)
    with flowstate.Client(url) as c, pytest.raises(errors.Unauthenticated) as e:
        c.list_ops()
    assert "s3cret" not in str(e.value)
    with flowstate.Client(url, token="wrong") as c, pytest.raises(errors.Unauthenticated):
        c.jobs.list()
    c = flowstate.Client(url, token="s3cret")
    g = c.graph()
    g.constant(2.0, name="two")
    with c.session(g) as s:
        assert s.run("two") == 2.0
    doc = {"name": "auth", "graph": {"nodes": [
        {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1, 2]}},
        {"name": "y", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1]}},
        {"name": "w", "op": "Variable",
         "attrs": {"dtype": "float32", "shape": [2], "init": "zeros"}},
        {"name": "p", "op": "Mul", "inputs": ["x", "w"]},
        {"name": "axes", "op": "Const", "attrs": {"dtype": "int32", "value": []}},
        {"name": "loss", "op": "Mean", "inputs": ["p", "axes"]}]},
        "loss": "loss", "optimizer": {"type": "sgd", "learning_rate": 0.1},
        "input": {"format": "csv", "files": {"x": "points.csv", "y": "points.csv"},
                  "columns": {"x": ["a", "b"], "y": ["target"]}, "batch_size": 16, "epochs": 1}}
    job = c.jobs.submit(doc)
    events = list(job.watch(timeout=30))  # SSE / Watch with the token
    assert events[-1].job["state"] == "SUCCEEDED"
    c.close()
    monkeypatch.setenv("FLOWSTATE_TOKEN", "s3cret")  # the default token
    with flowstate.Client(url) as c:
        assert c.jobs.get(job.id).state == "SUCCEEDED"
