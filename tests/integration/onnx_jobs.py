#!/usr/bin/python3
"""ONNX models through a real `flowstate serve` (issue 44), as a PyTorch user
would: export with torch.onnx.export, upload (POST /v1/models), train with a
job that names the model, predict, and get the bad uploads refused.

- Exactness: the CNN with BatchNorm and the LSTM of examples/onnx/export.py,
  and a MobileNet block (a depthwise convolution of stride 2),
  trained 100 steps with plain SGD on the same batches (Fashion-MNIST, not
  shuffled), give every step's loss within 1e-4 relative of PyTorch's own
  training of the same model from the same weights, and the trained job's
  predictions (BatchNorm in inference mode, its running statistics moved)
  match PyTorch's model.eval().
- Bad uploads (truncated, not a model, an op Flowstate lacks, an opset out
  of range, a cycle, a missing initializer, external data, over
  limits.max_model_bytes) are 4xx naming what is wrong, and store nothing.
- A model a job names cannot be deleted (409); models outlive a restart.

Exit status 0 when all holds, 1 otherwise; 77 (ctest's skip) without torch.

  tests/integration/onnx_jobs.py --flowstate build/flowstate
"""
import argparse
import gzip
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

try:
    import numpy as np
    import onnx
    import onnx.numpy_helper
    from onnx import helper, TensorProto
    import torch
except ImportError as e:
    print("SKIP: needs Debian's python3-torch, python3-onnx and python3-numpy in %s (%s)"
          % (sys.executable, e))
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "onnx"))
import export as examples  # noqa: E402  (examples/onnx/export.py)

DATA = "/usr/share/datasets"
STEPS, BATCH = 100, 32
FAILURES = []


