#!/usr/bin/python3
"""Plots, history and traces as a user meets them:

  - `flowstate serve` on ephemeral ports trains a job with an eval loss and
    an eval accuracy-like metric in [0, 1], and "trace": {"steps": [3]};
  - GET /v1/jobs/ID/history has every step and evaluation; after a restart
    of the server on the same data directory it is the same;
  - `flowstate jobs plot ID --out loss.svg` writes an SVG that parses as XML,
    holds the title, axis labels and legend as text, and one <path> for the
    training loss with as many points as the history has steps;
    `--out loss.png` a PNG (signature, IHDR size); `--out loss.pdf` exits 2
    with a message naming the extension;
  - GET /v1/jobs/ID/traces/3 is Chrome trace JSON; /traces/4 is 404;
  - `flowstate train JOB --plot FILE` does the same for a local run.

Runs in a temporary directory, well under a minute. Exits 0 on success.
"""
import argparse
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"
PROCS = []


def fail(msg):
    print("plot_cli: FAIL: " + msg, file=sys.stderr)
    for p in PROCS:
        if p.poll() is None:
            p.kill()
            p.wait()
    sys.exit(1)


def start_server(binary, tmp, data_dir, data_root):
    port_file = os.path.join(tmp, "ports.json")
    if os.path.exists(port_file):
        os.remove(port_file)
    log = open(os.path.join(tmp, "server.log"), "ab")
    proc = subprocess.Popen([binary, "serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
                             "--port-file", port_file, "--data-dir", data_dir, "--data-root", data_root],
                            stdout=log, stderr=log)
    PROCS.append(proc)
    deadline = time.time() + 30
    while not os.path.exists(port_file) or os.path.getsize(port_file) == 0:
        if proc.poll() is not None:
            fail("flowstate serve exited with %d before listening" % proc.returncode)
        if time.time() > deadline:
            fail("no port file after 30 s")
        time.sleep(0.02)
    time.sleep(0.05)
    with open(port_file) as f:
        return proc, "http://127.0.0.1:%d" % json.load(f)["http"]


def stop_server(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        fail("flowstate serve did not stop 30 s after SIGTERM")
    if rc != 0:
        fail("flowstate serve exited with %d after SIGTERM" % rc)


def request(base, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def job_spec(epochs, trace=None):
    nodes = [
        {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1, 2]}},
        {"name": "y", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1]}},
        {"name": "w", "op": "Variable", "attrs": {"dtype": "float32", "shape": [2, 1], "init": "zeros"}},
        {"name": "p", "op": "MatMul", "inputs": ["x", "w"]},
        {"name": "flat", "op": "Const", "attrs": {"dtype": "int32", "value": [-1]}},
        {"name": "pred", "op": "Reshape", "inputs": ["p", "flat"]},
        {"name": "sq", "op": "SquaredDifference", "inputs": ["pred", "y"]},
        {"name": "axes", "op": "Const", "attrs": {"dtype": "int32", "value": []}},
        {"name": "loss", "op": "Mean", "inputs": ["sq", "axes"]},
        # "close": the fraction of predictions within 0.5 of the target.
        {"name": "err", "op": "Sub", "inputs": ["pred", "y"]},
        {"name": "abs", "op": "Abs", "inputs": ["err"]},
        {"name": "half", "op": "Const", "attrs": {"dtype": "float32", "value": 0.5}},
        {"name": "in", "op": "Less", "inputs": ["abs", "half"]},
        {"name": "inf", "op": "Cast", "inputs": ["in"], "attrs": {"SrcT": "bool", "DstT": "float32"}},
        {"name": "close", "op": "Mean", "inputs": ["inf", "axes"]},
    ]
    spec = {
        "name": "plot-line",
        "graph": {"nodes": nodes},
        "loss": "loss",
        "optimizer": {"type": "sgd", "learning_rate": 0.1},
        "input": {"format": "csv", "files": {"x": "points.csv", "y": "points.csv"},
                  "columns": {"x": ["a", "b"], "y": ["target"]}, "batch_size": 16, "epochs": epochs},
        "eval": {"files": {"x": "points.csv", "y": "points.csv"}, "metrics": ["loss", "close"]},
        "seed": 2,
    }
    if trace:
        spec["trace"] = {"steps": trace}
    return spec


def check_svg(path, history, title_part):
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        fail("%s is not XML: %s" % (path, e))
    if root.tag != SVG + "svg":
        fail("%s: the root is %s, not svg" % (path, root.tag))
    texts = [t.text or "" for t in root.iter(SVG + "text")]
    for want in ("step (batches trained)", "loss", "training loss", "eval loss", "eval close",
                 "metric (fraction, 0-1)"):
        if want not in texts:
            fail("%s has no text %r (texts: %s)" % (path, want, texts))
    if not any(title_part in t for t in texts):
        fail("%s: no title naming %r (texts: %s)" % (path, title_part, texts))
    paths = {p.get("data-series"): p.get("d") for p in root.iter(SVG + "path")}
    d = paths.get("training loss")
    if d is None:
        fail("%s has no training loss curve (paths: %s)" % (path, list(paths)))
    points = d.count("M") + d.count("L")
    if points != len(history["steps"]):
        fail("%s: the loss curve has %d points, the history %d steps" % (path, points, len(history["steps"])))
    evals = paths.get("eval close")
    if evals is None or evals.count("M") + evals.count("L") != len(history["evals"]):
        fail("%s: the eval close curve does not have one point per evaluation" % path)
    # Tick labels on both axes: numbers.
    numbers = [t for t in texts if t.replace(".", "", 1).replace("-", "", 1).isdigit()]
    if len(numbers) < 8:
        fail("%s: too few tick labels (%s)" % (path, numbers))


