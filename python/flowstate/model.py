"""A Keras-like ``Sequential`` model whose ``fit`` is a training job on the server.

    model = flowstate.Sequential(client, [layers.Rescale(1 / 255), layers.Flatten(),
                                          layers.Dense(128, activation="relu"), layers.Dense(10)],
                                 input_shape=(28, 28), input_dtype="uint8")
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    history = model.fit(files={"x": "fashion-mnist/train-images-idx3-ubyte.gz",
                               "y": "fashion-mnist/train-labels-idx1-ubyte.gz"},
                        epochs=3, batch_size=128, validation_files={...})
    model.evaluate()                     # the last evaluation's metrics
    model.predict(images)                # class indices (int64), through the job

The model's graph has the placeholders ``x`` and ``y``, the node ``logits``,
``loss``, one node per metric and ``predicted`` (the arg max); ``fit``
submits the job document ``job_spec()`` and follows its event stream with a
tqdm progress bar. The server adds the gradients and the optimizer.

Data is read by the server beneath its data root (IDX or CSV files, as a
job file names them); numpy arrays given to ``fit`` need the server's npy
input format, which does not exist yet (issue 45).
"""

import numpy as np

from . import errors
from .graph import Graph

OPTIMIZERS = ("sgd", "momentum", "adam", "adagrad", "rmsprop")


class History:
    """What fit returns: the job and its per-epoch evaluation metrics (``history["accuracy"]``)."""

    def __init__(self, job):
        self.job = job
        self.history = {}
        self.epochs = []

    def add(self, epoch, metrics):
        self.epochs.append(epoch)
        for k, v in metrics.items():
            self.history.setdefault(k, []).append(v)

    def __getitem__(self, k):
        return self.history[k]

    def __repr__(self):
        return "History(%s)" % self.history


