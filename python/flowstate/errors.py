"""Typed errors: one class per canonical code, the same over REST and gRPC.

Every error the client raises is a ``FlowstateError`` subclass carrying the
server's ``code`` ("INVALID_ARGUMENT"), ``message``, the graph ``node`` it
names (or None) and the ``field`` the message starts with where it names one
("optimizer.learning_rate: must be > 0" -> "optimizer.learning_rate").
Errors the client finds itself before sending (an unknown attr, a feed of
the wrong dtype) are the same classes, so a caller catches one kind of
exception whichever side noticed. A transport failure is ``Unavailable``
(nothing listening) or ``DeadlineExceeded`` (the client's deadline), never a
bare grpc.RpcError, urllib or socket error.
"""

import re

__all__ = [
    "FlowstateError", "Cancelled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
    "AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted",
    "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated",
    "from_code", "from_job",
]

# A message that starts with a field path: "input.files: ...", "graph.nodes[3].attrs.T: ...".
_FIELD = re.compile(r"^([A-Za-z_][\w]*(?:\[\d+\])*(?:\.[\w]+(?:\[\d+\])*)*): ")
# gRPC appends the node to the message: "... [node: NAME]".
_NODE_SUFFIX = re.compile(r" \[node: ([^\]]*)\]$")


class FlowstateError(Exception):
    """An error of the server or of the client, with the server's vocabulary."""

    code = "UNKNOWN"

    def __init__(self, message, node=None, field=None, code=None, http_status=None):
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.node = node or None
        if field is None:
            m = _FIELD.match(message or "")
            field = m.group(1) if m else None
        self.field = field
        self.http_status = http_status

    def __str__(self):
        s = "%s: %s" % (self.code, self.message)
        if self.node and ("'%s'" % self.node) not in self.message:
            s += " [node: %s]" % self.node
        return s

    def __repr__(self):
        return "%s(%r, node=%r, field=%r)" % (type(self).__name__, self.message, self.node,
                                             self.field)


def _make(name, code):
    cls = type(name, (FlowstateError,), {"code": code, "__doc__": "The server's %s." % code})
    return cls


Cancelled = _make("Cancelled", "CANCELLED")
Unknown = _make("Unknown", "UNKNOWN")
InvalidArgument = _make("InvalidArgument", "INVALID_ARGUMENT")
DeadlineExceeded = _make("DeadlineExceeded", "DEADLINE_EXCEEDED")
NotFound = _make("NotFound", "NOT_FOUND")
AlreadyExists = _make("AlreadyExists", "ALREADY_EXISTS")
PermissionDenied = _make("PermissionDenied", "PERMISSION_DENIED")
ResourceExhausted = _make("ResourceExhausted", "RESOURCE_EXHAUSTED")
FailedPrecondition = _make("FailedPrecondition", "FAILED_PRECONDITION")
Aborted = _make("Aborted", "ABORTED")
OutOfRange = _make("OutOfRange", "OUT_OF_RANGE")
Unimplemented = _make("Unimplemented", "UNIMPLEMENTED")
Internal = _make("Internal", "INTERNAL")
Unavailable = _make("Unavailable", "UNAVAILABLE")
DataLoss = _make("DataLoss", "DATA_LOSS")
Unauthenticated = _make("Unauthenticated", "UNAUTHENTICATED")

_BY_CODE = {c.code: c for c in (
    Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
    PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange, Unimplemented,
    Internal, Unavailable, DataLoss, Unauthenticated)}

# When a REST error body is missing or unreadable: the code of its status.
_BY_HTTP_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                   404: "NOT_FOUND", 409: "FAILED_PRECONDITION", 413: "RESOURCE_EXHAUSTED",
                   429: "RESOURCE_EXHAUSTED", 499: "CANCELLED", 500: "INTERNAL",
                   501: "UNIMPLEMENTED", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


def from_code(code, message, node=None, field=None, http_status=None):
    """The error of class `code` ("NOT_FOUND"); Unknown for a code not known."""
    cls = _BY_CODE.get(code, Unknown)
    err = cls(message, node=node, field=field, http_status=http_status)
    if cls is Unknown and code:
        err.code = code
    return err


def from_http(status, body):
    """The error of a REST response: its {"error": {...}} body, else its status."""
    import json
    try:
        e = json.loads(body)["error"]
        return from_code(e.get("code", "UNKNOWN"), e.get("message", ""), node=e.get("node"),
                         http_status=status)
    except (ValueError, KeyError, TypeError, AttributeError):
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
        return from_code(_BY_HTTP_STATUS.get(status, "UNKNOWN"),
                         "HTTP %d: %s" % (status, text.strip()[:500]), http_status=status)


def from_grpc(code_name, details):
    """The error of a gRPC status (code name "NOT_FOUND", details)."""
    details = details or ""
    node = None
    m = _NODE_SUFFIX.search(details)
    if m:
        node = m.group(1)
        details = details[:m.start()]
    return from_code(code_name, details, node=node)


_CODE_PREFIX = re.compile(r"^([A-Z_]+): (.*)$", re.S)


def from_job(job):
    """The error of a job that did not succeed (a dict as GET /v1/jobs/{id} gives it).

    A FAILED job's "error" is "CODE: message [node: X]" when the server knows
    the code: that class, else FailedPrecondition; a CANCELLED job is Cancelled.
    """
    state, error = job.get("state"), job.get("error") or ""
    prefix = "job %s ended %s: " % (job.get("job_id"), state)
    if state == "CANCELLED":
        return Cancelled(prefix + (error or "cancelled"))
    m = _CODE_PREFIX.match(error)
    if m and m.group(1) in _BY_CODE:
        e = from_grpc(m.group(1), m.group(2))
        e.message = prefix + e.message
        e.args = (e.message,)
        return e
    return FailedPrecondition(prefix + error)
