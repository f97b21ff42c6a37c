#!/usr/bin/python3
"""Training throughput of the ONNX example models (examples/onnx/export.py),
Flowstate training the exported file against PyTorch training the same
module, side by side on the same machine; and the time to upload (and so
import) the ResNet-18 file.

Flowstate: `flowstate train` of a job naming the exported .onnx file (SGD
with momentum 0.9, batch --batch, Fashion-MNIST scaled by 1/255, eval and
checkpoints off, --steps steps; its figure counts every step, the first,
which builds the graph, included). PyTorch: the module export.py built,
in train mode, the same batches, optimizer and thread count, after 3
warm-up steps. Each in its own process, --repeat rounds alternating, each
side's best round counting. Prints JSON lines:

  {"name": "onnx/resnet18/flowstate/t2", "value": ..., "unit": "examples/s",
   "ratio_to": "onnx/resnet18/torch/t2", "ratio": ...}
  {"name": "onnx/resnet18/upload_seconds", "value": ..., "unit": "s"}

Usage: bench/onnx_bench.py --flowstate build/flowstate [--models a,b]
       [--threads 2] [--steps 20] [--batch 64] [--repeat 2]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from train_bench import figure, openblas_env, run  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"

TORCH_RUN = r"""
import gzip, json, sys, time
import numpy as np, torch
sys.path.insert(0, sys.argv[1])
import export
name, steps, batch, threads, lr = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
torch.set_num_threads(threads)
def idx(p):
    d = gzip.open(p).read(); n = d[3]
    dims = [int.from_bytes(d[4 + 4 * i:8 + 4 * i], "big") for i in range(n)]
    return np.frombuffer(d, np.uint8, offset=4 + 4 * n).reshape(dims)
images = idx(sys.argv[7] + "/train-images-idx3-ubyte.gz"); labels = idx(sys.argv[7] + "/train-labels-idx1-ubyte.gz")
model, example = export.build(name)
shape = tuple(example.shape[1:])
model.train()
opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
def step(k):
    k %= len(images) // batch
    x = torch.from_numpy(images[k * batch:(k + 1) * batch].astype(np.float32) / 255).reshape((-1,) + shape)
    y = torch.from_numpy(labels[k * batch:(k + 1) * batch].astype(np.int64))
    opt.zero_grad(); torch.nn.functional.cross_entropy(model(x), y).backward(); opt.step()
for k in range(3): step(k)
t = time.perf_counter()
for k in range(steps): step(3 + k)
print(json.dumps({"examples_per_sec": steps * batch / (time.perf_counter() - t)}))
"""


def cpu_name():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def upload_seconds(flowstate, path, tmp):
    """Seconds for POST /v1/models of `path` (read, imported, stored)."""
    port_file = os.path.join(tmp, "ports.json")
    proc = subprocess.Popen([flowstate, "serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
                             "--data-dir", os.path.join(tmp, "store"), "--port-file", port_file,
                             "--set", "limits.max_model_bytes=268435456",
                             "--set", "http.body_limit_bytes=268435456"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(port_file):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("onnx_bench: the server did not start")
            time.sleep(0.05)
        time.sleep(0.05)
        port = json.load(open(port_file))["http"]
        data = open(path, "rb").read()
        best = float("inf")
        for _ in range(3):
            req = urllib.request.Request("http://127.0.0.1:%d/v1/models" % port, data=data, method="POST",
                                         headers={"Content-Type": "application/octet-stream"})
            t = time.perf_counter()
            with urllib.request.urlopen(req, timeout=120) as r:
                model_id = json.loads(r.read())["model_id"]
            best = min(best, time.perf_counter() - t)
            urllib.request.urlopen(urllib.request.Request(
                "http://127.0.0.1:%d/v1/models/%s" % (port, model_id), method="DELETE"), timeout=60).read()
        return best
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--flowstate", default=os.path.join(ROOT, "build", "flowstate"))
    p.add_argument("--models", default="fashion_cnn,lstm,transformer,mobilenet_v2,resnet18")
    p.add_argument("--steps", type=int, default=20, help="timed training steps per run")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--repeat", type=int, default=2,
                   help="rounds; each side's best round counts (the machine is shared)")
    a = p.parse_args()
    if subprocess.run(["/usr/bin/python3", "-c", "import torch, numpy"], capture_output=True).returncode != 0:
        print("onnx_bench: /usr/bin/python3 has no torch or numpy (python3-torch); no figures",
              file=sys.stderr)
        return
    print(json.dumps({"cpu": cpu_name(), "nproc": os.cpu_count()}))
    threads = [int(t) for t in a.threads.split(",")]
    examples = os.path.join(ROOT, "examples", "onnx")
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "root")
        os.makedirs(os.path.join(root, "models"))
        shutil.copytree(DATA, os.path.join(root, "fashion-mnist"))
        for name in a.models.split(","):
            run(["/usr/bin/python3", os.path.join(examples, "export.py"), os.path.join(root, "models"), name])
            job = {"model": {"onnx": "models/%s.onnx" % name,
                             "inputs": {"image": {"input": "input", "scale": 1 / 255}}, "labels": "label"},
                   "optimizer": {"type": "sgd", "learning_rate": a.lr, "momentum": 0.9},
                   "input": {"format": "idx",
                             "files": {"image": "fashion-mnist/train-images-idx3-ubyte.gz",
                                       "label": "fashion-mnist/train-labels-idx1-ubyte.gz"},
                             "batch_size": a.batch, "shuffle": False, "epochs": 100},
                   "max_steps": a.steps}
            job_path = os.path.join(tmp, name + ".json")
            json.dump(job, open(job_path, "w"))
            torch_best, flow_best = {}, {}
            for _ in range(a.repeat):
                for t in threads:
                    out, _ = run(["/usr/bin/python3", "-c", TORCH_RUN, examples, name, str(a.steps),
                                  str(a.batch), str(t), str(a.lr), DATA],
                                 env=dict(os.environ, **openblas_env()))
                    eps = json.loads(out.strip().splitlines()[-1])["examples_per_sec"]
                    torch_best[t] = max(eps, torch_best.get(t, 0))
                    metrics = os.path.join(tmp, "m.json")
                    run([a.flowstate, "train", job_path, "--threads", str(t), "--data-root", root,
                         "--metrics-out", metrics])
                    eps = json.load(open(metrics))["examples_per_sec"]
                    flow_best[t] = max(eps, flow_best.get(t, 0))
            for t in threads:
                ref = "onnx/%s/torch/t%d" % (name, t)
                figure(ref, torch_best[t], "examples/s")
                figure("onnx/%s/flowstate/t%d" % (name, t), flow_best[t], "examples/s", ref,
                       flow_best[t] / torch_best[t])
            if name == "resnet18":
                figure("onnx/resnet18/upload_seconds",
                       upload_seconds(a.flowstate, os.path.join(root, "models", "resnet18.onnx"), tmp), "s")


if __name__ == "__main__":
    main()
