"""``Client``: one API over REST and gRPC; sessions with numpy in and out; jobs.

    import flowstate, numpy as np
    client = flowstate.Client("grpc://127.0.0.1:50051")     # or "http://127.0.0.1:8080"
    g = client.graph()
    a = g.placeholder("float32", [None], name="a")
    b = g.Mul(a, 2.0, name="b")
    with client.session(g) as s:
        print(s.run(b, {a: np.arange(3, dtype=np.float32)}))   # [0. 2. 4.]

    job = client.jobs.submit("examples/jobs/fashion_mlp.json")
    for event in job.watch():
        print(event.kind, event.job["step"], event.job["loss"])

Every call has the client's deadline (`timeout`, seconds) unless it takes
its own; every failure is a ``flowstate.errors.FlowstateError``.
"""

import io
import json
import os
import uuid

import numpy as np

from . import dtypes, errors, transport
from .datasets import Datasets
from .messages import TERMINAL_STATES
from .models import Models, export_onnx
from .graph import Graph, Node, Output
from .ops import OpLibrary


class Client:
    """A connection to a Flowstate server: "grpc://host:port" or "http://host:port"."""

    def __init__(self, url="http://127.0.0.1:8080", token=None, timeout=60.0):
        if token is None:
            token = os.environ.get("FLOWSTATE_TOKEN") or None
        self.url = url
        self.transport = transport.connect(url, token=token, timeout=timeout)
        self._ops = None
        self.jobs = Jobs(self)
        self.datasets = Datasets(self)
        self.models = Models(self)

    def __repr__(self):
        return "Client(%r)" % self.url

    def close(self):
        self.transport.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- the registry and the graph builder

    @property
    def ops(self):
        """The op functions of the server's registry (fetched once)."""
        if self._ops is None:
            self._ops = OpLibrary(self.transport.list_ops())
        return self._ops

    def list_ops(self):
        """The registry as the server gives it (a list of op dicts)."""
        return self.transport.list_ops()

    def graph(self):
        """A new Graph checked against this server's registry (and differentiated by it:
        Graph.gradients)."""
        g = Graph(self.ops)
        g._client = self
        return g

    def devices(self):
        return self.transport.devices()

    def cluster(self):
        return self.transport.cluster()

    def health(self, timeout=None):
        return self.transport.health(timeout=timeout)

    # -- sessions

    def session(self, graph=None):
        """A session on the server holding `graph` (a Graph or a {"nodes": [...]} dict)."""
        return Session(self, graph)


def _fetch_name(f):
    if isinstance(f, Output):
        return f.name, False
    if isinstance(f, Node):
        if f.outputs:
            return f.outputs[0].name, False
        return f.name, True  # an op without outputs: run as a target
    if isinstance(f, str):
        return f, False
    raise errors.InvalidArgument("a fetch is an Output, a Node or a name (\"x\", \"x:1\"), got %r"
                                 % (f,), field="fetches")


