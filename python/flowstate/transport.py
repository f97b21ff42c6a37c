"""The two transports: REST (http.client, JSON) and gRPC (the generated stubs).

Both present the same methods with the same Python values, so everything
above them (sessions, jobs, the op registry) is written once:

- tensors are numpy arrays; a feed is ``(wire dtype, array)``;
- a job, a device, a checkpoint... is the dict REST returns (the gRPC
  message converted to the same keys; unset timestamps and optionals None);
- every failure is a ``flowstate.errors.FlowstateError``.

A transport is safe to use from several threads: REST keeps one keep-alive
connection per thread, gRPC one channel.
"""

import http.client
import json
import socket
import threading
import urllib.parse

from . import binary_body, dtypes, errors
from .messages import Event, _fix_job, _msg_dict


# ---------------------------------------------------------------------------
# REST

class RestTransport:
    kind = "http"

    def __init__(self, host, port, token=None, timeout=60.0, base_path=""):
        self.host, self.port = host, port
        self.timeout = timeout
        self.base_path = base_path.rstrip("/")
        self.headers = {"Accept": "application/json"}
        if token:
            self.headers["Authorization"] = "Bearer " + token
        self._local = threading.local()

    def __repr__(self):
        return "http://%s:%d" % (self.host, self.port)

    def close(self):
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- the HTTP exchange

    def _conn(self, timeout):
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
            self._local.conn = conn
            self._local.used = False
        elif conn.sock is not None:
            conn.sock.settimeout(timeout)
        conn.timeout = timeout
        return conn

    def _fail(self, e, what, timeout):
        self.close()
        if isinstance(e, (socket.timeout, TimeoutError)):
            return errors.DeadlineExceeded("%s: no answer from %r within %.3g s"
                                           % (what, self, timeout))
        return errors.Unavailable("%s: cannot reach the server at %r: %s" % (what, self, e))

    def request(self, method, path, body=None, timeout=None, raw=False, query=None,
                chunks=None):
        """The decoded JSON (or, with raw, (headers, bytes)) of a 2xx answer; a binary
        answer (binary_body.TENSORS) as (its JSON, its tensor bytes as a numpy uint8
        array).

        `chunks`: a binary body (binary_body.TENSORS) as a list of byte views, sent
        one after the other as they are (an array's memory is not copied)."""
        timeout = self.timeout if timeout is None else timeout
        url = self.base_path + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None
        headers = dict(self.headers)
        if chunks is not None:
            data = chunks
            headers["Content-Type"] = binary_body.TENSORS
            headers["Content-Length"] = str(sum(c.nbytes if isinstance(c, memoryview) else len(c)
                                                for c in chunks))
        elif body is not None:
            data = body if isinstance(body, (bytes, bytearray)) else json.dumps(body).encode()
            binary = isinstance(body, (bytes, bytearray))
            headers["Content-Type"] = "application/octet-stream" if binary else "application/json"
        what = "%s %s" % (method, path)
        for attempt in (0, 1):
            conn = self._conn(timeout)
            reused = getattr(self._local, "used", False)
            try:
                conn.request(method, url, body=data, headers=headers)
                resp = conn.getresponse()
                binary = resp.getheader("Content-Type", "") == binary_body.TENSORS
                if 200 <= resp.status < 300 and binary:
                    payload = binary_body.read(resp)
                else:
                    payload = resp.read()
                self._local.used = True
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                # A keep-alive connection the server closed while idle: once more, anew.
                self.close()
                if reused and attempt == 0:
                    continue
                raise self._fail(e, what, timeout) from None
            except (OSError, http.client.HTTPException) as e:
                raise self._fail(e, what, timeout) from None
            except BaseException:
                # Ctrl-C mid-request: the connection has a response in flight; drop it.
                self.close()
                raise
            if resp.getheader("Connection", "").lower() == "close":
                self.close()
            if 200 <= resp.status < 300:
                if raw or isinstance(payload, tuple):
                    return (resp, payload) if raw else payload
                return json.loads(payload) if payload else {}
            raise errors.from_http(resp.status, payload)
        raise AssertionError("unreachable")

    @staticmethod
    def _q(s):
        return urllib.parse.quote(str(s), safe="")

    # -- ops, devices, cluster, health

    def list_ops(self):
        return self.request("GET", "/v1/ops")["ops"]

    def devices(self):
        return self.request("GET", "/v1/devices")["devices"]

    def cluster(self):
        return self.request("GET", "/v1/cluster")

    def health(self, timeout=None):
        return self.request("GET", "/healthz", timeout=timeout)

    # -- sessions

    def create_session(self, graph):
        return self.request("POST", "/v1/sessions", {"graph": graph})["session_id"]

    def gradients(self, graph, y, xs, prefix):
        return self.request("POST", "/v1/gradients", {"graph": graph, "y": y, "xs": xs,
                                                      "prefix": prefix})

    def extend_session(self, session_id, graph):
        self.request("POST", "/v1/sessions/%s/extend" % self._q(session_id), {"graph": graph})

    def _tensors_call(self, path, doc, key, tensors, timeout):
        """POSTs `doc` as a binary body with doc[key] the tensors (name -> (dtype,
        array)); the outputs of the binary answer."""
        doc, buf = self.request("POST", path, chunks=binary_body.encode(doc, key, tensors),
                                timeout=timeout)
        return binary_body.decode_outputs(doc, buf)

    def run_session(self, session_id, feeds, fetches, targets, timeout_ms=0, timeout=None,
                    step_tag=""):
        doc = {"fetches": list(fetches), "targets": list(targets), "step_tag": step_tag}
        if timeout_ms:
            doc["timeout_ms"] = int(timeout_ms)
        return self._tensors_call("/v1/sessions/%s/run" % self._q(session_id), doc, "feeds",
                                  feeds, timeout)

    def cancel_step(self, session_id, step_tag, timeout=None):
        return self.request("POST", "/v1/sessions/%s/cancel" % self._q(session_id),
                            {"step_tag": step_tag}, timeout=timeout)["cancelled"]

    def close_session(self, session_id):
        self.request("DELETE", "/v1/sessions/%s" % self._q(session_id))

    # -- jobs

    def submit_job(self, doc):
        return _fix_job(self.request("POST", "/v1/jobs", doc))

    def list_jobs(self):
        return [_fix_job(j) for j in self.request("GET", "/v1/jobs")["jobs"]]

    def get_job(self, job_id):
        return _fix_job(self.request("GET", "/v1/jobs/%s" % self._q(job_id)))

    def job_action(self, job_id, action):
        return _fix_job(self.request("POST", "/v1/jobs/%s/%s" % (self._q(job_id), action)))

    def delete_job(self, job_id):
        self.request("DELETE", "/v1/jobs/%s" % self._q(job_id))

    def predict(self, job_id, inputs, fetches, timeout=None):
        return self._tensors_call("/v1/jobs/%s/predict" % self._q(job_id),
                                  {"fetches": list(fetches)}, "inputs", inputs, timeout)

    def history(self, job_id):
        return self.request("GET", "/v1/jobs/%s/history" % self._q(job_id))

    def spec(self, job_id):
        return self.request("GET", "/v1/jobs/%s/spec" % self._q(job_id))

    def list_checkpoints(self, job_id):
        return self.request("GET", "/v1/jobs/%s/checkpoints" % self._q(job_id))["checkpoints"]

    def checkpoint(self, job_id):
        return self.request("POST", "/v1/jobs/%s/checkpoints" % self._q(job_id))

    def export_checkpoint(self, job_id, step=None, fmt="npz"):
        query = {"format": fmt}
        if step is not None:
            query["step"] = int(step)
        resp, payload = self.request("GET", "/v1/jobs/%s/checkpoints/export" % self._q(job_id),
                                     raw=True, query=query)
        return int(resp.getheader("X-Flowstate-Step", "-1")), payload

    def watch(self, job_id, history=False, timeout=None):
        """The job's events until its terminal state (a generator).

        `timeout` bounds the wait for each piece of the stream (the server
        sends a keep-alive comment every 15 s), not the stream's length.
        """
        read_timeout = 60.0 if timeout is None else timeout
        path = self.base_path + "/v1/jobs/%s/events" % self._q(job_id)
        if history:
            path += "?history=1"
        what = "GET /v1/jobs/%s/events" % job_id
        conn = http.client.HTTPConnection(self.host, self.port, timeout=read_timeout)
        try:
            try:
                conn.request("GET", path, headers=dict(self.headers, Accept="text/event-stream"))
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                raise self._fail(e, what, read_timeout) from None
            if resp.status != 200:
                raise errors.from_http(resp.status, resp.read())
            kind, data = None, []
            while True:
                try:
                    line = resp.readline()
                except (OSError, http.client.HTTPException) as e:
                    raise self._fail(e, what, read_timeout) from None
                if not line:
                    return  # the server ended the stream
                line = line.decode("utf-8").rstrip("\r\n")
                if line.startswith(":"):
                    continue
                if line == "":
                    if kind is not None or data:
                        job = json.loads("\n".join(data)) if data else {}
                        message = job.pop("message", "") if isinstance(job, dict) else ""
                        yield Event(kind or "message", _fix_job(job), None, message)
                    kind, data = None, []
                    continue
                field, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if field == "event":
                    kind = value
                elif field == "data":
                    data.append(value)
        finally:
            conn.close()


