"""client.datasets: numpy's own .npy/.npz files uploaded in chunks, checked by the
server, read by a job's "npy" input; bad files and offsets refused, nothing kept."""

import os

import numpy as np
import pytest

from flowstate import errors


def _job(client, files, **extra):
    """Least squares of x -> y without a bias (a tiny job that reads the dataset)."""
    g = client.graph()
    x = g.placeholder("float32", [None, 2], name="x")
    y = g.placeholder("float32", [None], name="y")
    w = g.Variable([2, 1], initializer="zeros", name="w")
    pred = g.Reshape(g.MatMul(x, w), np.array([-1], np.int32), name="pred")
    g.Mean(g.SquaredDifference(pred, y), np.array([], np.int32), name="loss")
    spec = {"name": "npy-input", "graph": g, "loss": "loss",
            "optimizer": {"type": "sgd", "learning_rate": 0.1},
            "input": {"format": "npy", "files": files, "batch_size": 16, "epochs": 20}}
    spec.update(extra)
    return spec


def test_numpy_files_upload_in_chunks_and_train(client, server, tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 2)).astype(np.float32)
    y = (x @ np.array([2.0, -3.0], np.float32)).astype(np.float32)
    # numpy.savez_compressed: deflated members; 1000-byte chunks: several appends.
    np.savez_compressed(tmp_path / "d.npz", x=x, y=y)
    ds = client.datasets.upload(str(tmp_path / "d.npz"), chunk_bytes=1000)
    assert ds.complete and ds.path == "uploads/%s.npz" % ds.id
    assert ds.bytes == os.path.getsize(tmp_path / "d.npz")
    assert sorted((a["name"], a["dtype"], tuple(a["shape"])) for a in ds.arrays) == [
        ("x", "float32", (256, 2)), ("y", "float32", (256,))]
    assert os.path.exists(os.path.join(server.data_root, ds.path))
    job = client.jobs.submit(_job(client, ds.files()))
    job.wait(timeout=60)
    assert job.state == "SUCCEEDED", job.info
    w = job.export()["w"].ravel()
    np.testing.assert_allclose(w, [2.0, -3.0], atol=1e-2)
    assert client.datasets.get(ds.id).id == ds.id
    assert ds.id in [d.id for d in client.datasets.list()]
    job.delete()
    client.datasets.delete(ds)
    with pytest.raises(errors.NotFound, match=ds.id):
        client.datasets.get(ds.id)


def test_one_array_is_an_npy_and_every_dtype_arrives(client):
    for a in (np.arange(6, dtype=np.int64).reshape(3, 2), np.array([True, False]),
              np.arange(4, dtype=np.uint8), np.ones((2, 2), np.float16)):
        ds = client.datasets.upload(a)
        assert ds.path.endswith(".npy")
        assert ds.arrays == [{"name": "", "dtype": {"int64": "int64", "bool": "bool",
                                                     "uint8": "uint8",
                                                     "float16": "float16"}[str(a.dtype)],
                              "shape": list(a.shape)}]
        client.datasets.delete(ds)


def test_bad_files_are_refused_and_nothing_is_kept(client, tmp_path):
    before = {d.id for d in client.datasets.list()}
    (tmp_path / "t.csv").write_text("a,b\n1,2\n")
    with pytest.raises(errors.InvalidArgument, match="not an .npy or .npz file"):
        client.datasets.upload(str(tmp_path / "t.csv"))
    np.save(tmp_path / "big.npy", np.arange(4, dtype=">f4"))
    with pytest.raises(errors.InvalidArgument, match="big-endian"):
        client.datasets.upload(str(tmp_path / "big.npy"))
    np.save(tmp_path / "c.npy", np.array([1 + 2j]))
    with pytest.raises(errors.InvalidArgument, match="'<c16'"):
        client.datasets.upload(str(tmp_path / "c.npy"))
    # Cut short in the middle of a chunked upload: the partial file is removed too.
    np.save(tmp_path / "cut.npy", np.zeros(1000, np.float32))
    data = (tmp_path / "cut.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(data[:-8])
    with pytest.raises(errors.InvalidArgument, match="truncated"):
        client.datasets.upload(str(tmp_path / "cut.npy"), chunk_bytes=1024)
    with pytest.raises(errors.InvalidArgument, match="array name"):
        client.datasets.upload({"a/b": np.zeros(2)})
    assert {d.id for d in client.datasets.list()} == before


def test_offsets_out_of_order_are_refused_over_http(rest, server):
    t = rest.transport
    first = t.request("POST", "/v1/datasets", body=b"\x93NUMPY", query={"final": "false"})
    assert first["complete"] is False and first["bytes"] == 6
    path = "/v1/datasets/%s/append" % first["dataset_id"]
    with pytest.raises(errors.FailedPrecondition, match="starts at offset 6") as e:
        t.request("POST", path, body=b"xx", query={"offset": "0"})
    assert e.value.http_status == 409
    with pytest.raises(errors.InvalidArgument, match="offset"):
        t.request("POST", path, body=b"xx", query={"offset": "-1"})
    with pytest.raises(errors.NotFound):
        t.request("POST", "/v1/datasets/ds-../../etc/append", body=b"xx", query={"offset": "6"})
    rest.datasets.delete(first["dataset_id"])
    assert not os.path.exists(os.path.join(server.data_root, "uploads",
                                           first["dataset_id"] + ".partial"))


def test_a_job_names_a_missing_array(client):
    ds = client.datasets.upload({"x": np.zeros((4, 2), np.float32)})
    with pytest.raises(errors.FlowstateError, match="no array 'y'"):
        job = client.jobs.submit(_job(client, ds.files("x", "y"), max_steps=1))
        job.wait(timeout=30)
        raise errors.from_job(job.refresh().info)
    client.datasets.delete(ds)
