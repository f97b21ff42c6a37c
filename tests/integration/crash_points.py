#!/usr/bin/python3
"""A job's server killed with SIGKILL at each point of the job's life,
the point chosen deterministically: `flowstate serve` built with
FLOWSTATE_FAULT_POINTS stops itself (SIGSTOP) the first time a job reaches
the fault point named by FLOWSTATE_TEST_STOP_AT (jobs/fault_points.h); this
test waits until the process is stopped there, kills it with SIGKILL and
restarts it on the same data directory.

  single     one process: before the first checkpoint (step-done@3),
             between checkpoints (step-done@12), after the last step's
             checkpoint (final-checkpoint-written), during the final
             evaluation (final-evaluation), after it before SUCCEEDED is
             stored (final-evaluation-recorded), with a pause or a cancel
             asked during a step (pause-pending, cancel-pending) and while
             the pause's or cancel's checkpoint is being written
             (checkpoint-write:pause, checkpoint-write:cancel). Each ends as
             an uninterrupted run of the same job does: SUCCEEDED at the
             same step with the same eval metrics and a final checkpoint (a
             paused one after it is resumed), or CANCELLED; every stored
             checkpoint reads back whole; the job never steps past its
             last step; its event history shows each event's own values.
  replicas   a cluster (`flowstate serve` as task 0 and master, `flowstate
             worker` as task 1), a job with 2 replicas, one a task: the
             master killed after the last step's checkpoint and after the
             final evaluation was stored; restarted, it ends SUCCEEDED with
             the metrics of an uninterrupted run on the same cluster.

Every wait has a deadline; ports are free ones; only processes this test
started are signalled, by PID. Exits 77 (skipped) when the binary was built
without fault points.

  tests/integration/crash_points.py --flowstate build/flowstate --scenario single
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import crash_recovery  # noqa: E402
from crash_recovery import Server, SERVERS, check_checkpoints_whole, fail, write_data  # noqa: E402

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def log(msg):
    print("crash_points: " + msg, flush=True)


def job_spec(epochs=3, policy=True):
    """crash_recovery's regression MLP, small: 16 steps an epoch, a
    checkpoint every 5 steps (the last step, 48, is not one of them; none
    without `policy`), an evaluation at the end only."""
    checkpoint = {"every_steps": 5, "keep": 20} if policy else {"keep": 20}
    spec = crash_recovery.job(epochs=epochs, checkpoint=checkpoint, hidden=32)
    spec["name"] = "crash-points"
    return spec


def stopped(pid):
    """Whether process `pid` is stopped (state T in /proc/<pid>/stat)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except OSError:
        return False


def wait_stopped(server, point, timeout=60):
    """Waits until the server stopped itself at `point`; fails otherwise."""
    deadline = time.time() + timeout
    while not stopped(server.proc.pid):
        if server.proc.poll() is not None:
            fail("the server exited (%s) instead of stopping at %s" % (server.proc.returncode, point))
        if time.time() > deadline:
            fail("the server did not stop at %s within %d s" % (point, timeout))
        time.sleep(0.01)
    if ("stopped at " + point.split("@")[0]) not in server.tail():
        fail("the server stopped, but its log does not name %s:\n%s" % (point, server.tail()))


def kill_stopped(server):
    """SIGKILL to our stopped server (a stopped process dies of SIGKILL)."""
    os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait(timeout=30)
    server.log.close()


def history(server, job_id):
    """The job's events as GET /v1/jobs/{id}/events?history=1 replays them."""
    return server.history(job_id)


def finished(server, job_id, timeout=90):
    deadline = time.time() + timeout
    while True:
        j = server.job(job_id)
        if j["state"] in TERMINAL:
            return j
        if time.time() > deadline:
            fail("job %s did not finish within %d s: %s" % (job_id, timeout, json.dumps(j)))
        time.sleep(0.02)


