"""Jobs over both transports: submit, watch, get, list, predict, export, lifecycle, errors."""

import json
import time

import numpy as np
import pytest

from flowstate import errors

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def regression_graph(client):
    """y = 2a - 3b + 0.5 as a Graph (the data: points.csv of the fixture's data root)."""
    g = client.graph()
    x = g.placeholder("float32", [None, 2], name="x")
    y = g.placeholder("float32", [None], name="y")
    with g.name_scope("dense"):
        w = g.Variable([2, 1], initializer="glorot_uniform", name="w")
        b = g.Variable([1], initializer="zeros", name="b")
        pb = g.BiasAdd(g.MatMul(x, w), b)
    pred = g.Reshape(pb, np.array([-1], np.int32), name="pred")
    sq = g.SquaredDifference(pred, y, name="sq")
    g.Mean(sq, np.array([], np.int32), name="loss")
    return g


def job_doc(graph, epochs=20, **extra):
    doc = {
        "name": "py-regression",
        "graph": graph,
        "loss": "loss",
        "optimizer": {"type": "momentum", "learning_rate": 0.1, "momentum": 0.9},
        "input": {"format": "csv", "files": {"x": "points.csv", "y": "points.csv"},
                  "columns": {"x": ["a", "b"], "y": ["target"]}, "batch_size": 16,
                  "shuffle": True, "epochs": epochs},
        "eval": {"files": {"x": "points.csv", "y": "points.csv"},
                 "columns": {"x": ["a", "b"], "y": ["target"]}, "metrics": ["loss"]},
        "checkpoint": {"every_steps": 50, "keep": 2},
        "seed": 3,
    }
    doc.update(extra)
    return doc


def wait_for(job, states, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job.refresh()
        if job.state in states:
            return job
        time.sleep(0.05)
    raise AssertionError("job %s still %s after %s s (wanted %s)" % (job.id, job.state, timeout,
                                                                    states))


def test_submit_watch_predict_export_delete(client):
    job = client.jobs.submit(job_doc(regression_graph(client)))
    assert job.id and job.state in ("QUEUED", "RUNNING")
    events = list(job.watch(history=True, timeout=60))  # with the events before it opened
    assert events[0].kind == "state"
    assert events[-1].job["state"] == "SUCCEEDED", events[-1].job
    assert any(e.kind == "eval" for e in events)
    job.refresh()
    assert job.state == "SUCCEEDED" and job.step == job.total_steps > 0
    assert job.metrics["loss"] < 0.01
    assert job.id in [j.id for j in client.jobs.list()]

    x = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    pred = job.predict({"x": x}, "pred")
    assert pred.dtype == np.float32 and pred.shape == (2,)
    np.testing.assert_allclose(pred, [2.5, -2.5], atol=0.1)
    # Python numbers take the placeholder's dtype (whole numbers for a float32 x).
    np.testing.assert_allclose(job.predict({"x": [[1, 0], [0, 1]]}, ["pred"])["pred"], pred)
    assert client.jobs.spec(job)["name"] == "py-regression"

    history = job.history()
    assert history["steps"] and history["evals"]
    assert job.checkpoints()
    weights = job.export()
    assert weights["dense/w"].shape == (2, 1)
    np.testing.assert_allclose(weights["dense/w"].ravel(), [2, -3], atol=0.1)

    job.delete()
    with pytest.raises(errors.NotFound):
        client.jobs.get(job.id)


def test_submit_a_job_file(client, tmp_path):
    doc = job_doc(regression_graph(client).as_dict(initializers=False), epochs=1)
    path = tmp_path / "job.json"
    path.write_text(json.dumps(doc))
    job = client.jobs.submit(str(path), max_steps=5)
    job.wait(timeout=60)
    assert job.state == "SUCCEEDED" and job.step == 5
    job.delete()


def test_pause_resume_cancel(client):
    job = client.jobs.submit(job_doc(regression_graph(client), epochs=100000))
    wait_for(job, ("RUNNING",))
    job.pause()
    wait_for(job, ("PAUSED",))
    with pytest.raises(errors.FailedPrecondition):
        job.delete()  # not finished
    step = job.refresh().step
    time.sleep(0.2)
    assert job.refresh().step == step  # paused means no steps
    job.resume()
    wait_for(job, ("RUNNING",))
    job.cancel()
    events = list(job.watch(timeout=30))
    assert events[-1].job["state"] == "CANCELLED"
    job.delete()


def test_bad_jobs_are_refused_naming_the_field(client):
    g = regression_graph(client)
    bad = job_doc(g)
    bad["optimizer"]["learning_rate"] = -1
    with pytest.raises(errors.InvalidArgument) as e:
        client.jobs.submit(bad)
    assert e.value.field == "optimizer.learning_rate"
    with pytest.raises(errors.PermissionDenied) as e:
        client.jobs.submit(job_doc(g, input={"format": "csv", "files": {"x": "../x.csv", "y": "y"},
                                            "batch_size": 1}))
    assert "input.files" in e.value.message
    with pytest.raises(errors.NotFound):
        client.jobs.submit("/nonexistent/job.json")
    with pytest.raises(errors.NotFound):
        client.jobs.get("job-does-not-exist")
    with pytest.raises(errors.NotFound):
        list(client.jobs.watch("job-does-not-exist", timeout=10))
