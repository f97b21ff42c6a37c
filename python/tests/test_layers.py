"""flowstate.layers and Sequential: graphs a session runs, and fit as a job."""

import numpy as np
import pytest

import flowstate
from flowstate import errors, layers


def test_dense_flatten_in_a_session(client):
    g = client.graph()
    x = g.placeholder("uint8", [None, 2, 3], name="x")
    h = layers.Rescale(1 / 255.0)(x)
    h = layers.Flatten()(h)
    dense = layers.Dense(4, activation="relu", kernel_initializer="ones")
    y = dense(h)
    y2 = layers.Dense(4)(y)
    assert h.shape == (None, 6) and y.shape == (None, 4)
    assert [v.name for v in dense.variables] == ["dense/w", "dense/b"]
    assert y2.node.name.startswith("dense_1/")
    with client.session(g) as s:
        s.run(g.initializer())
        image = np.full((1, 2, 3), 255, np.uint8)
        np.testing.assert_allclose(s.run(y, {x: image}), np.full((1, 4), 6.0), rtol=1e-6)
        assert s.run(y2, {x: image}).shape == (1, 4)


def test_dense_needs_a_known_feature_count(client):
    g = client.graph()
    x = g.placeholder("float32", None, name="x")
    with pytest.raises(errors.InvalidArgument, match="Flatten"):
        layers.Dense(3)(x)


def test_sequential_fit_evaluate_predict(client, tmp_path):
    model = flowstate.Sequential(client, [layers.Dense(32, activation="relu"), layers.Dense(3)],
                                 input_shape=(2,), label_dtype="float32", name="py-classes")
    model.compile(optimizer="adam", learning_rate=0.02, metrics=["accuracy", "loss"])
    files = {"x": "classes.csv", "y": "classes.csv"}
    columns = {"x": ["a", "b"], "y": ["label"]}
    history = model.fit(files=files, columns=columns, validation_files=files, epochs=15,
                        batch_size=32, verbose=0, timeout=60)
    assert len(history["accuracy"]) == 15
    assert model.evaluate()["accuracy"] > 0.9
    pred = model.predict(np.array([[-0.5, 0.5], [0.5, -0.9], [0.9, 0.2]], np.float32))
    assert pred.dtype == np.int64 and pred.tolist() == [0, 1, 2]
    model.save(tmp_path / "model.npz")
    assert np.load(tmp_path / "model.npz")["dense/w"].shape == (2, 32)
    model.job.delete()


def _classes(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, 2)).astype(np.float64)  # fit casts to the model's float32
    y = np.where(x[:, 0] < x[:, 1], 0, np.where(x[:, 0] + x[:, 1] < 0, 1, 2))  # int64
    return x, y


def test_fit_with_numpy_arrays_trains_and_leaves_no_upload(client):
    model = flowstate.Sequential(client, [layers.Dense(32, activation="relu"), layers.Dense(3)],
                                 input_shape=(2,), name="py-arrays")
    model.compile(optimizer="adam", learning_rate=0.02, metrics=["accuracy"])
    before = {d.id for d in client.datasets.list()}
    history = model.fit(*_classes(512, 1), validation_data=_classes(256, 2), epochs=15,
                        batch_size=32, verbose=0, timeout=60)
    assert len(history["accuracy"]) == 15
    assert history["accuracy"][-1] > 0.9
    spec = client.jobs.spec(model.job)
    assert spec["input"]["format"] == "npy"
    assert spec["input"]["files"]["x"].startswith("uploads/ds-")
    assert {d.id for d in client.datasets.list()} == before  # deleted once the job ended
    model.job.delete()


def test_fit_with_arrays_refuses_what_does_not_fit_the_model(client):
    model = flowstate.Sequential(client, [layers.Dense(3)], input_shape=(2,))
    model.compile()
    before = {d.id for d in client.datasets.list()}
    with pytest.raises(errors.InvalidArgument, match=r"x has shape \(4, 3\)") as e:
        model.fit(np.zeros((4, 3)), np.zeros(4))
    assert e.value.field == "x"
    with pytest.raises(errors.InvalidArgument, match="one label per example"):
        model.fit(np.zeros((4, 2)), np.zeros(5))
    with pytest.raises(errors.InvalidArgument, match="labels run -1..2"):
        model.fit(np.zeros((4, 2)), np.array([0, 1, 2, -1]))
    with pytest.raises(errors.InvalidArgument, match="whole class numbers"):
        model.fit(np.zeros((4, 2)), np.array([0, 1.5, 2, 1]))
    with pytest.raises(errors.InvalidArgument, match="needs both"):
        model.fit(np.zeros((4, 2)))
    assert {d.id for d in client.datasets.list()} == before