def same_metrics(got, want, what):
    for k, v in want.items():
        g = got.get(k)
        if g is None or abs(g - v) > 1e-6 * (1 + abs(v)):
            fail("%s: metric %s is %s, the uninterrupted run's %s" % (what, k, g, v))


def check_history(server, job_id, what):
    """Each replayed event carries its own moment's values: the ones before
    the first evaluation have no metrics, steps never go back except at a
    resume, checkpoint events name their own checkpoint, the loss of the
    first event is not the final one."""
    events = history(server, job_id)
    if not events:
        fail("%s: no history" % what)
    seen_eval = False
    for kind, e in events:
        if "time" not in e or e["time"] is None:
            fail("%s: event %s without its time: %s" % (what, kind, json.dumps(e)))
        if kind == "eval":
            seen_eval = True
            if not e["metrics"]:
                fail("%s: an eval event without metrics: %s" % (what, json.dumps(e)))
        elif not seen_eval and e["metrics"]:
            fail("%s: the %s event at step %d, before any evaluation, shows metrics %s"
                 % (what, kind, e["step"], e["metrics"]))
        if kind == "checkpoint" and "written" in e.get("message", ""):
            if e["checkpoint"] is None or ("step %d " % e["checkpoint"]["step"]) not in e["message"] + " ":
                fail("%s: a checkpoint event shows another checkpoint: %s" % (what, json.dumps(e)))
    first = events[0][1]
    last = events[-1][1]
    if first["step"] != 0 or first["loss"] not in (0, None):
        fail("%s: the first event (the job's start) shows a later step or loss: %s" % (what, json.dumps(first)))
    if first["error"] or (last["state"] != "FAILED" and any(e["error"] for _, e in events)):
        fail("%s: an event shows an error the job never had" % what)
    return events


