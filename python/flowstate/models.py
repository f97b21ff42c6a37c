"""``client.models``: ONNX models uploaded for jobs to train (README "ONNX models").

    m = client.models.upload("cnn.onnx", name="cnn")     # checked by the server's importer
    job = client.jobs.submit({..., "model": {"onnx": m["model_id"], "inputs": {...},
                                             "output": "logits", "labels": "y", ...}})
    job.wait()
    onnx_bytes = job.export_onnx("trained.onnx")          # the trained model, as ONNX

A model is the dict REST answers (``model_id``, ``name``, ``bytes``,
``opset``, ``producer``, ``inputs``, ``outputs`` as [{"name", "dtype",
"shape"}] with -1 for a dynamic dimension, ``parameters``), the same over gRPC.
"""

import os


def _model(d):
    tensors = lambda ts: [{"name": t["name"], "dtype": t["dtype"],  # noqa: E731
                           "shape": (list(t["shape"]) if t.get("rank_known", t["shape"] is not None)
                                     else None)} for t in ts]
    return {"model_id": d["model_id"], "name": d["name"], "bytes": int(d["bytes"]),
            "opset": int(d["opset"]), "producer": d["producer"],
            "inputs": tensors(d["inputs"]), "outputs": tensors(d["outputs"]),
            "parameters": int(d["parameters"])}


class Models:
    """client.models: upload, list, get, delete."""

    def __init__(self, client):
        self._client = client

    @property
    def _t(self):
        return self._client.transport

    def upload(self, model, name=""):
        """Uploads an .onnx file (a path, or its bytes); returns the model's dict."""
        if isinstance(model, (str, os.PathLike)):
            with open(model, "rb") as f:
                model = f.read()
        t = self._t
        if t.kind == "grpc":
            return _model(t.msg_dict(t.call(t.models.Upload, t.pb.UploadModelRequest(
                data=bytes(model), name=name))))
        return _model(t.request("POST", "/v1/models", body=bytes(model),
                                query={"name": name} if name else None))

    def list(self):
        t = self._t
        if t.kind == "grpc":
            return [_model(t.msg_dict(m)) for m in
                    t.call(t.models.List, t.pb.ListModelsRequest()).models]
        return [_model(m) for m in t.request("GET", "/v1/models")["models"]]

    def get(self, model_id):
        t = self._t
        if t.kind == "grpc":
            return _model(t.msg_dict(t.call(t.models.Get, t.pb.GetModelRequest(model_id=model_id))))
        return _model(t.request("GET", "/v1/models/" + t._q(model_id)))

    def delete(self, model_id):
        t = self._t
        if t.kind == "grpc":
            t.call(t.models.Delete, t.pb.DeleteModelRequest(model_id=model_id))
        else:
            t.request("DELETE", "/v1/models/" + t._q(model_id))


def export_onnx(transport, job_id, path=None):
    """A job's trained model as .onnx bytes (written to `path` when given)."""
    t = transport
    if t.kind == "grpc":
        data = t.call(t.jobs.ExportOnnx, t.pb.ExportOnnxRequest(job_id=job_id)).data
    else:
        _, data = t.request("GET", "/v1/jobs/%s/model.onnx" % t._q(job_id), raw=True)
    if path is not None:
        with open(path, "wb") as f:
            f.write(data)
    return data