def expect(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


def get_bytes(url, timeout=120):
    """(status, body bytes)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def request(method, url, body=None, raw=None, timeout=120):
    """(status, parsed JSON body)."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    ctype = "application/octet-stream" if raw is not None else "application/json"
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        text = e.read()
        try:
            return e.code, json.loads(text or b"{}")
        except ValueError:
            return e.code, {"error": {"message": text.decode(errors="replace")}}


class Server:
    def __init__(self, flowstate, work, extra=()):
        self.port_file = os.path.join(work, "ports.json")
        if os.path.exists(self.port_file):
            os.remove(self.port_file)
        self.log = open(os.path.join(work, "server.log"), "ab")
        self.proc = subprocess.Popen(
            [flowstate, "serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
             "--data-dir", os.path.join(work, "store"), "--data-root", DATA,
             "--port-file", self.port_file, *extra],
            stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 60
        while not os.path.exists(self.port_file):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not start (see %s)" % self.log.name)
            time.sleep(0.05)
        time.sleep(0.05)
        with open(self.port_file) as f:
            self.http = "http://127.0.0.1:%d" % json.load(f)["http"]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def job_json(model_id, lr, steps=STEPS):
    return {
        "name": "onnx-" + model_id,
        "model": {"onnx": model_id,
                  "inputs": {"image": {"input": "input", "scale": 1 / 255}},
                  "labels": "label"},
        "optimizer": {"type": "sgd", "learning_rate": lr},
        "input": {"format": "idx",
                  "files": {"image": "fashion-mnist/train-images-idx3-ubyte.gz",
                            "label": "fashion-mnist/train-labels-idx1-ubyte.gz"},
                  "batch_size": BATCH, "shuffle": False, "epochs": 1,
                  "max_examples": steps * BATCH},
        "seed": 3,
    }


def wait_job(base, job_id, seconds=300):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        _, j = request("GET", base + "/v1/jobs/" + job_id)
        if j.get("state") in ("SUCCEEDED", "FAILED", "CANCELLED"):
            return j
        time.sleep(0.2)
    return {"state": "TIMEOUT"}


def torch_losses(model, images, labels, shape, lr, steps=STEPS):
    """PyTorch's own training: the same batches, plain SGD."""
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for k in range(steps):
        x = torch.from_numpy(images[k * BATCH:(k + 1) * BATCH].astype(np.float32) * np.float32(1 / 255))
        x = x.reshape((-1,) + shape)
        y = torch.from_numpy(labels[k * BATCH:(k + 1) * BATCH].astype(np.int64))
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


# A learning rate at which training is stable: where the loss jumps (the
# CNN at 0.05 goes from 2.3 to 10 and back), float32 rounding differences
# grow with it, and no two implementations stay within 1e-4.
class DepthwiseBlock(torch.nn.Module):
    """MobileNet's building block, small: a depthwise 3x3 convolution of
    stride 2 between pointwise ones, with BatchNorm."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.net = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8), nn.BatchNorm2d(8), nn.ReLU6(),
            nn.Conv2d(8, 16, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))

    def forward(self, x):
        return self.net(x)


def build(name):
    if name == "depthwise_block":
        torch.manual_seed(0)
        return DepthwiseBlock(), torch.zeros(2, 1, 28, 28)
    return examples.build(name)


def exactness(base, work, images, labels, test_images, name, shape, lr):
    model, example = build(name)
    path = os.path.join(work, name + ".onnx")
    examples.export(model, example, path)
    with open(path, "rb") as f:
        status, up = request("POST", base + "/v1/models?name=" + name, raw=f.read())
    expect(status == 201 and up.get("model_id", "").startswith("model-"),
           "%s: the upload is stored (%d %s)" % (name, status, up.get("model_id", up)))
    if status != 201:
        return None
    expect(up["inputs"][0]["name"] == "input" and up["outputs"][0]["name"] == "logits",
           "%s: the upload names its input and output" % name)
    status, j = request("POST", base + "/v1/jobs", job_json(up["model_id"], lr))
    expect(status == 201, "%s: the job is accepted (%d %s)" % (name, status, j))
    if status != 201:
        return up["model_id"]
    done = wait_job(base, j["job_id"])
    expect(done["state"] == "SUCCEEDED", "%s: the job succeeds (%s %s)"
           % (name, done["state"], done.get("error", "")))
    _, hist = request("GET", base + "/v1/jobs/%s/history" % j["job_id"])
    ours = [s["loss"] for s in hist.get("steps", [])]
    theirs = torch_losses(model, images, labels, shape, lr)
    expect(len(ours) == STEPS, "%s: %d steps in the history" % (name, len(ours)))
    worst = max((abs(a - b) / abs(b) for a, b in zip(ours, theirs)), default=float("inf"))
    expect(worst <= 1e-4, "%s: every step's loss within 1e-4 of PyTorch's (worst %.2e; first %.6f "
           "vs %.6f, last %.6f vs %.6f)" % (name, worst, ours[0] if ours else 0, theirs[0],
                                            ours[-1] if ours else 0, theirs[-1]))
    # Predictions of the trained job against PyTorch's trained model.
    x = test_images[:16]
    body = {"inputs": {"image": {"dtype": "uint8", "shape": list(x.shape),
                                 "data": x.reshape(-1).tolist()}},
            "fetches": ["logits"], "encoding": "data"}
    status, pred = request("POST", base + "/v1/jobs/%s/predict" % j["job_id"], body)
    expect(status == 200, "%s: predict answers (%d)" % (name, status))
    if status == 200:
        got = np.array(pred["outputs"]["logits"]["data"], dtype=np.float64).reshape(16, 10)
        model.eval()
        with torch.no_grad():
            want = model(torch.from_numpy(x.astype(np.float32) / 255).reshape((-1,) + shape)).double().numpy()
        err = np.max(np.abs(got - want)) / max(1.0, np.max(np.abs(want)))
        expect(err <= 1e-3, "%s: the job's predictions match PyTorch's trained model.eval() "
               "(largest difference %.2e)" % (name, err))
        export_check(base, j["job_id"], name, shape, x, got)
    return up["model_id"], j["job_id"]


def export_check(base, job_id, name, shape, x, predicted):
    """GET /v1/jobs/{id}/model.onnx: ONNX's full check passes; its
    initializers are PyTorch's parameter names with the trained values, so
    a fresh PyTorch model loaded with them predicts what the job predicts."""
    status, data = get_bytes(base + "/v1/jobs/%s/model.onnx" % job_id)
    expect(status == 200, "%s: the trained model exports as ONNX (%d, %d bytes)" % (name, status, len(data)))
    if status != 200:
        return
    try:
        m = onnx.load_from_string(data)
        onnx.checker.check_model(m, full_check=True)
        checked = ""
    except Exception as e:  # noqa: BLE001 (any checker failure is the finding)
        checked = str(e)[:200]
    expect(checked == "", "%s: the export passes onnx.checker with full_check %s" % (name, checked))
    if checked:
        return
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
    fresh, _ = build(name)
    state = fresh.state_dict()
    named = [k for k in state if k in inits]
    changed = sum(1 for k in named if not np.array_equal(inits[k], state[k].numpy()))
    expect(len(named) > 0 and changed > 0, "%s: %d of its initializers are PyTorch parameters, %d of "
           "them trained away from the start" % (name, len(named), changed))
    missing = [k for k in state if k not in inits and not k.endswith("num_batches_tracked")]
    if missing:  # e.g. an LSTM's weights, which the exporter re-lays out
        print("     (%s: %d parameters under other names in the export, e.g. %s)" % (name, len(missing), missing[0]))
        return
    for k in named:
        state[k] = torch.from_numpy(inits[k].copy())
    fresh.load_state_dict(state)
    fresh.eval()
    with torch.no_grad():
        want = fresh(torch.from_numpy(x.astype(np.float32) / 255).reshape((-1,) + shape)).double().numpy()
    err = np.max(np.abs(predicted - want)) / max(1.0, np.max(np.abs(want)))
    expect(err <= 1e-5, "%s: PyTorch with the exported weights (BatchNorm statistics included) predicts what "
           "the job predicts (largest difference %.2e)" % (name, err))
    status, up = request("POST", base + "/v1/models?name=%s-trained" % name, raw=data)
    expect(status == 201, "%s: the exported model uploads again (%d)" % (name, status))
    if status == 201:
        request("DELETE", base + "/v1/models/" + up["model_id"])


def walkthrough(base, work):
    """examples/onnx/walkthrough.sh (curl only) with the exported CNN."""
    out = os.path.join(work, "walk")
    r = subprocess.run(["bash", os.path.join(HERE, "..", "..", "examples", "onnx", "walkthrough.sh"),
                        "--server", base, "--onnx", os.path.join(work, "fashion_cnn.onnx"),
                        "--max-steps", "20", "--out", out], capture_output=True, text=True, timeout=240)
    expect(r.returncode == 0, "examples/onnx/walkthrough.sh trains and downloads (exit %d%s)"
           % (r.returncode, (": " + r.stderr.strip()[-300:]) if r.returncode else ""))
    path = os.path.join(out, "fashion_cnn.trained.onnx")
    try:
        onnx.checker.check_model(onnx.load(path), full_check=True)
        ok = ""
    except Exception as e:  # noqa: BLE001
        ok = str(e)[:200]
    expect(ok == "", "the walk-through's trained model passes onnx.checker %s" % ok)
    # Leave nothing behind: its job, then its model.
    ids = [line.split(":")[0] for line in r.stdout.splitlines() if line.startswith(("model-", "job-"))]
    for job in [i for i in ids if i.startswith("job-")][:1]:
        request("DELETE", base + "/v1/jobs/" + job)
    for model in [i for i in ids if i.startswith("model-")][:1]:
        status, _ = request("DELETE", base + "/v1/models/" + model)
        expect(status == 200, "the walk-through's job and model are deleted (%d)" % status)


def cli(flowstate, base, work, job_id):
    """flowstate models upload / list / export / delete."""
    def run(*a):
        return subprocess.run([flowstate, "models", *a, "--server", base], capture_output=True, text=True,
                              timeout=120)
    up = run("upload", os.path.join(work, "fashion_cnn.onnx"), "--name", "my cnn")
    model_id = up.stdout.strip()
    expect(up.returncode == 0 and model_id.startswith("model-"),
           "flowstate models upload prints the id (%s %s)" % (model_id, up.stderr.strip()[-200:]))
    listed = run("list")
    expect(any(line.startswith(model_id + "  my cnn  ") for line in listed.stdout.splitlines()),
           "flowstate models list shows it with its name decoded (%s)" % listed.stdout.strip()[-200:])
    if job_id:
        out = os.path.join(work, "cli_export.onnx")
        ex = run("export", job_id, "--out", out)
        ok = ex.returncode == 0 and os.path.exists(out)
        if ok:
            try:
                onnx.checker.check_model(onnx.load(out), full_check=True)
            except Exception:  # noqa: BLE001
                ok = False
        expect(ok, "flowstate models export writes the trained model (%s)" % ex.stderr.strip()[-200:])
    gone = run("delete", model_id)
    expect(gone.returncode == 0, "flowstate models delete (%s)" % gone.stderr.strip()[-200:])
    bad = run("upload", os.path.join(work, "no-such-file.onnx"))
    expect(bad.returncode == 1 and "cannot read" in bad.stderr, "a missing file is exit 1 saying so (%s)"
           % bad.stderr.strip()[-200:])


def tiny_model(nodes, inits=(), opset=13, inputs=None, outputs=None, domains=()):
    g = helper.make_graph(
        nodes, "g",
        inputs if inputs is not None else [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2])],
        outputs if outputs is not None else [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 2])],
        initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)] +
                          [helper.make_opsetid(d, 1) for d in domains], producer_name="test")
    m.ir_version = 8
    return m.SerializeToString()


def bad_uploads(base, cnn_bytes):
    status, before = request("GET", base + "/v1/models")
    n_before = len(before.get("models", []))
    cases = [
        ("a truncated file", cnn_bytes[:len(cnn_bytes) // 2], 400, "not an ONNX model"),
        ("bytes that are not a model", b"hello, world", 400, "not an ONNX model"),
        ("an op Flowstate lacks",
         tiny_model([helper.make_node("Foo", ["x"], ["y"], name="foo", domain="com.example")],
                    domains=["com.example"]),
         400, "'foo'"),
        ("an op of ONNX's that Flowstate lacks",
         tiny_model([helper.make_node("Det", ["x"], ["y"], name="det")],
                    outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, [])]),
         400, "'det' (Det)"),
        ("an opset out of range", tiny_model([helper.make_node("Relu", ["x"], ["y"], name="r")], opset=18),
         400, "opset 18"),
        ("a cycle", tiny_model([helper.make_node("Relu", ["b"], ["a"], name="first"),
                                helper.make_node("Relu", ["a"], ["b"], name="second"),
                                helper.make_node("Relu", ["x"], ["y"], name="out")]), 400, ""),
        ("a missing initializer", tiny_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]),
         400, "'w'"),
    ]
    ext = helper.make_tensor("w", TensorProto.FLOAT, [2, 2], [1, 0, 0, 1])
    ext.data_location = TensorProto.EXTERNAL
    ext.ClearField("float_data")
    e = ext.external_data.add()
    e.key, e.value = "location", "../../../../etc/passwd"
    cases.append(("external data pointing outside the data root",
                  tiny_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], inits=[ext]),
                  400, "external"))
    big = helper.make_tensor("w", TensorProto.FLOAT, [700, 700], np.zeros(700 * 700, np.float32).tobytes(),
                             raw=True)
    cases.append(("an upload over limits.max_model_bytes",
                  tiny_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], inits=[big],
                             inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 700])],
                             outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 700])]),
                  413, "limits.max_model_bytes"))
    for what, data, want_status, want_text in cases:
        status, body = request("POST", base + "/v1/models", raw=data)
        message = body.get("error", {}).get("message", "")
        expect(status == want_status and want_text.lower() in message.lower(),
               "%s: %d (%s)" % (what, status, message[:160]))
    status, after = request("GET", base + "/v1/models")
    expect(len(after.get("models", [])) == n_before, "nothing bad was stored (%d models before, %d after)"
           % (n_before, len(after.get("models", []))))
    status, _ = request("GET", base + "/healthz")
    expect(status == 200, "the server is up after the bad uploads")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flowstate", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    images = idx(os.path.join(DATA, "fashion-mnist/train-images-idx3-ubyte.gz"))
    labels = idx(os.path.join(DATA, "fashion-mnist/train-labels-idx1-ubyte.gz"))
    test_images = idx(os.path.join(DATA, "fashion-mnist/t10k-images-idx3-ubyte.gz"))
    work = tempfile.mkdtemp(prefix="flowstate_onnx_jobs_")
    server = Server(args.flowstate, work, ["--set", "limits.max_model_bytes=1000000"])
    try:
        base = server.http
        cnn = exactness(base, work, images, labels, test_images, "fashion_cnn", (1, 28, 28), 0.01)
        lstm = exactness(base, work, images, labels, test_images, "lstm", (28, 28), 0.05)
        dw = exactness(base, work, images, labels, test_images, "depthwise_block", (1, 28, 28), 0.01)
        if dw:
            request("DELETE", base + "/v1/jobs/" + dw[1])
            request("DELETE", base + "/v1/models/" + dw[0])
        with open(os.path.join(work, "fashion_cnn.onnx"), "rb") as f:
            bad_uploads(base, f.read())
        walkthrough(base, work)
        cli(args.flowstate, base, work, cnn[1] if cnn else None)
        if cnn:
            model_id, job_id = cnn
            status, body = request("DELETE", base + "/v1/models/" + model_id)
            expect(status == 409 and job_id in body.get("error", {}).get("message", ""),
                   "a model a job names cannot be deleted (%d %s)" % (status, body))
            status, _ = request("DELETE", base + "/v1/jobs/" + job_id)
            status, _ = request("DELETE", base + "/v1/models/" + model_id)
            expect(status == 200, "once the job is deleted the model can be (%d)" % status)
            status, _ = request("GET", base + "/v1/models/" + model_id)
            expect(status == 404, "a deleted model is gone (%d)" % status)
        server.stop()
        # Models outlive a restart; a job names the LSTM again.
        server = Server(args.flowstate, work)
        base = server.http
        status, listed = request("GET", base + "/v1/models")
        ids = [m["model_id"] for m in listed.get("models", [])]
        expect(lstm is not None and lstm[0] in ids and len(ids) == 1,
               "after a restart the store still holds the LSTM, and only it (%s)" % ids)
        if lstm:
            status, j = request("POST", base + "/v1/jobs", job_json(lstm[0], 0.05, steps=2))
            done = wait_job(base, j.get("job_id", "")) if status == 201 else {"state": str(status)}
            expect(done["state"] == "SUCCEEDED", "a job names it after the restart (%s)" % done["state"])
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("%d failure(s)" % len(FAILURES))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
