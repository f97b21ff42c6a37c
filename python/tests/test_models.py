"""client.models and job.export_onnx over both transports: an ONNX model (made with
the onnx package) uploaded, trained on uploaded numpy arrays, exported trained."""

import numpy as np
import pytest

from flowstate import errors

onnx = pytest.importorskip("onnx", reason="python3-onnx builds the test's model")
from onnx import helper, numpy_helper, TensorProto  # noqa: E402


def _linear_model():
    """logits = x @ W + B: x [N, 2] float32, 3 classes."""
    w = numpy_helper.from_array(np.zeros((2, 3), np.float32), "W")
    b = numpy_helper.from_array(np.zeros(3, np.float32), "B")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Add", ["xw", "B"],
                                                                          ["logits"])],
        "linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="flowstate-test")
    onnx.checker.check_model(model)
    return model.SerializeToString()


def test_upload_train_export_delete(client):
    m = client.models.upload(_linear_model(), name="linear")
    assert m["name"] == "linear" and m["opset"] == 13 and m["parameters"] == 9
    assert m["inputs"] == [{"name": "x", "dtype": "float32", "shape": [-1, 2]}]
    assert client.models.get(m["model_id"]) == m
    assert m["model_id"] in [x["model_id"] for x in client.models.list()]

    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (256, 2)).astype(np.float32)
    y = np.where(x[:, 0] < x[:, 1], 0, np.where(x[:, 0] + x[:, 1] < 0, 1, 2)).astype(np.int64)
    ds = client.datasets.upload({"x": x, "y": y})
    job = client.jobs.submit({
        "name": "onnx-linear",
        "model": {"onnx": m["model_id"], "inputs": {"x": "x"}, "output": "logits",
                  "labels": "y", "loss": "softmax_cross_entropy"},
        "optimizer": {"type": "sgd", "learning_rate": 0.5},
        "input": {"format": "npy", "files": ds.files(), "batch_size": 32, "epochs": 5}})
    job.wait(timeout=60)
    assert job.state == "SUCCEEDED", job.info
    # The model cannot go while a job names it.
    with pytest.raises(errors.FailedPrecondition, match=job.id):
        client.models.delete(m["model_id"])
    trained = onnx.load_from_string(job.export_onnx())
    w = {t.name: numpy_helper.to_array(t) for t in trained.graph.initializer}["W"]
    assert np.abs(w).max() > 0.1  # trained from zeros
    job.delete()
    client.datasets.delete(ds)
    client.models.delete(m["model_id"])
    with pytest.raises(errors.NotFound):
        client.models.get(m["model_id"])


def test_a_bad_model_is_refused_storing_nothing(client):
    before = client.models.list()
    with pytest.raises(errors.InvalidArgument):
        client.models.upload(b"not an onnx file")
    assert client.models.list() == before
