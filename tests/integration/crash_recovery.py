#!/usr/bin/python3
"""Durability of the real `flowstate serve`, one scenario per run:

  crash      kill -9 during steps and right after a checkpoint was handed to
             the writer (POST /v1/jobs/{id}/checkpoints answered 202: the
             write is in flight), restart each time, and check that the job
             resumes from the last complete checkpoint (its "resume" event),
             that every stored checkpoint reads back whole (exported through
             the server, which verifies every checksum), and that it finishes
             with an eval loss as good as an uninterrupted `flowstate train`
             of the same job.
  disk       a server whose store fails every write while a file exists (the
             FLOWSTATE_TEST_FAIL_WRITES_FILE test hook): failed checkpoints are
             reported in the job's events and in
             flowstate_checkpoint_failures_total, the previous checkpoint stays
             the latest and readable, training and the server go on, and writes
             succeed again once the "disk" is back.
  two        a second server on the same data directory refuses to start
             (exit non-zero, the store's message), and the first one is
             unharmed.
  diskfull   a real full disk: the data directory on a 20 MiB
             tmpfs that checkpoints fill. The server stays up, the failed
             checkpoints are reported ("disk full", the metric), writes
             resume when space is freed; restarted on the full disk it
             starts (read-only), resumes the job from its last checkpoint,
             and writes again once there is room. Before this was fixed the
             server aborted there (a RocksDB assertion). Exits 77 (skipped) where a
             tmpfs cannot be mounted (not root).

Each scenario runs on ephemeral ports with a temporary data directory and a
generated CSV regression, well under a minute.
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


# Every server started, so that a failing scenario leaves none running.
SERVERS = []


def fail(msg):
    print("crash_recovery: FAIL: " + msg, file=sys.stderr)
    for s in SERVERS:
        if s.proc.poll() is None:
            print("--- %s log, last lines:\n%s" % (s.log_path, s.tail()), file=sys.stderr)
    sys.exit(1)


class Server:
    def __init__(self, binary, tmp, data_dir, data_root, env=None, name="server"):
        self.port_file = os.path.join(tmp, name + ".ports.json")
        if os.path.exists(self.port_file):
            os.remove(self.port_file)
        self.log_path = os.path.join(tmp, name + ".log")
        self.log = open(self.log_path, "ab")
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [binary, "serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
             "--port-file", self.port_file, "--data-dir", data_dir, "--data-root", data_root],
            stdout=self.log, stderr=self.log, env=full_env)
        SERVERS.append(self)
        deadline = time.time() + 30
        while not os.path.exists(self.port_file):
            if self.proc.poll() is not None:
                fail("flowstate serve exited with %d before listening:\n%s" % (self.proc.returncode, self.tail()))
            if time.time() > deadline:
                fail("no port file after 30 s")
            time.sleep(0.02)
        with open(self.port_file) as f:
            self.port = json.load(f)["http"]
        self.base = "http://127.0.0.1:%d" % self.port

    def tail(self):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read()[-3000:].decode("utf-8", "replace")

    def request(self, method, path, body=None, raw=False, timeout=30):
        data = None
        headers = {}
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                payload = r.read()
                return r.status, (payload if raw else json.loads(payload or b"{}"))
        except urllib.error.HTTPError as e:
            payload = e.read()
            try:
                return e.code, json.loads(payload)
            except ValueError:
                return e.code, payload
        except (urllib.error.URLError, ConnectionError) as e:
            time.sleep(0.2)
            fail("%s %s: %s; flowstate serve %s:\n%s" % (
                method, path, e,
                "exited with %s" % self.proc.poll() if self.proc.poll() is not None else "is running",
                self.tail()))

    def get(self, path):
        return self.request("GET", path)

    def job(self, job_id):
        code, j = self.get("/v1/jobs/" + job_id)
        if code != 200:
            fail("GET job %s: %d %s" % (job_id, code, j))
        return j

    def wait(self, job_id, pred, what, timeout=40):
        deadline = time.time() + timeout
        while True:
            j = self.job(job_id)
            if pred(j):
                return j
            if j["state"] in ("FAILED", "CANCELLED"):
                fail("job %s is %s while waiting for %s: %s" % (job_id, j["state"], what, j["error"]))
            if time.time() > deadline:
                fail("timed out waiting for %s (job: %s)" % (what, json.dumps(j)))
            time.sleep(0.01)

    def history(self, job_id):
        """The job's notable events (replayed history + its current state)."""
        url = self.base + "/v1/jobs/%s/events?history=1" % job_id
        events = []
        with urllib.request.urlopen(url, timeout=30) as r:
            kind = None
            for raw in r:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    kind = line[len("event: "):]
                elif line.startswith("data: "):
                    if kind == "step":
                        break  # live step summaries: the history is over
                    events.append((kind, json.loads(line[len("data: "):])))
                    if kind == "state" and events[-1][1]["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
                        # A finished job's stream ends after its state.
                        pass
        return events

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.log.close()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                fail("flowstate serve did not stop 30 s after SIGTERM")
            if rc != 0:
                fail("flowstate serve exited with %d after SIGTERM:\n%s" % (rc, self.tail()))
        self.log.close()


def write_data(root):
    rng = random.Random(11)
    with open(os.path.join(root, "points.csv"), "w") as f:
        f.write("a,b,c,target\n")
        for _ in range(512):
            a, b, c = rng.uniform(-1, 1), rng.uniform(-1, 1), rng.uniform(-1, 1)
            f.write("%.6f,%.6f,%.6f,%.6f\n" % (a, b, c, 2 * a - 3 * b + c * c + 0.5 * a * b))


def job(epochs, checkpoint, hidden=128):
    """A two-layer regression MLP with Dropout and Adam (~%d KiB of variables
    with the slots for hidden=128)."""
    return {
        "name": "crash-mlp",
        "graph": {"nodes": [
            {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1, 3]}},
            {"name": "y", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1]}},
            {"name": "w1", "op": "Variable", "attrs": {"dtype": "float32", "shape": [3, hidden], "init": "glorot_uniform"}},
            {"name": "b1", "op": "Variable", "attrs": {"dtype": "float32", "shape": [hidden], "init": "zeros"}},
            {"name": "w2", "op": "Variable", "attrs": {"dtype": "float32", "shape": [hidden, hidden], "init": "glorot_uniform"}},
            {"name": "b2", "op": "Variable", "attrs": {"dtype": "float32", "shape": [hidden], "init": "zeros"}},
            {"name": "w3", "op": "Variable", "attrs": {"dtype": "float32", "shape": [hidden, 1], "init": "glorot_uniform"}},
            {"name": "h1", "op": "MatMul", "inputs": ["x", "w1"]},
            {"name": "h1b", "op": "BiasAdd", "inputs": ["h1", "b1"]},
            {"name": "h1r", "op": "Relu", "inputs": ["h1b"]},
            {"name": "h2", "op": "MatMul", "inputs": ["h1r", "w2"]},
            {"name": "h2b", "op": "BiasAdd", "inputs": ["h2", "b2"]},
            {"name": "h2r", "op": "Relu", "inputs": ["h2b"]},
            {"name": "drop", "op": "Dropout", "inputs": ["h2r"], "attrs": {"rate": 0.1, "seed": 5}},
            {"name": "p", "op": "MatMul", "inputs": ["drop", "w3"]},
            {"name": "flat", "op": "Const", "attrs": {"dtype": "int32", "value": [-1]}},
            {"name": "pred", "op": "Reshape", "inputs": ["p", "flat"]},
            {"name": "sq", "op": "SquaredDifference", "inputs": ["pred", "y"]},
            {"name": "axes", "op": "Const", "attrs": {"dtype": "int32", "value": []}},
            {"name": "loss", "op": "Mean", "inputs": ["sq", "axes"]},
        ]},
        "loss": "loss",
        "optimizer": {"type": "adam", "learning_rate": 0.003},
        "input": {"format": "csv", "files": {"x": "points.csv", "y": "points.csv"},
                  "columns": {"x": ["a", "b", "c"], "y": ["target"]}, "batch_size": 32,
                  "epochs": epochs, "shuffle": True},
        "eval": {"files": {"x": "points.csv", "y": "points.csv"},
                 "columns": {"x": ["a", "b", "c"], "y": ["target"]}, "batch_size": 128,
                 "metrics": ["loss"], "every_epochs": 1000},
        "checkpoint": checkpoint,
        "seed": 21,
    }