class Single:
    """The single-process scenario: one job per fault point."""

    def __init__(self, args, tmp, data_root):
        self.args, self.tmp, self.data_root = args, tmp, data_root
        self.n = 0

    def start(self, data_dir, stop_at=None):
        self.n += 1
        env = {"FLOWSTATE_TEST_STOP_AT": stop_at} if stop_at else {}
        return Server(self.args.flowstate, self.tmp, data_dir, self.data_root, env=env, name="s%d" % self.n)

    def reference(self):
        s = self.start(os.path.join(self.tmp, "ref"))
        code, j = s.request("POST", "/v1/jobs", job_spec())
        if code != 201:
            fail("submit: %d %s" % (code, j))
        ref = finished(s, j["job_id"])
        if ref["state"] != "SUCCEEDED" or ref["step"] != 48:
            fail("the uninterrupted run: %s" % json.dumps(ref))
        events = history(s, j["job_id"])
        kinds = [k for k, _ in events]
        # The last step's checkpoint comes before the final evaluation.
        last_ckpt = max(i for i, (k, e) in enumerate(events) if k == "checkpoint")
        last_eval = max(i for i, (k, e) in enumerate(events) if k == "eval")
        if not last_ckpt < last_eval or events[last_ckpt][1]["checkpoint"]["step"] != 48:
            fail("the final checkpoint does not precede the final evaluation: %s" % kinds)
        check_history(s, j["job_id"], "uninterrupted")
        s.stop()
        log("uninterrupted: 48 steps, metrics %s" % ref["metrics"])
        return ref

    def crash(self, point, ref, ask=None, expect_state="SUCCEEDED", resumed=None):
        """Runs the job on a server that stops at `point` (after asking
        `ask`, "pause" or "cancel", once the job runs: then a job far longer
        than the test, so that it is still running, with one checkpoint
        taken on demand and no policy, so that the request's own checkpoint
        is never skipped for a policy one at the same step), kills it there,
        restarts, and checks how the job ends; `resumed`: the range the
        step it resumed from must lie in."""
        data_dir = os.path.join(self.tmp, "d%d" % self.n)
        s = self.start(data_dir, stop_at=point)
        code, j = s.request("POST", "/v1/jobs", job_spec(epochs=100000, policy=False) if ask else job_spec())
        if code != 201:
            fail("submit: %d %s" % (code, j))
        job_id = j["job_id"]
        acked = []
        if ask:
            s.wait(job_id, lambda j: j["state"] == "RUNNING" and j["step"] >= 7, "7 steps")
            code, body = s.request("POST", "/v1/jobs/%s/checkpoints" % job_id)
            if code not in (201, 202):
                fail("%s: POST checkpoints: %d %s" % (point, code, body))
            s.wait(job_id, lambda j: j["checkpoint"] is not None, "the checkpoint on demand")

            def send():
                try:
                    code, _ = s.request("POST", "/v1/jobs/%s/%s" % (job_id, ask), timeout=30)
                    acked.append(code)
                except Exception:  # the server may stop before it answers
                    acked.append(None)
            t = threading.Thread(target=send, daemon=True)
            t.start()
        wait_stopped(s, point)
        kill_stopped(s)
        if ask:
            t.join(timeout=35)
            if acked and acked[0] not in (200, 202, None):
                fail("%s: POST %s answered %s" % (point, ask, acked[0]))
        s = self.start(data_dir)
        if expect_state == "PAUSED":
            j = s.job(job_id)
            if j["state"] != "PAUSED":
                fail("%s: the pause asked before the kill was lost: %s" % (point, json.dumps(j)))
            paused_at = j["step"]
            steps = check_checkpoints_whole(s, job_id)
            code, body = s.request("POST", "/v1/jobs/%s/resume" % job_id)
            if code != 200:
                fail("%s: resume: %d %s" % (point, code, body))
            j = s.wait(job_id, lambda j: j["state"] == "RUNNING" and j["resumed_from_step"] is not None
                       and j["step"] > j["resumed_from_step"], "the resumed job to step")
            if not ((max(steps) if steps else 0) == j["resumed_from_step"] <= paused_at):
                fail("%s: resumed from step %s; latest checkpoint %s, paused at %d"
                     % (point, j["resumed_from_step"], steps, paused_at))
            code, body = s.request("POST", "/v1/jobs/%s/cancel" % job_id)
            if code != 200:
                fail("%s: cancel: %d %s" % (point, code, body))
            check_history(s, job_id, point)
            s.stop()
            log("%-26s -> PAUSED at step %d (checkpoints %s), resumed from %d; %s answered %s"
                % (point, paused_at, steps, j["resumed_from_step"], ask, acked[0] if acked else "-"))
            return
        j = finished(s, job_id)
        if j["state"] != expect_state:
            fail("%s: the job ended %s (%s), expected %s" % (point, j["state"], j["error"], expect_state))
        steps = check_checkpoints_whole(s, job_id)
        if expect_state == "SUCCEEDED":
            if j["step"] != ref["step"]:
                fail("%s: the job ended at step %d, the uninterrupted one at %d" % (point, j["step"], ref["step"]))
            same_metrics(j["metrics"], ref["metrics"], point)
            if j["checkpoint"] is None or j["checkpoint"]["step"] != 48 or 48 not in steps:
                fail("%s: no final checkpoint (job: %s; stored %s)" % (point, json.dumps(j["checkpoint"]), steps))
        got = j["resumed_from_step"]
        if resumed is not None and (got is None or not resumed[0] <= got <= resumed[1]):
            fail("%s: resumed from step %s, expected %d..%d" % (point, j["resumed_from_step"], *resumed))
        if expect_state == "SUCCEEDED" and max(steps) > 48:
            fail("%s: a checkpoint past the last step: %s" % (point, steps))
        events = check_history(s, job_id, point)
        evals = [e for k, e in events if k == "eval"]
        if expect_state == "SUCCEEDED" and point == "final-evaluation-recorded" and len(evals) != 1:
            fail("%s: the recorded final evaluation ran again (%d eval events)" % (point, len(evals)))
        s.stop()
        log("%-26s -> %s at step %d (resumed from %s, checkpoints %s%s)"
            % (point, j["state"], j["step"], j["resumed_from_step"], steps,
               ", %s answered %s" % (ask, acked[0] if acked else "-") if ask else ""))

    def run(self):
        ref = self.reference()
        # Before the first checkpoint (step 5): from step 0. Between
        # checkpoints: from the last one written (10, or 5 while 10's write
        # was in flight; a policy one may move a step when the previous is
        # still being written).
        self.crash("step-done@3", ref, resumed=(0, 0))
        # Policy checkpoints are written on the writer's thread, which the
        # SIGSTOP at a step stops wherever it is: at step 12 the checkpoints
        # of steps 5 and 10 may or may not be durable yet (under load the
        # writer lags), so the job may resume from 0, 5 or 10, and ends as
        # the uninterrupted run did either way.
        self.crash("step-done@12", ref, resumed=(0, 10))
        self.crash("final-checkpoint-written", ref, resumed=(48, 48))
        self.crash("final-evaluation", ref, resumed=(48, 48))
        self.crash("final-evaluation-recorded", ref, resumed=(48, 48))
        self.crash("pause-pending", ref, ask="pause", expect_state="PAUSED")
        self.crash("checkpoint-write:pause", ref, ask="pause", expect_state="PAUSED")
        self.crash("cancel-pending", ref, ask="cancel", expect_state="CANCELLED")
        self.crash("checkpoint-write:cancel", ref, ask="cancel", expect_state="CANCELLED")