def check_png(path):
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        fail("%s does not start with the PNG signature" % path)
    width, height = struct.unpack(">II", head[16:24])
    if not (600 <= width <= 2000 and 400 <= height <= 2000):
        fail("%s: odd size %dx%d" % (path, width, height))
    if os.path.getsize(path) < 10000:
        fail("%s is only %d bytes" % (path, os.path.getsize(path)))


def run(cmd, want_rc, what):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if p.returncode != want_rc:
        fail("%s: exit %d (want %d)\nstdout: %s\nstderr: %s" % (what, p.returncode, want_rc, p.stdout, p.stderr))
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flowstate", required=True)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="flowstate_plot_cli_")
    try:
        data_root = os.path.join(tmp, "data")
        os.makedirs(data_root)
        rng = random.Random(5)
        with open(os.path.join(data_root, "points.csv"), "w") as f:
            f.write("a,b,target\n")
            for _ in range(256):
                a, b = rng.uniform(-1, 1), rng.uniform(-1, 1)
                f.write("%.6f,%.6f,%.6f\n" % (a, b, 2 * a - 3 * b))
        data_dir = os.path.join(tmp, "var")
        proc, base = start_server(args.flowstate, tmp, data_dir, data_root)
        code, job = request(base, "POST", "/v1/jobs", job_spec(3, trace=[3]))
        if code != 201:
            fail("submit: %d %s" % (code, job))
        jid = job["job_id"]
        deadline = time.time() + 60
        while job["state"] not in ("SUCCEEDED", "FAILED", "CANCELLED"):
            if time.time() > deadline:
                fail("the job did not finish in 60 s: %s" % job)
            time.sleep(0.05)
            _, job = request(base, "GET", "/v1/jobs/" + jid)
        if job["state"] != "SUCCEEDED":
            fail("the job %s: %s" % (job["state"], job["error"]))
        code, history = request(base, "GET", "/v1/jobs/%s/history" % jid)
        if code != 200 or len(history["steps"]) != job["step"] or len(history["evals"]) != 3:
            fail("history: %d, %d steps (job: %d), %d evals" % (
                code, len(history.get("steps", [])), job["step"], len(history.get("evals", []))))
        code, trace = request(base, "GET", "/v1/jobs/%s/traces/3" % jid)
        if code != 200 or not any(e.get("cat") == "MatMul" for e in trace.get("traceEvents", [])):
            fail("trace of step 3: %d %s" % (code, json.dumps(trace)[:300]))
        code, err = request(base, "GET", "/v1/jobs/%s/traces/4" % jid)
        if code != 404 or "step 4" not in err["error"]["message"]:
            fail("trace of an untraced step: %d %s" % (code, err))

        svg, png = os.path.join(tmp, "loss.svg"), os.path.join(tmp, "loss.png")
        server = ["--server", base]
        run([args.flowstate, "jobs", "plot", jid, "--out", svg] + server, 0, "jobs plot --out .svg")
        check_svg(svg, history, jid)
        run([args.flowstate, "jobs", "plot", jid, "--out=" + png] + server, 0, "jobs plot --out .png")
        check_png(png)
        p = run([args.flowstate, "jobs", "plot", jid, "--out", os.path.join(tmp, "loss.pdf")] + server, 2,
                "jobs plot --out .pdf")
        if ".pdf" not in p.stderr or ".svg or .png" not in p.stderr:
            fail("a bad extension's message: %s" % p.stderr)
        p = run([args.flowstate, "jobs", "plot", "job-999", "--out", svg] + server, 1, "jobs plot of no job")
        if "job-999" not in p.stderr:
            fail("an unknown job's message: %s" % p.stderr)

        # The history survives a restart of the server on the same data.
        stop_server(proc)
        proc, base = start_server(args.flowstate, tmp, data_dir, data_root)
        code, again = request(base, "GET", "/v1/jobs/%s/history" % jid)
        if code != 200 or again != history:
            fail("the history after a restart differs: %d\n%s\n%s" % (code, again, history))
        code, trace_again = request(base, "GET", "/v1/jobs/%s/traces/3" % jid)
        if code != 200 or trace_again != trace:
            fail("the trace after a restart differs: %d" % code)
        stop_server(proc)

        # flowstate train --plot: the same plot for a local run.
        job_file = os.path.join(tmp, "job.json")
        with open(job_file, "w") as f:
            json.dump(job_spec(2), f)
        local_svg = os.path.join(tmp, "local.svg")
        run([args.flowstate, "train", job_file, "--data-root", data_root, "--threads", "1",
             "--plot", local_svg], 0, "train --plot")
        check_svg(local_svg, {"steps": [0] * 32, "evals": [0] * 2}, "plot-line")
        run([args.flowstate, "train", job_file, "--data-root", data_root, "--plot", os.path.join(tmp, "x.jpg")],
            2, "train --plot .jpg")
        print("plot_cli: OK")
    finally:
        for p in PROCS:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
