"""``client.datasets``: NumPy arrays uploaded for jobs to train on.

    ds = client.datasets.upload({"x": images, "y": labels})   # or a .npy/.npz path
    job = client.jobs.submit({..., "input": {"format": "npy",
                                             "files": {"x": ds.path, "y": ds.path}}})

The server keeps an upload beneath its data root (``uploads/ds-....npz``)
and checks the whole file before any job may read it. Uploads go in chunks
(at most ``chunk_bytes`` each, below the server's request limit), so an
array larger than one request still arrives, and the file is written to a
temporary file first rather than held in memory twice.
"""

import os
import tempfile

import numpy as np

from . import errors

CHUNK_BYTES = 16 << 20


class Dataset:
    """An uploaded dataset: ``id``, ``path`` (what a job's input.files names),
    ``bytes``, ``complete`` and ``arrays`` ([{"name", "dtype", "shape"}])."""

    def __init__(self, info):
        self.info = info
        self.id = info["dataset_id"]
        self.path = info["path"]
        self.bytes = int(info["bytes"])
        self.complete = bool(info["complete"])
        self.arrays = [{"name": a["name"], "dtype": a["dtype"], "shape": [int(d) for d in a["shape"]]}
                       for a in info.get("arrays", [])]

    def __repr__(self):
        return "Dataset(%s, %s, %d bytes%s)" % (self.id, self.path, self.bytes,
                                                "" if self.complete else ", partial")

    def files(self, *names):
        """{name: path} for a job's input.files: the arrays named, or all of them."""
        names = names or [a["name"] for a in self.arrays]
        return {n: self.path for n in names}


class _Rest:
    def __init__(self, t):
        self.t = t

    def upload(self, dataset_id, offset, data, final):
        query = {"final": "true" if final else "false"}
        if not dataset_id:
            return self.t.request("POST", "/v1/datasets", body=bytes(data), query=query)
        query["offset"] = str(offset)
        return self.t.request("POST", "/v1/datasets/%s/append" % self.t._q(dataset_id),
                              body=bytes(data), query=query)

    def list(self):
        return self.t.request("GET", "/v1/datasets")["datasets"]

    def get(self, dataset_id):
        return self.t.request("GET", "/v1/datasets/" + self.t._q(dataset_id))

    def delete(self, dataset_id):
        self.t.request("DELETE", "/v1/datasets/" + self.t._q(dataset_id))


class _Grpc:
    def __init__(self, t):
        from ._gen import flowstate_pb2_grpc
        from .messages import _msg_dict
        self.t, self.pb, self._dict = t, t.pb, _msg_dict
        self.stub = flowstate_pb2_grpc.DatasetsStub(t.channel)

    def upload(self, dataset_id, offset, data, final):
        return self._dict(self.t.call(self.stub.Upload, self.pb.UploadDatasetRequest(
            dataset_id=dataset_id or "", offset=offset, data=bytes(data), final=final)))

    def list(self):
        r = self.t.call(self.stub.List, self.pb.ListDatasetsRequest())
        return [self._dict(d) for d in r.datasets]

    def get(self, dataset_id):
        return self._dict(self.t.call(self.stub.Get, self.pb.GetDatasetRequest(dataset_id=dataset_id)))

    def delete(self, dataset_id):
        self.t.call(self.stub.Delete, self.pb.DeleteDatasetRequest(dataset_id=dataset_id))


class Datasets:
    """client.datasets: upload, list, get, delete."""

    def __init__(self, client):
        self._client = client
        self._calls = None

    @property
    def _c(self):
        if self._calls is None:
            t = self._client.transport
            self._calls = _Grpc(t) if t.kind == "grpc" else _Rest(t)
        return self._calls

    def upload(self, arrays, chunk_bytes=CHUNK_BYTES):
        """Uploads a dict of arrays (as an .npz, one member per key), one array
        (an .npy), or the path of an .npy/.npz file; returns the Dataset."""
        if isinstance(arrays, (str, os.PathLike)):
            with open(arrays, "rb") as f:
                return self._send(f, chunk_bytes)
        with tempfile.TemporaryFile() as f:
            if isinstance(arrays, dict):
                checked = {}
                for k, v in arrays.items():
                    if not isinstance(k, str) or not k or "/" in k:
                        raise errors.InvalidArgument("array name %r: expected a plain name" % (k,),
                                                     field=str(k))
                    checked[k] = np.ascontiguousarray(v)
                np.savez(f, **checked)
            else:
                np.save(f, np.ascontiguousarray(arrays))
            f.seek(0)
            return self._send(f, chunk_bytes)

    def _send(self, f, chunk_bytes):
        if chunk_bytes <= 0:
            raise errors.InvalidArgument("chunk_bytes must be > 0", field="chunk_bytes")
        chunk = f.read(chunk_bytes)
        dataset_id, offset = "", 0
        try:
            while True:
                following = f.read(chunk_bytes)
                info = self._c.upload(dataset_id, offset, chunk, final=not following)
                dataset_id, offset = info["dataset_id"], offset + len(chunk)
                if not following:
                    return Dataset(info)
                chunk = following
        except BaseException:
            # A chunk refused (or Ctrl-C): the partial upload is not left behind.
            if dataset_id:
                try:
                    self._c.delete(dataset_id)
                except errors.FlowstateError:
                    pass
            raise

    def list(self):
        return [Dataset(d) for d in self._c.list()]

    def get(self, dataset):
        return Dataset(self._c.get(getattr(dataset, "id", dataset)))

    def delete(self, dataset):
        self._c.delete(getattr(dataset, "id", dataset))