class Session:
    """A graph on the server and the steps run on it (TensorFlow's tf.Session).

    Nodes added to its Graph after it was created are sent with the next
    ``run`` (an extend), so a graph may grow between steps. Close it (or use
    ``with``) to free it on the server; a closed session raises
    FailedPrecondition.
    """

    def __init__(self, client, graph=None):
        self.client = client
        self._t = client.transport
        if graph is None:
            graph = client.graph()
        if isinstance(graph, dict):
            graph = Graph.from_dict(graph, client.ops)
        self.graph = graph
        self.id = self._t.create_session(graph.as_dict())
        self._sent = len(graph)

    def __repr__(self):
        return "<Session %s on %s>" % (self.id, self.client.url)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check_open(self):
        if self.id is None:
            raise errors.FailedPrecondition("the session is closed")

    def extend(self, nodes=None):
        """Sends the graph's nodes added since the last send, or the given nodes
        (a Graph or a {"nodes": [...]} dict)."""
        self._check_open()
        if nodes is None:
            if self._sent < len(self.graph):
                self._t.extend_session(self.id, self.graph.as_dict(start=self._sent))
                self._sent = len(self.graph)
            return
        doc = nodes.as_dict() if isinstance(nodes, Graph) else nodes
        self._t.extend_session(self.id, doc)

    def _feed(self, key, value):
        if isinstance(key, Node):
            key = key.outputs[0] if key.outputs else key.name
        placeholder = None
        if isinstance(key, Output):
            name = key.name
            placeholder = key
        elif isinstance(key, str):
            name = key
            node, _, idx = key.partition(":")
            if node in self.graph and self.graph.node(node).outputs:
                placeholder = self.graph.node(node).outputs[int(idx or 0)]
        else:
            raise errors.InvalidArgument("a feed key is an Output or a name, got %r" % (key,),
                                         field="feeds")
        node = name.split(":")[0]
        want = placeholder.dtype if placeholder is not None else None
        arr = value if isinstance(value, np.ndarray) else np.asarray(value)
        if want is None:
            want = dtypes.infer(value)
        elif isinstance(value, np.ndarray) and dtypes.from_numpy(arr.dtype) != want:
            target = dtypes.numpy_dtype(want)
            # Lossless casts, and float64 -> float32 (what numpy makes by default).
            if not (np.can_cast(arr.dtype, target, "safe") or
                    (arr.dtype.kind == "f" and target.kind == "f")):
                raise errors.InvalidArgument(
                    "feeds.%s: an array of dtype %s cannot feed '%s' of dtype %s"
                    % (name, arr.dtype, node, want), node=node, field="feeds." + name)
        elif not isinstance(value, np.ndarray):
            try:
                conv = np.asarray(value, dtype=dtypes.numpy_dtype(want))
            except (TypeError, ValueError):
                raise errors.InvalidArgument("feeds.%s: cannot make a %s tensor of %r"
                                             % (name, want, value), node=node,
                                             field="feeds." + name) from None
            if arr.dtype.kind == "f" and conv.dtype.kind in "iub" and not np.array_equal(conv, arr):
                raise errors.InvalidArgument("feeds.%s: %r is not a whole number, as '%s' (%s) "
                                             "needs"
                                             % (name, value, node, want), node=node,
                                             field="feeds." + name)
            arr = conv
        shape = placeholder.shape if placeholder is not None else None
        if shape is not None:
            if len(shape) != arr.ndim or any(d is not None and d != s
                                             for d, s in zip(shape, arr.shape)):
                raise errors.InvalidArgument(
                    "feeds.%s: shape %s does not fit '%s' of shape %s"
                    % (name, list(arr.shape), node,
                       "[%s]" % ", ".join("-1" if d is None else str(d) for d in shape)),
                    node=node, field="feeds." + name)
        return name, (want, arr)

    def run(self, fetches, feed_dict=None, targets=None, timeout=None, timeout_ms=0):
        """Runs one step: the fetches' values as numpy arrays, in the fetches' structure.

        `fetches` is an Output, a Node (an op without outputs runs as a
        target), a name, or a list, tuple or dict of those; `feed_dict` maps
        placeholders (Outputs or names) to arrays; `targets` are nodes run
        for their effects. `timeout_ms` is the server's deadline for the
        step (DeadlineExceeded), `timeout` the client's for the call.
        """
        self._check_open()
        self.extend()
        names, run_targets = [], []

        def flatten(f):
            if isinstance(f, list):
                return [flatten(x) for x in f]
            if isinstance(f, tuple):
                return tuple(flatten(x) for x in f)
            if isinstance(f, dict):
                return {k: flatten(v) for k, v in f.items()}
            name, is_target = _fetch_name(f)
            if is_target:
                run_targets.append(name)
                return None
            names.append(name)
            return name

        structure = flatten(fetches)
        for t in targets or []:
            name, _ = _fetch_name(t)
            run_targets.append(name.split(":")[0])
        feeds = dict(self._feed(k, v) for k, v in (feed_dict or {}).items())
        unique = list(dict.fromkeys(names))
        tag = uuid.uuid4().hex
        try:
            out = self._t.run_session(self.id, feeds, unique, run_targets, timeout_ms=timeout_ms,
                                      timeout=timeout, step_tag=tag)
        except KeyboardInterrupt:
            # Ctrl-C: the step ends on the server too (it would run on otherwise).
            try:
                self._t.cancel_step(self.id, tag, timeout=5)
            except errors.FlowstateError:
                pass
            raise

        def rebuild(s):
            if s is None:
                return None
            if isinstance(s, str):
                return out[s]
            if isinstance(s, dict):
                return {k: rebuild(v) for k, v in s.items()}
            if isinstance(s, list):
                return [rebuild(x) for x in s]
            return tuple(rebuild(x) for x in s)

        return rebuild(structure)

    def close(self):
        """Frees the session on the server (steps still waiting end CANCELLED)."""
        if self.id is None:
            return
        sid, self.id = self.id, None
        self._t.close_session(sid)


# ---------------------------------------------------------------------------
# Jobs


class Job:
    """A job as the server last reported it (``job.state``, ``job.step``, ``job["loss"]``),
    with its actions. ``refresh()`` asks again."""

    def __init__(self, jobs, info):
        self._jobs = jobs
        self.info = info

    def __getattr__(self, name):
        info = self.__dict__.get("info", {})
        if name in info:
            return info[name]
        raise AttributeError(name)

    def __getitem__(self, key):
        return self.info[key]

    def __repr__(self):
        return "<Job %s %s step %s/%s>" % (self.info.get("job_id"), self.info.get("state"),
                                          self.info.get("step"), self.info.get("total_steps"))

    @property
    def id(self):
        return self.info["job_id"]

    @property
    def finished(self):
        return self.info.get("state") in TERMINAL_STATES

    def refresh(self):
        self.info = self._jobs.get(self.id).info
        return self

    def watch(self, history=False, timeout=None):
        for e in self._jobs.watch(self.id, history=history, timeout=timeout):
            self.info = e.job
            yield e

    def wait(self, timeout=None):
        """Follows the job's events until it finishes; returns it (any final state)."""
        for _ in self.watch(timeout=timeout):
            pass
        return self.refresh()

    def cancel(self):
        self.info = self._jobs.cancel(self.id).info
        return self

    def pause(self):
        self.info = self._jobs.pause(self.id).info
        return self

    def resume(self):
        self.info = self._jobs.resume(self.id).info
        return self

    def delete(self):
        self._jobs.delete(self.id)

    def predict(self, inputs, fetches, timeout=None):
        return self._jobs.predict(self.id, inputs, fetches, timeout=timeout)

    def history(self):
        return self._jobs.history(self.id)

    def checkpoints(self):
        return self._jobs.checkpoints(self.id)

    def export(self, step=None):
        return self._jobs.export(self.id, step=step)

    def export_onnx(self, path=None):
        """The trained model of a job given as an ONNX "model", as .onnx bytes (and
        written to `path` when given); FailedPrecondition for a job given as a graph."""
        return export_onnx(self._jobs._client.transport, self.id, path)