def test_conv_pool_batchnorm_embedding_in_a_session(client):
    g = client.graph()
    x = g.placeholder("float32", [None, 6, 6, 1], name="x")
    h = layers.Conv2D(4, 3, padding="same", activation="relu", kernel_initializer="ones")(x)
    assert h.shape == (None, 6, 6, 4)
    h = layers.MaxPool2D(2)(h)
    assert h.shape == (None, 3, 3, 4)
    h = layers.AveragePool2D(3, padding="valid")(h)
    assert h.shape == (None, 1, 1, 4)
    bn = layers.BatchNormalization()
    h = bn(layers.Flatten()(h))
    out = layers.Dense(2)(h)
    ids = g.placeholder("float32", [None, 3], name="ids")
    emb = layers.Embedding(10, 5, embeddings_initializer="ones")(ids)
    assert emb.shape == (None, 3, 5)
    with client.session(g) as s:
        s.run(g.initializer())
        image = np.arange(2 * 36, dtype=np.float32).reshape(2, 6, 6, 1)
        y, normalized = s.run([out, h], {x: image})
        assert y.shape == (2, 2)
        np.testing.assert_allclose(normalized.mean(axis=0), 0, atol=1e-4)  # batch statistics
        assert not np.allclose(s.run(bn.moving_mean), 0)  # training mode updated them
        np.testing.assert_array_equal(s.run(emb, {ids: [[1, 2, 9]]}), np.ones((1, 3, 5)))


def test_grouped_and_depthwise_conv2d(client):
    g = client.graph()
    x = g.placeholder("float32", [None, 5, 5, 4], name="x")
    grouped = layers.Conv2D(6, 3, padding="same", groups=2, use_bias=False)
    depthwise = layers.Conv2D(4, 3, padding="valid", groups=4, use_bias=False)
    y, d = grouped(x), depthwise(x)
    assert grouped.w.shape == (3, 3, 2, 6) and depthwise.w.shape == (3, 3, 1, 4)
    assert y.shape == (None, 5, 5, 6) and d.shape == (None, 3, 3, 4)
    image = np.random.default_rng(4).standard_normal((2, 5, 5, 4)).astype(np.float32)
    with client.session(g) as s:
        s.run(g.initializer())
        gw, dw, got_y, got_d = s.run([grouped.w, depthwise.w, y, d], {x: image})
    padded = np.pad(image, ((0, 0), (1, 1), (1, 1), (0, 0)))
    want_y = np.zeros((2, 5, 5, 6), np.float64)
    want_d = np.zeros((2, 3, 3, 4), np.float64)
    for i in range(3):
        for j in range(3):
            # Output channel o of the grouped conv sees input channels 2*(o//3) and +1.
            for o in range(6):
                k = o // 3
                want_y[..., o] += np.einsum("nhwc,c->nhw", padded[:, i:i + 5, j:j + 5, 2 * k:2 * k + 2],
                                            gw[i, j, :, o])
            want_d += image[:, i:i + 3, j:j + 3, :] * dw[i, j, 0, :]
    np.testing.assert_allclose(got_y, want_y, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got_d, want_d, rtol=1e-4, atol=1e-5)
    with pytest.raises(errors.InvalidArgument) as e:
        layers.Conv2D(6, 3, groups=4)
    assert e.value.field == "groups"
    with pytest.raises(errors.InvalidArgument):
        layers.Conv2D(6, 3, groups=3)(x)  # 3 does not divide the 4 input channels


def test_lstm_is_one_while_and_runs(client):
    g = client.graph()
    x = g.placeholder("float32", [None, 5, 3], name="x")
    lstm = layers.LSTM(4)
    h = lstm(x)
    assert h.shape == (None, 4) and h.name == "lstm/while:1"
    assert [n.op for n in g.nodes].count("While") == 1
    with client.session(g) as s:
        s.run(g.initializer())
        out = s.run(h, {x: np.ones((2, 5, 3), np.float32)})
        wx, wh, b = s.run(lstm.variables)
    assert out.shape == (2, 4) and np.all(np.abs(out) < 1)
    # The same cell in numpy.
    hh, cc = np.zeros((2, 4), np.float32), np.zeros((2, 4), np.float32)
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    for _ in range(5):
        gates = np.ones((2, 3), np.float32) @ wx + hh @ wh + b
        i, f, c, o = np.split(gates, 4, axis=1)
        cc = sig(f + 1) * cc + sig(i) * np.tanh(c)
        hh = sig(o) * np.tanh(cc)
    np.testing.assert_allclose(out, hh, rtol=1e-4, atol=1e-5)