def check_checkpoints_whole(server, job_id):
    """Every listed checkpoint exports: the server reads it back through the
    store, which refuses a record failing its checksum (DATA_LOSS)."""
    code, body = server.get("/v1/jobs/%s/checkpoints" % job_id)
    if code != 200:
        fail("listing checkpoints: %d %s" % (code, body))
    steps = [c["step"] for c in body["checkpoints"]]
    for c in body["checkpoints"]:
        if c["bytes"] <= 0 or c["tensors"] < 10:
            fail("checkpoint %s looks empty" % json.dumps(c))
        code, payload = server.request("GET", "/v1/jobs/%s/checkpoints/export?step=%d" % (job_id, c["step"]), raw=True)
        if code == 404:
            # Retention (keep) may delete an old one while training goes on.
            _, now = server.get("/v1/jobs/%s/checkpoints" % job_id)
            if c["step"] not in [n["step"] for n in now["checkpoints"]]:
                continue
        if code != 200 or not payload.startswith(b"FSCK"):
            fail("checkpoint at step %d does not read back: %d %r" % (c["step"], code, str(payload)[:300]))
    return steps


def resumed_step(server, job_id, not_before):
    """Waits for the job's resume event after a restart; returns its step."""
    j = server.wait(job_id, lambda j: j["resumed_from_step"] is not None and j["state"] != "QUEUED",
                    "the job to resume")
    events = [e for e in server.history(job_id) if e[0] == "resume"]
    if not events:
        fail("no resume event in the job's history")
    last = events[-1][1]
    if "message" not in last or ("step %d" % j["resumed_from_step"]) not in last["message"]:
        fail("the resume event does not name step %d: %s" % (j["resumed_from_step"], json.dumps(last)))
    if j["resumed_from_step"] < not_before:
        fail("resumed from step %d, but a complete checkpoint at step %d existed"
             % (j["resumed_from_step"], not_before))
    return j["resumed_from_step"]


