"""What the server's answers become in Python, the same over both transports: a
job's dict with its NaNs as floats, a gRPC message as REST's dict, an Event."""

TERMINAL_STATES = ("SUCCEEDED", "FAILED", "CANCELLED")


def _nan_safe(v):
    """REST writes NaN and the infinities as strings: back to floats."""
    if isinstance(v, str) and v in ("NaN", "Infinity", "-Infinity"):
        return float(v.replace("Infinity", "inf"))
    return v


def _fix_job(job):
    for k in ("loss", "examples_per_sec", "eta_seconds"):
        if k in job:
            job[k] = _nan_safe(job[k])
    if isinstance(job.get("metrics"), dict):
        job["metrics"] = {k: _nan_safe(v) for k, v in job["metrics"].items()}
    return job


class Event:
    """One event of a job's stream: kind ("state", "step", "eval", "checkpoint",
    "resume", "nan"), the job right after it (a dict), its time (RFC 3339
    string or None) and the message of checkpoint, resume and nan events."""

    __slots__ = ("kind", "job", "time", "message")

    def __init__(self, kind, job, time=None, message=""):
        self.kind, self.job, self.time, self.message = kind, job, time, message

    def __repr__(self):
        return "Event(%r, %s %s step %s)" % (self.kind, self.job.get("job_id"),
                                           self.job.get("state"), self.job.get("step"))


def _msg_dict(m):
    """A message as REST's dict: ints stay ints, unset Timestamps and optionals are None."""
    out = {}
    for f in m.DESCRIPTOR.fields:
        v = getattr(m, f.name)
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            vf = f.message_type.fields_by_name["value"]
            out[f.name] = {k: (_msg_dict(x) if vf.message_type else x) for k, x in v.items()}
        elif f.label == f.LABEL_REPEATED:
            out[f.name] = [_msg_dict(x) if f.message_type else x for x in v]
        elif f.message_type is not None:
            if not m.HasField(f.name):
                out[f.name] = None
            elif f.message_type.full_name == "google.protobuf.Timestamp":
                out[f.name] = v.ToJsonString()
            else:
                out[f.name] = _msg_dict(v)
        elif f.containing_oneof is not None and f.containing_oneof.name.startswith("_"):
            out[f.name] = v if m.HasField(f.name) else None  # proto3 optional
        else:
            out[f.name] = v
    return out