class Jobs:
    """client.jobs: submit, list, get, watch, pause, resume, cancel, delete, predict."""

    def __init__(self, client):
        self._client = client
        self._dtypes = {}  # job id -> its placeholders' dtypes (predict with Python values)

    @property
    def _t(self):
        return self._client.transport

    def _id(self, job):
        return job.id if isinstance(job, Job) else job

    def submit(self, job, **overrides):
        """Submits a job: a dict, a job file's path, or an object with ``job_spec()``.

        `overrides` set top-level fields (``max_steps=20``). A Graph given as
        the "graph" field is sent without its client-side initializers.
        """
        if hasattr(job, "job_spec"):
            doc = job.job_spec()
        elif isinstance(job, (str, os.PathLike)):
            try:
                with open(job) as f:
                    doc = json.load(f)
            except OSError as e:
                raise errors.NotFound("job file %s: %s" % (job, e.strerror), field="job") from None
            except ValueError as e:
                raise errors.InvalidArgument("job file %s: not JSON: %s" % (job, e),
                                             field="job") from None
        elif isinstance(job, dict):
            doc = dict(job)
        else:
            raise errors.InvalidArgument("a job is a dict, a job file's path or a Model, got %r"
                                         % (job,), field="job")
        doc.update(overrides)
        if isinstance(doc.get("graph"), Graph):
            doc["graph"] = doc["graph"].as_dict(initializers=False)
        return Job(self, self._t.submit_job(doc))

    def list(self):
        return [Job(self, j) for j in self._t.list_jobs()]

    def get(self, job):
        return Job(self, self._t.get_job(self._id(job)))

    def cancel(self, job):
        return Job(self, self._t.job_action(self._id(job), "cancel"))

    def pause(self, job):
        return Job(self, self._t.job_action(self._id(job), "pause"))

    def resume(self, job):
        return Job(self, self._t.job_action(self._id(job), "resume"))

    def delete(self, job):
        self._t.delete_job(self._id(job))

    def watch(self, job, history=False, timeout=None):
        """An iterator of the job's events (transport.Event: kind, job dict, time,
        message) until its terminal state."""
        return self._t.watch(self._id(job), history=history, timeout=timeout)

    def predict(self, job, inputs, fetches, timeout=None):
        """The fetches of the job's inference graph with its latest variables.

        `inputs` maps input names to arrays (sent in their own dtype; Python
        lists as the server reads JSON numbers); `fetches` is a name or a
        list of names; returns an array or a dict of arrays.
        """
        single = isinstance(fetches, str)
        names = [fetches] if single else list(fetches)
        feeds = {}
        for k, v in inputs.items():
            if isinstance(v, np.ndarray):
                feeds[k] = (dtypes.infer(v), v)
                continue
            # A Python value takes its placeholder's dtype, as the server reads JSON numbers.
            want = self._placeholder_dtypes(job).get(k) or dtypes.infer(v)
            feeds[k] = (want, np.asarray(v, dtype=dtypes.numpy_dtype(want)))
        out = self._t.predict(self._id(job), feeds, names, timeout=timeout)
        return out[names[0]] if single else out

    def _placeholder_dtypes(self, job):
        """{placeholder name: dtype} of the job's graph (its spec, read once per job)."""
        job_id = self._id(job)
        if job_id not in self._dtypes:
            graph = self.spec(job_id).get("graph") or {}
            self._dtypes[job_id] = {
                n["name"]: n.get("attrs", {}).get("dtype")
                for n in graph.get("nodes", []) if n.get("op") == "Placeholder"}
        return self._dtypes[job_id]

    def history(self, job):
        return self._t.history(self._id(job))

    def spec(self, job):
        return self._t.spec(self._id(job))

    def checkpoints(self, job):
        return self._t.list_checkpoints(self._id(job))

    def checkpoint(self, job):
        return self._t.checkpoint(self._id(job))

    def export(self, job, step=None):
        """The job's variables at a checkpoint (the latest by default): {name: array}."""
        _, data = self._t.export_checkpoint(self._id(job), step=step, fmt="npz")
        with np.load(io.BytesIO(data)) as z:
            return {k: z[k] for k in z.files}