def scenario_crash(args, tmp, data_root):
    # 150 epochs (2400 steps, a few seconds): long enough that the kills land
    # mid-training on a fast machine (at 30 epochs the job could finish
    # before the first kill, and the restart then had nothing to resume).
    spec = job(epochs=150, checkpoint={"every_steps": 10, "keep": 3}, hidden=384)
    job_file = os.path.join(tmp, "job.json")
    with open(job_file, "w") as f:
        json.dump(spec, f)
    ref_file = os.path.join(tmp, "reference.json")
    t0 = time.time()
    subprocess.run([args.flowstate, "train", job_file, "--metrics-out", ref_file, "--threads", "1",
                    "--data-root", data_root], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(ref_file) as f:
        reference = json.load(f)
    print("crash_recovery: uninterrupted run: %d steps, eval loss %.5f (%.1f s)"
          % (reference["steps"], reference["loss"], time.time() - t0))
    data_dir = os.path.join(tmp, "data")

    # 1. kill -9 in the middle of training (between checkpoints).
    s = Server(args.flowstate, tmp, data_dir, data_root)
    code, j = s.request("POST", "/v1/jobs", spec)
    if code != 201:
        fail("submit: %d %s" % (code, j))
    job_id = j["job_id"]
    j = s.wait(job_id, lambda j: j["step"] >= 45 and j["checkpoint"] is not None, "45 steps and a checkpoint")
    before = s.job(job_id)
    last_complete = before["checkpoint"]["step"]
    s.kill9()
    print("crash_recovery: killed at step >= %d; last complete checkpoint %d" % (before["step"], last_complete))

    # 2. Restart: resumes from the last complete checkpoint (or a newer one
    # completed between our GET and the kill).
    s = Server(args.flowstate, tmp, data_dir, data_root)
    step = resumed_step(s, job_id, last_complete)
    if step > before["step"] + 20:
        fail("resumed from step %d, beyond where the job was killed (%d)" % (step, before["step"]))
    steps = check_checkpoints_whole(s, job_id)
    print("crash_recovery: resumed from step %d; checkpoints %s all read back" % (step, steps))

    # 3. kill -9 while a checkpoint is being written: POST returns 202 once
    # the snapshot is handed to the writer; kill at once.
    s.wait(job_id, lambda j: j["step"] >= step + 15 and j["checkpoint"]["step"] > step,
           "15 more steps and a checkpoint")
    complete = s.job(job_id)["checkpoint"]["step"]
    code, taken = s.request("POST", "/v1/jobs/%s/checkpoints" % job_id)
    if code not in (201, 202):
        fail("POST checkpoints: %d %s" % (code, taken))
    s.kill9()
    before2 = taken["step"]
    print("crash_recovery: killed with the checkpoint of step %d in flight (HTTP %d)" % (before2, code))

    s = Server(args.flowstate, tmp, data_dir, data_root)
    step2 = resumed_step(s, job_id, complete)
    steps = check_checkpoints_whole(s, job_id)
    if step2 not in steps and not (len(steps) >= 3 and min(steps) > step2):  # keep: 3 may have moved on
        fail("resumed from step %d, which is not a stored checkpoint (%s)" % (step2, steps))
    if step2 > before2:
        fail("resumed from step %d, after the in-flight checkpoint %d" % (step2, before2))
    print("crash_recovery: resumed from step %d (the in-flight one was %s); checkpoints %s read back"
          % (step2, "complete" if step2 == before2 else "lost, the previous one was used", steps))

    # 4. Run to the end: as good as the uninterrupted run.
    j = s.wait(job_id, lambda j: j["state"] == "SUCCEEDED", "the job to finish", timeout=60)
    if j["step"] != reference["steps"]:
        fail("the resumed job ran %d steps, the uninterrupted one %d" % (j["step"], reference["steps"]))
    loss = j["metrics"]["loss"]
    if not loss <= reference["loss"] * 1.10 + 1e-3:
        fail("eval loss %.5f after the crashes, %.5f uninterrupted" % (loss, reference["loss"]))
    if j["checkpoint"] is None or j["checkpoint"]["step"] != j["step"]:
        fail("no final checkpoint: %s" % json.dumps(j["checkpoint"]))
    # A clean restart keeps the finished job readable and able to predict.
    s.stop()
    s = Server(args.flowstate, tmp, data_dir, data_root)
    fin = s.job(job_id)
    if fin["state"] != "SUCCEEDED" or fin["metrics"].get("loss") != loss:
        fail("the finished job came back as %s" % json.dumps(fin))
    code, out = s.request("POST", "/v1/jobs/%s/predict" % job_id,
                          {"inputs": {"x": [[0.5, -0.25, 0.1]]}, "fetches": ["pred"]})
    if code != 200:
        fail("predict after restart: %d %s" % (code, out))
    s.stop()
    print("crash_recovery: finished with eval loss %.5f (uninterrupted %.5f); predicts after a restart"
          % (loss, reference["loss"]))


def metric(server, name, job_id):
    code, text = server.request("GET", "/metrics", raw=True)
    total = 0.0
    for line in text.decode().splitlines():
        if line.startswith(name + "{") and ('job_id="%s"' % job_id) in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def scenario_disk(args, tmp, data_root):
    flag = os.path.join(tmp, "disk-full")
    s = Server(args.flowstate, tmp, os.path.join(tmp, "data"), data_root,
               env={"FLOWSTATE_TEST_FAIL_WRITES_FILE": flag})
    # Far more epochs than the test needs (it cancels the job at the end): the
    # job must still be running when the "disk" comes back, however slow the
    # machine is; at 200 epochs (1.6 s) it sometimes finished first.
    code, j = s.request("POST", "/v1/jobs", job(epochs=100000, checkpoint={"every_steps": 5, "keep": 2}, hidden=32))
    if code != 201:
        fail("submit: %d %s" % (code, j))
    job_id = j["job_id"]
    good = s.wait(job_id, lambda j: j["checkpoint"] is not None, "a first checkpoint")["checkpoint"]["step"]
    open(flag, "w").close()  # the disk fails from now on
    j = s.wait(job_id, lambda j: j["checkpoint_failures"] >= 2, "two failed checkpoints")
    if j["state"] != "RUNNING":
        fail("the job stopped when its checkpoints failed: %s" % json.dumps(j))
    kept = j["checkpoint"]["step"]
    code, body = s.get("/healthz")
    if code != 200:
        fail("the server is unhealthy while the disk fails: %d" % code)
    failures = metric(s, "flowstate_checkpoint_failures_total", job_id)
    if failures < 2:
        fail("flowstate_checkpoint_failures_total{job_id=%s} is %s" % (job_id, failures))
    events = [e for e in s.history(job_id)
              if e[0] == "checkpoint" and "failed" in e[1].get("message", "") and "written" not in e[1]["message"]]
    if not events:
        fail("no failed-checkpoint event")
    steps = check_checkpoints_whole(s, job_id)
    if max(steps) != kept:
        fail("the latest stored checkpoint is %d, the job reports %d" % (max(steps), kept))
    print("crash_recovery: %d failed writes reported (%s); checkpoint %d still the latest and whole"
          % (failures, events[0][1]["message"][:100], kept))
    os.remove(flag)  # the disk is back
    j = s.wait(job_id, lambda j: j["checkpoint"]["step"] > kept, "a checkpoint after the disk came back")
    if metric(s, "flowstate_checkpoint_bytes", job_id) <= 0:
        fail("no flowstate_checkpoint_bytes for the job")
    code, _ = s.request("POST", "/v1/jobs/%s/cancel" % job_id)
    s.stop()
    print("crash_recovery: writes succeed again (checkpoint %d); first good one was %d"
          % (j["checkpoint"]["step"], good))


def scenario_two(args, tmp, data_root):
    data_dir = os.path.join(tmp, "data")
    first = Server(args.flowstate, tmp, data_dir, data_root, name="first")
    code, j = first.request("POST", "/v1/jobs", job(epochs=2, checkpoint={"every_steps": 4}, hidden=16))
    if code != 201:
        fail("submit: %d %s" % (code, j))
    second = subprocess.run([args.flowstate, "serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
                             "--data-dir", data_dir, "--data-root", data_root],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    err = second.stderr.decode()
    if second.returncode == 0:
        fail("a second server on the same data directory started")
    if "in use" not in err or data_dir not in err:
        fail("the second server's message does not say the directory is in use: %r" % err)
    j = first.wait(j["job_id"], lambda j: j["state"] == "SUCCEEDED", "the first server's job")
    steps = check_checkpoints_whole(first, j["job_id"])
    # The CLI reads the data directory itself: refused while the server holds it.
    cli = [args.flowstate, "checkpoints"]
    busy = subprocess.run(cli + ["list", j["job_id"], "--data-dir", data_dir], capture_output=True, timeout=30)
    if busy.returncode == 0 or b"in use" not in busy.stderr:
        fail("flowstate checkpoints on a served data directory: %d %r" % (busy.returncode, busy.stderr))
    first.stop()
    # Without a server: list, export the final checkpoint, import it elsewhere.
    listed = subprocess.run(cli + ["list", j["job_id"], "--data-dir", data_dir], capture_output=True, timeout=30)
    if listed.returncode != 0 or str(j["step"]).encode() not in listed.stdout:
        fail("flowstate checkpoints list: %d %r %r" % (listed.returncode, listed.stdout, listed.stderr))
    exported = os.path.join(tmp, "final.fsck")
    subprocess.run(cli + ["export", j["job_id"], str(j["step"]), exported, "--data-dir", data_dir],
                   check=True, capture_output=True, timeout=30)
    # The same checkpoint for numpy: an .npz that agrees with the .fsck, refused by import.
    npz = os.path.join(tmp, "final.npz")
    subprocess.run(cli + ["export", j["job_id"], str(j["step"]), npz, "--format", "npz", "--data-dir", data_dir],
                   check=True, capture_output=True, timeout=30)
    subprocess.run(["/usr/bin/python3", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                     "compare_npz_fsck.py"), npz, exported],
                   check=True, timeout=60)
    bad = subprocess.run(cli + ["export", j["job_id"], str(j["step"]), npz, "--format", "zip", "--data-dir", data_dir],
                         capture_output=True, timeout=30)
    if bad.returncode != 2 or b"--format: expected" not in bad.stderr:
        fail("flowstate checkpoints export --format zip: %d %r" % (bad.returncode, bad.stderr))
    other = os.path.join(tmp, "other-data")
    refused = subprocess.run(cli + ["import", npz, "--data-dir", other], capture_output=True, timeout=30)
    if refused.returncode == 0 or b".npz" not in refused.stderr:
        fail("flowstate checkpoints import of an .npz: %d %r" % (refused.returncode, refused.stderr))
    imported = subprocess.run(cli + ["import", exported, "--data-dir", other], capture_output=True, timeout=30)
    if imported.returncode != 0 or imported.stdout.split() != [b"import-1", str(j["step"]).encode()]:
        fail("flowstate checkpoints import: %d %r %r" % (imported.returncode, imported.stdout, imported.stderr))
    # A server on the other directory fine-tunes from the import.
    s = Server(args.flowstate, tmp, other, data_root, name="other")
    tuned = job(epochs=1, checkpoint={}, hidden=16)
    tuned["init_from"] = {"job": "import-1", "step": j["step"]}
    code, t = s.request("POST", "/v1/jobs", tuned)
    if code != 201:
        fail("init_from an imported checkpoint: %d %s" % (code, t))
    tuned["init_from"] = {"job": "import-1", "step": j["step"] + 1}
    code, bad = s.request("POST", "/v1/jobs", tuned)
    if code != 400 or "init_from" not in bad["error"]["message"]:
        fail("init_from a missing step: %d %s" % (code, bad))
    s.wait(t["job_id"], lambda x: x["state"] == "SUCCEEDED", "the fine-tuning job")
    s.stop()
    print("crash_recovery: second server refused (exit %d: %s); the first finished its job, checkpoints %s"
          % (second.returncode, err.strip().splitlines()[-1][:120], steps))


def fill(path, limit_mib=None):
    """Writes zeros to `path` until the disk is full (or limit_mib MiB)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    written, chunk = 0, b"\0" * 65536
    try:
        while limit_mib is None or written < limit_mib << 20:
            written += os.write(fd, chunk)
    except OSError:
        pass
    finally:
        os.close(fd)
    return written


def scenario_diskfull(args, tmp, data_root):
    small = os.path.join(tmp, "small")
    os.makedirs(small)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", small], capture_output=True)
    if r.returncode != 0:
        print("crash_recovery: SKIP diskfull: cannot mount a 20 MiB tmpfs (needs root or CAP_SYS_ADMIN): "
              + r.stderr.decode().strip())
        sys.exit(77)
    try:
        diskfull_on(args, tmp, data_root, small)
    finally:
        for s in SERVERS:
            if s.proc.poll() is None:
                s.proc.kill()
                s.proc.wait()
        subprocess.run(["umount", "-l", small])


def diskfull_on(args, tmp, data_root, small):
    data_dir = os.path.join(small, "data")
    room = os.path.join(small, "room")
    fill(room, limit_mib=8)  # given back later
    s = Server(args.flowstate, tmp, data_dir, data_root)
    # ~1.8 MB a checkpoint (hidden 384 with Adam's slots), one every 5 steps.
    code, j = s.request("POST", "/v1/jobs", job(epochs=100000, checkpoint={"every_steps": 5, "keep": 3}, hidden=384))
    if code != 201:
        fail("submit: %d %s" % (code, j))
    job_id = j["job_id"]
    j = s.wait(job_id, lambda j: j["checkpoint_failures"] >= 2, "two failed checkpoints on the full disk", timeout=90)
    if j["state"] != "RUNNING":
        fail("the job stopped when its checkpoints failed: %s" % json.dumps(j))
    # (A later checkpoint may have succeeded: the store's recovery after a
    # failure frees the log it replays.)
    if j["checkpoint_error"] and "disk full" not in j["checkpoint_error"]:
        fail("the checkpoint error does not say the disk is full: %r" % j["checkpoint_error"])
    code, _ = s.get("/healthz")
    if code != 200:
        fail("the server is unhealthy on the full disk: %d" % code)
    if metric(s, "flowstate_checkpoint_failures_total", job_id) < 2:
        fail("flowstate_checkpoint_failures_total{job_id=%s} < 2" % job_id)
    kept = j["checkpoint"]["step"] if j["checkpoint"] else -1
    events = [e for e in s.history(job_id) if e[0] == "checkpoint" and "disk full" in e[1].get("message", "")]
    if not events:
        fail("no failed-checkpoint event saying the disk is full")
    steps = check_checkpoints_whole(s, job_id) if kept >= 0 else []
    print("crash_recovery: disk full at step %d: %d failures reported (%s); checkpoints %s whole"
          % (j["step"], j["checkpoint_failures"], events[0][1]["message"][:120], steps))

    os.remove(room)  # room again: the store resumes by itself
    j = s.wait(job_id, lambda j: j["checkpoint"] is not None and j["checkpoint"]["step"] > kept,
               "a checkpoint after space was freed", timeout=60)
    print("crash_recovery: space freed: checkpoint at step %d written" % j["checkpoint"]["step"])

    # Fill the disk to the last block and crash; restart on the full disk.
    fill(room)
    before = s.job(job_id)["checkpoint_failures"]
    s.wait(job_id, lambda j: j["checkpoint_failures"] > before, "a failure on the refilled disk", timeout=90)
    s.kill9()
    s = Server(args.flowstate, tmp, data_dir, data_root, name="restarted")
    if "read-only" not in s.tail():
        print("crash_recovery: note: the restarted server did not report a read-only store:\n" + s.tail())
    code, _ = s.get("/healthz")
    if code != 200:
        fail("the restarted server is unhealthy: %d" % code)
    back = s.wait(job_id, lambda j: j["state"] == "RUNNING" and j["step"] > 0, "the job to resume on the full disk")
    failures_before = back["checkpoint_failures"]
    s.wait(job_id, lambda j: j["checkpoint_failures"] > failures_before, "a failed checkpoint after the restart")
    latest = s.job(job_id)["checkpoint"]["step"]
    print("crash_recovery: restarted on the full disk: job resumed (checkpoint %d still the latest)" % latest)
    os.remove(room)
    j = s.wait(job_id, lambda j: j["checkpoint"]["step"] > latest, "a checkpoint once there is room", timeout=60)
    check_checkpoints_whole(s, job_id)
    s.request("POST", "/v1/jobs/%s/cancel" % job_id)
    s.stop()
    print("crash_recovery: writes resumed after the restart (checkpoint %d)" % j["checkpoint"]["step"])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--flowstate", required=True)
    p.add_argument("--scenario", choices=["crash", "disk", "two", "diskfull"], required=True)
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="flowstate_crash_")
    data_root = os.path.join(tmp, "datasets")
    os.makedirs(data_root)
    write_data(data_root)
    t0 = time.time()
    try:
        {"crash": scenario_crash, "disk": scenario_disk, "two": scenario_two,
         "diskfull": scenario_diskfull}[args.scenario](args, tmp, data_root)
    finally:
        for s in SERVERS:
            if s.proc.poll() is None:
                s.proc.kill()
                s.proc.wait()
        if os.environ.get("FLOWSTATE_KEEP_TMP"):
            print("crash_recovery: kept " + tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("crash_recovery: %s OK in %.1f s" % (args.scenario, time.time() - t0))


if __name__ == "__main__":
    main()