class Sequential:
    """Layers applied in order to the input placeholder ``x``."""

    def __init__(self, client, layers, input_shape, input_dtype="float32", label_dtype="uint8",
                 name="model"):
        self.client = client
        self.layers = list(layers)
        self.input_shape = tuple(input_shape)
        self.input_dtype, self.label_dtype = input_dtype, label_dtype
        self.name = name
        self.graph = None
        self.compiled = None
        self.job = None

    def compile(self, optimizer="adam", loss="sparse_categorical_crossentropy", metrics=(),
                learning_rate=None):
        """Builds the graph: forward pass, loss and metrics."""
        if isinstance(optimizer, str):
            if optimizer not in OPTIMIZERS:
                raise errors.InvalidArgument("unknown optimizer %r (expected one of %s)"
                                             % (optimizer, ", ".join(OPTIMIZERS)),
                                             field="optimizer")
            default_rate = 0.001 if optimizer in ("adam", "rmsprop") else 0.01
            optimizer = {"type": optimizer, "learning_rate": learning_rate or default_rate}
        if loss != "sparse_categorical_crossentropy":
            raise errors.Unimplemented("loss %r: only sparse_categorical_crossentropy yet" % loss,
                                       field="loss")
        for m in metrics:
            if m not in ("accuracy", "loss"):
                raise errors.InvalidArgument("unknown metric %r (accuracy, loss)" % m,
                                             field="metrics")
        g = Graph(self.client.ops)
        x = g.placeholder(self.input_dtype, (None,) + self.input_shape, name="x")
        y = g.placeholder(self.label_dtype, [None], name="y")
        h = x
        for layer in self.layers:
            h = layer(h)
        logits = g.Identity(h, name="logits")
        all_axes = g.constant(np.array([], np.int32), name="all_axes")
        # Labels as int64 whatever the data holds (IDX: uint8, CSV: float32).
        labels = g.Cast(y, DstT="int64", name="labels")
        xent, _ = g.SparseSoftmaxCrossEntropyWithLogits(logits, labels, name="xent")
        g.Mean(xent, all_axes, name="loss")
        predicted = g.ArgMax(logits, np.int32(1), output_type="int64", name="predicted")
        correct = g.Equal(predicted, labels, name="correct")
        g.Mean(g.Cast(correct, DstT="float32", name="correct_float"), all_axes, name="accuracy")
        self.graph = g
        self.compiled = {"optimizer": optimizer, "metrics": list(metrics) or ["loss"]}
        return self

    def job_spec(self, files=None, format=None, epochs=1, batch_size=32, shuffle=True,
                 validation_files=None, validation_batch_size=1000, seed=1, max_steps=None,
                 checkpoint=None, devices=None, replicas=None, columns=None, **extra):
        """The job document fit submits (`columns`: a CSV file's columns of x and y)."""
        if self.compiled is None:
            raise errors.FailedPrecondition("compile the model before fit")
        if not files:
            raise errors.InvalidArgument("fit needs files={'x': ..., 'y': ...} beneath the "
                                         "server's data root", field="files")
        if format is None:  # by the files' names
            names = [str(f) for f in files.values()]
            format = ("csv" if all(n.endswith(".csv") for n in names) else
                      "npy" if all(n.endswith((".npy", ".npz")) for n in names) else "idx")
        spec = {"name": self.name, "graph": self.graph.as_dict(initializers=False),
                "loss": "loss", "optimizer": self.compiled["optimizer"],
                "input": {"format": format, "files": dict(files), "batch_size": int(batch_size),
                          "shuffle": bool(shuffle), "epochs": int(epochs)},
                "seed": int(seed)}
        if columns:
            spec["input"]["columns"] = dict(columns)
        if validation_files:
            spec["eval"] = {"files": dict(validation_files), "metrics": self.compiled["metrics"],
                            "every_epochs": 1, "batch_size": int(validation_batch_size)}
        if max_steps:
            spec["max_steps"] = int(max_steps)
        if checkpoint:
            spec["checkpoint"] = checkpoint
        if devices:
            spec["devices"] = list(devices)
        if replicas:
            spec["replicas"] = int(replicas)
        spec.update(extra)
        return spec

    def _upload(self, x, y, field):
        """x and y checked against the model's input and labels, uploaded as one .npz."""
        x = np.asarray(x)
        if x.ndim < 1 or tuple(x.shape[1:]) != self.input_shape:
            raise errors.InvalidArgument("%s: x has shape %s; the model takes (N,) + %s"
                                         % (field, tuple(x.shape), self.input_shape), field=field)
        y = np.asarray(y)
        if y.shape != (x.shape[0],):
            raise errors.InvalidArgument("%s: y has shape %s; expected one label per example, (%d,)"
                                         % (field, tuple(y.shape), x.shape[0]), field=field)
        label = np.dtype(self.label_dtype)
        if y.size and np.issubdtype(label, np.integer):
            if not np.issubdtype(y.dtype, np.integer) and not np.all(np.equal(np.mod(y, 1), 0)):
                raise errors.InvalidArgument("%s: labels must be whole class numbers" % field,
                                             field=field)
            info = np.iinfo(label)
            if y.min() < max(info.min, 0) or y.max() > info.max:
                raise errors.InvalidArgument(
                    "%s: labels run %s..%s; the model's %s labels hold 0..%d (label_dtype=)"
                    % (field, y.min(), y.max(), label, info.max), field=field)
        return self.client.datasets.upload({"x": x.astype(self.input_dtype, copy=False),
                                            "y": y.astype(label, copy=False)})

    def fit(self, x=None, y=None, files=None, validation_data=None, keep_data=False, verbose=1,
            timeout=None, **kwargs):
        """Trains as a job on the server; returns a History of per-epoch evaluations.

        x and y (numpy arrays) are uploaded as a dataset the job reads ("npy"), as is
        validation_data=(x, y); without them, `files` names dataset files beneath the
        server's data root. The uploads are deleted once the job has ended, unless
        keep_data. A job that did not succeed raises the error it failed with
        (errors.from_job).
        """
        uploaded = []
        try:
            if x is not None or y is not None:
                if files:
                    raise errors.InvalidArgument("give either x and y or files", field="files")
                if x is None or y is None:
                    raise errors.InvalidArgument("fit(x, y) needs both x and y",
                                                 field="x" if x is None else "y")
                uploaded.append(self._upload(x, y, "x"))
                files, kwargs["format"] = uploaded[-1].files("x", "y"), "npy"
                if validation_data is not None:
                    uploaded.append(self._upload(*validation_data, "validation_data"))
                    kwargs["validation_files"] = uploaded[-1].files("x", "y")
            elif validation_data is not None:
                raise errors.InvalidArgument("validation_data goes with fit(x, y); with files, "
                                             "give validation_files", field="validation_data")
            return self._run(files, verbose, timeout, kwargs)
        finally:
            if uploaded and not keep_data and (self.job is None or self.job.finished):
                for d in uploaded:
                    try:
                        self.client.datasets.delete(d)
                    except errors.FlowstateError:
                        pass

    def _run(self, files, verbose, timeout, kwargs):
        self.job = None
        spec = self.job_spec(files=files, **kwargs)
        self.job = self.client.jobs.submit(spec)
        history = History(self.job)
        bar = None
        if verbose:
            from tqdm import tqdm
            bar = tqdm(total=None, unit="step", desc=self.job.id, leave=True)
        try:
            # history=True: evaluations done before the stream opened (a fast job) are
            # replayed; the stream only drives the bar and the lines, History below
            # comes from the server's record.
            seen = set()
            for e in self.job.watch(history=True, timeout=timeout):
                j = e.job
                if bar is not None:
                    if j.get("total_steps") and bar.total != j["total_steps"]:
                        bar.total = j["total_steps"]
                    if isinstance(j.get("loss"), float) and j.get("step"):
                        bar.set_postfix(epoch=j.get("epoch", 0) + 1, loss="%.4f" % j["loss"],
                                        refresh=False)
                    bar.update(max(0, j.get("step", 0) - bar.n))  # redrawn at tqdm's own pace
                if e.kind == "eval" and (j.get("step"), j.get("epoch")) not in seen:
                    seen.add((j.get("step"), j.get("epoch")))
                    if bar is not None:
                        bar.write("epoch %d: %s" % (j.get("epoch", 0) + 1, ", ".join(
                            "%s %.4f" % kv for kv in sorted(j.get("metrics", {}).items()))))
        finally:
            if bar is not None:
                bar.close()
        self.job.refresh()
        if self.job.state != "SUCCEEDED":
            raise errors.from_job(self.job.info)
        for ev in self.job.history().get("evals", []):  # every evaluation, as kept
            history.add(ev.get("epoch", 0), ev.get("metrics", {}))
        return history

    def evaluate(self):
        """The job's last evaluation: {metric: value}."""
        if self.job is None:
            raise errors.FailedPrecondition("fit the model first")
        return dict(self.job.refresh().metrics)

    def predict(self, x, output="predicted"):
        """The trained model's `output` ("predicted" classes or "logits") for inputs x."""
        if self.job is None:
            raise errors.FailedPrecondition("fit the model first")
        return self.job.predict({"x": np.asarray(x)}, output)

    def save(self, path):
        """The trained variables as a NumPy .npz file (one array per variable name)."""
        if self.job is None:
            raise errors.FailedPrecondition("fit the model first")
        np.savez(path, **self.job.export())