# ---------------------------------------------------------------------------
# gRPC


class GrpcTransport:
    kind = "grpc"

    def __init__(self, host, port, token=None, timeout=60.0):
        import grpc
        from ._gen import flowstate_pb2, flowstate_pb2_grpc
        self._grpc = grpc
        self.pb = flowstate_pb2
        self.host, self.port = host, port
        self.timeout = timeout
        self.metadata = [("authorization", "Bearer " + token)] if token else []
        # The server's limits (grpc.max_message_bytes) are the ones that apply.
        self.channel = grpc.insecure_channel("%s:%d" % (host, port), options=[
            ("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)])
        self.sessions = flowstate_pb2_grpc.SessionsStub(self.channel)
        self.jobs = flowstate_pb2_grpc.JobsStub(self.channel)
        self.ops = flowstate_pb2_grpc.OpsStub(self.channel)
        self.devices_stub = flowstate_pb2_grpc.DevicesStub(self.channel)
        self.cluster_stub = flowstate_pb2_grpc.ClusterStub(self.channel)
        self.graphs = flowstate_pb2_grpc.GraphsStub(self.channel)
        self.models = flowstate_pb2_grpc.ModelsStub(self.channel)
        self.msg_dict = _msg_dict

    def __repr__(self):
        return "grpc://%s:%d" % (self.host, self.port)

    def close(self):
        self.channel.close()

    def call(self, method, request, timeout=None):
        timeout = self.timeout if timeout is None else timeout
        try:
            return method(request, metadata=self.metadata, timeout=timeout)
        except self._grpc.RpcError as e:
            raise self._error(e) from None

    def _error(self, e):
        code = e.code() if hasattr(e, "code") else None
        name = code.name if code is not None else "UNKNOWN"
        details = e.details() if hasattr(e, "details") else str(e)
        # gRPC's own connection failures (not the server's UNAVAILABLE): say where.
        if name == "UNAVAILABLE" and any(s in details for s in (
                "failed to connect", "Connection refused", "connections to all backends failing",
                "Socket closed", "DNS resolution failed")):
            details = "cannot reach the server at %r: %s" % (self, details)
        return errors.from_grpc(name, details)

    # -- tensors

    @staticmethod
    def _fill(t, dtype, array):
        """Sets map entry `t` in place (a Tensor built apart and CopyFrom'd costs one
        more copy of the bytes)."""
        shape, raw = dtypes.to_bytes(array, dtype)
        t.dtype = dtype
        t.shape.extend(shape)
        t.content = raw

    @staticmethod
    def _array(t):
        return dtypes.from_bytes(t.dtype, t.shape, t.content)

    # -- ops, devices, cluster, health

    def list_ops(self):
        ops = []
        for op in self.call(self.ops.List, self.pb.ListOpsRequest()).ops:
            d = _msg_dict(op)
            for a, pa in zip(d["attrs"], op.attrs):
                a.pop("default_value", None)
                if pa.HasField("default_value"):
                    a["default"] = json.loads(pa.default_value)
            ops.append(d)
        return ops

    def devices(self):
        return [_msg_dict(d) for d in
                self.call(self.devices_stub.List, self.pb.ListDevicesRequest()).devices]

    def cluster(self):
        return _msg_dict(self.call(self.cluster_stub.Get, self.pb.GetClusterRequest()))

    def health(self, timeout=None):
        """{"status": "ok"} once a call of the API answers (the health service is not
        in the generated stubs)."""
        self.call(self.devices_stub.List, self.pb.ListDevicesRequest(), timeout=timeout)
        return {"status": "ok"}

    # -- sessions

    def gradients(self, graph, y, xs, prefix):
        r = self.call(self.graphs.Gradients, self.pb.GradientsRequest(
            graph_json=json.dumps(graph), y=y, xs=xs, prefix=prefix))
        return {"prefix": r.prefix, "nodes": json.loads(r.graph_json)["nodes"],
                "gradients": [None if not (g.dense or g.values) else
                              {k: v for k, v in _msg_dict(g).items() if v} for g in r.gradients]}

    def create_session(self, graph):
        r = self.call(self.sessions.Create,
                      self.pb.CreateSessionRequest(graph_json=json.dumps(graph)))
        return r.session_id

    def extend_session(self, session_id, graph):
        self.call(self.sessions.Extend, self.pb.ExtendSessionRequest(
            session_id=session_id, graph_json=json.dumps(graph)))

    def run_session(self, session_id, feeds, fetches, targets, timeout_ms=0, timeout=None,
                    step_tag=""):
        req = self.pb.RunSessionRequest(session_id=session_id, fetches=list(fetches),
                                        targets=list(targets), timeout_ms=int(timeout_ms or 0),
                                        step_tag=step_tag)
        for k, (d, a) in feeds.items():
            self._fill(req.feeds[k], d, a)
        r = self.call(self.sessions.Run, req, timeout=timeout)
        return {k: self._array(v) for k, v in r.outputs.items()}

    def cancel_step(self, session_id, step_tag, timeout=None):
        return self.call(self.sessions.CancelStep, self.pb.CancelStepRequest(
            session_id=session_id, step_tag=step_tag), timeout=timeout).cancelled

    def close_session(self, session_id):
        self.call(self.sessions.Close, self.pb.CloseSessionRequest(session_id=session_id))

    # -- jobs

    def submit_job(self, doc):
        return _msg_dict(self.call(self.jobs.Submit,
                                   self.pb.SubmitJobRequest(job_json=json.dumps(doc))))

    def list_jobs(self):
        return [_msg_dict(j) for j in self.call(self.jobs.List, self.pb.ListJobsRequest()).jobs]

    def get_job(self, job_id):
        return _msg_dict(self.call(self.jobs.Get, self.pb.GetJobRequest(job_id=job_id)))

    def job_action(self, job_id, action):
        method, request = {"cancel": (self.jobs.Cancel, self.pb.CancelJobRequest),
                           "pause": (self.jobs.Pause, self.pb.PauseJobRequest),
                           "resume": (self.jobs.Resume, self.pb.ResumeJobRequest)}[action]
        return _msg_dict(self.call(method, request(job_id=job_id)))

    def delete_job(self, job_id):
        self.call(self.jobs.Delete, self.pb.DeleteJobRequest(job_id=job_id))

    def predict(self, job_id, inputs, fetches, timeout=None):
        req = self.pb.PredictRequest(job_id=job_id, fetches=list(fetches))
        for k, (d, a) in inputs.items():
            self._fill(req.inputs[k], d, a)
        r = self.call(self.jobs.Predict, req, timeout=timeout)
        return {k: self._array(v) for k, v in r.outputs.items()}

    def history(self, job_id):
        return _msg_dict(self.call(self.jobs.History, self.pb.JobHistoryRequest(job_id=job_id)))

    def spec(self, job_id):
        r = self.call(self.jobs.GetSpec, self.pb.JobSpecRequest(job_id=job_id))
        return json.loads(r.json)

    def list_checkpoints(self, job_id):
        r = self.call(self.jobs.ListCheckpoints, self.pb.ListCheckpointsRequest(job_id=job_id))
        return [_msg_dict(c) for c in r.checkpoints]

    def checkpoint(self, job_id):
        return _msg_dict(self.call(self.jobs.Checkpoint,
                                   self.pb.CheckpointJobRequest(job_id=job_id)))

    def export_checkpoint(self, job_id, step=None, fmt="npz"):
        req = self.pb.ExportCheckpointRequest(job_id=job_id, format=fmt)
        if step is not None:
            req.step = int(step)
        r = self.call(self.jobs.ExportCheckpoint, req)
        return r.step, r.data

    def watch(self, job_id, history=False, timeout=None):
        """The job's events until its terminal state (a generator).

        `timeout` bounds the whole stream when given (gRPC deadlines are per
        call); None: no deadline.
        """
        stream = self.jobs.Watch(self.pb.WatchJobRequest(job_id=job_id, history=history),
                                 metadata=self.metadata, timeout=timeout)
        try:
            for e in stream:
                yield Event(e.kind, _msg_dict(e.job),
                            e.time.ToJsonString() if e.HasField("time") else None, e.message)
        except self._grpc.RpcError as e:
            raise self._error(e) from None
        finally:
            stream.cancel()


def connect(url, token=None, timeout=60.0):
    """The transport of "grpc://host:port" or "http://host:port"."""
    parsed = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
    scheme = parsed.scheme.lower()
    host = parsed.hostname or "127.0.0.1"
    if scheme in ("grpc",):
        return GrpcTransport(host, parsed.port or 50051, token=token, timeout=timeout)
    if scheme in ("http",):
        return RestTransport(host, parsed.port or 8080, token=token, timeout=timeout,
                             base_path=parsed.path)
    if scheme in ("https", "grpcs"):
        raise errors.Unimplemented("%s: the server has no TLS yet; use http:// or grpc://" % url)
    raise errors.InvalidArgument("%s: expected grpc://host:port or http://host:port" % url)