def scenario_replicas(args, tmp, data_root):
    from cluster_failover import free_ports, request
    data_root1 = os.path.join(tmp, "datasets1")
    shutil.copytree(data_root, data_root1)
    http, g0, g1 = free_ports(3)
    cluster = json.dumps({"worker": ["127.0.0.1:%d" % g0, "127.0.0.1:%d" % g1]})
    api = "http://127.0.0.1:%d" % http
    data_dir = os.path.join(tmp, "data")
    procs = []

    def start(i, stop_at=None):
        env = dict(os.environ)
        if stop_at:
            env["FLOWSTATE_TEST_STOP_AT"] = stop_at
        path = os.path.join(tmp, "task-%d.log" % i)
        logf = open(path, "ab")
        if i == 0:
            cmd = [args.flowstate, "serve", "--http", "127.0.0.1:%d" % http, "--data-dir", data_dir,
                   "--data-root", data_root]
        else:
            cmd = [args.flowstate, "worker", "--data-root", data_root1]
        cmd += ["--grpc", "127.0.0.1:%d" % (g0 if i == 0 else g1), "--cluster", cluster,
                "--task", "worker:%d" % i,
                "--set", "cluster_options.heartbeat_interval_seconds=0.5",
                "--set", "cluster_options.heartbeat_deadline_seconds=2"]
        p = subprocess.Popen(cmd, stdout=logf, stderr=logf, env=env)
        p.log_path = path
        procs.append(p)
        return p

    def tail(p):
        with open(p.log_path, "rb") as f:
            return f.read()[-3000:].decode("utf-8", "replace")

    def get(path):
        try:
            return request("GET", api + path, timeout=10)
        except (OSError, ValueError):
            return None, None

    def wait(pred, seconds, what, master):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if master.poll() is not None:
                fail("the master exited (%s) while waiting for %s:\n%s" % (master.returncode, what, tail(master)))
            v = pred()
            if v:
                return v
            time.sleep(0.05)
        fail("timed out after %d s waiting for %s:\n%s" % (seconds, what, tail(master)))

    def cluster_up(master):
        def up():
            code, body = get("/v1/cluster")
            return code == 200 and len(body["tasks"]) == 2 and all(t["state"] == "UP" for t in body["tasks"])
        wait(up, 60, "both tasks UP", master)

    def run_job(master):
        spec = job_spec(epochs=2)
        spec["replicas"] = 2
        code, j = request("POST", api + "/v1/jobs", spec)
        if code != 201:
            fail("submit the replicated job: %d %s" % (code, j))
        if [p["device"] for p in j.get("placement", [])] != ["/job:worker/task:0", "/job:worker/task:1"]:
            fail("the job is not placed one replica per task: %s" % j.get("placement"))
        return j["job_id"]

    def done(job_id, master):
        return wait(lambda: (lambda c, j: j if c == 200 and j["state"] in TERMINAL else None)(
            *get("/v1/jobs/" + job_id)), 120, "job %s to end" % job_id, master)

    try:
        worker = start(1)
        master = start(0)
        cluster_up(master)
        ref_id = run_job(master)
        ref = done(ref_id, master)
        if ref["state"] != "SUCCEEDED":
            fail("the uninterrupted replicated run: %s" % json.dumps(ref))
        total = ref["step"]
        log("replicas: uninterrupted run on 2 tasks: %d steps, metrics %s" % (total, ref["metrics"]))
        master.send_signal(signal.SIGTERM)
        master.wait(timeout=30)
        for point in ("final-checkpoint-written", "final-evaluation-recorded"):
            master = start(0, stop_at=point)
            cluster_up(master)
            job_id = run_job(master)
            deadline = time.time() + 120
            while not stopped(master.pid):
                if master.poll() is not None or time.time() > deadline:
                    fail("the master did not stop at %s:\n%s" % (point, tail(master)))
                time.sleep(0.01)
            if ("stopped at " + point) not in tail(master):
                fail("the master stopped, but not at %s:\n%s" % (point, tail(master)))
            os.kill(master.pid, signal.SIGKILL)
            master.wait(timeout=30)
            if worker.poll() is not None:
                fail("the worker died with the master")
            master = start(0)
            j = done(job_id, master)
            if j["state"] != "SUCCEEDED" or j["step"] != total:
                fail("replicas, %s: the job ended %s at step %d (%s)" % (point, j["state"], j["step"], j["error"]))
            same_metrics(j["metrics"], ref["metrics"], "replicas, " + point)
            if j["checkpoint"] is None or j["checkpoint"]["step"] != total:
                fail("replicas, %s: no final checkpoint: %s" % (point, json.dumps(j["checkpoint"])))
            if j["resumed_from_step"] != total:
                fail("replicas, %s: resumed from %s, not the last step" % (point, j["resumed_from_step"]))
            log("replicas: master killed at %-26s -> SUCCEEDED at step %d, metrics %s"
                % (point, j["step"], j["metrics"]))
            master.send_signal(signal.SIGTERM)
            master.wait(timeout=30)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--flowstate", required=True)
    p.add_argument("--scenario", choices=["single", "replicas"], required=True)
    args = p.parse_args()
    args.flowstate = os.path.abspath(args.flowstate)
    with open(args.flowstate, "rb") as f:
        built_with_hooks = b"FLOWSTATE_TEST_STOP_AT" in f.read()
    if not built_with_hooks:
        print("crash_points: SKIP: %s was built without FLOWSTATE_FAULT_POINTS" % args.flowstate)
        sys.exit(77)
    tmp = tempfile.mkdtemp(prefix="flowstate_crash_points_")
    data_root = os.path.join(tmp, "datasets")
    os.makedirs(data_root)
    write_data(data_root)
    t0 = time.time()
    try:
        if args.scenario == "single":
            Single(args, tmp, data_root).run()
        else:
            scenario_replicas(args, tmp, data_root)
    finally:
        for s in SERVERS:
            if s.proc.poll() is None:
                s.proc.kill()
                s.proc.wait()
        if os.environ.get("FLOWSTATE_KEEP_TMP"):
            log("kept " + tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    log("%s OK in %.1f s" % (args.scenario, time.time() - t0))


if __name__ == "__main__":
    main()
