#!/usr/bin/python3
"""Training throughput and peak memory of the example models, Flowstate
against PyTorch 1.13 on the same machine, run side by side.

For each model (examples/jobs/fashion_mlp.json, fashion_cnn.json) it runs
`flowstate train` for --steps (--cnn-steps) steps (eval off) and
bench/torch_reference.py with the same model, preprocessing, batch size,
optimizer and learning-rate schedule, at 1 and 2 threads (PyTorch also with
OpenBLAS on one thread, and the CNN in channels-last format; OpenBLAS with
its SkylakeX kernels on AVX-512 machines, see openblas_env), each in its own
process (so peak RSS is that process's own), --repeat rounds alternating
between the two, keeping each setting's best round, and prints JSON lines:

  {"name": "train/mlp/flowstate/t1", "value": ..., "unit": "examples/s",
   "ratio_to": "train/mlp/torch/best", "ratio": ...}
  {"name": "train/mlp/flowstate/peak_rss", ... "ratio_to": "train/mlp/torch/peak_rss"}

The ratio compares with PyTorch's best setting (its 2-thread runs
oversubscribe two cores); the RSS ratio with PyTorch's smallest peak.
Usage: bench/train_bench.py --flowstate build/flowstate (`make bench` runs it).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(cmd, env=None):
    """Runs cmd; returns (stdout, peak RSS in bytes of that process)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(p.pid, 0)
    out = p.stdout.read().decode()
    err = p.stderr.read().decode()
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.stderr.write(err)
        raise SystemExit("%s failed with %d" % (" ".join(cmd), p.returncode))
    return out, usage.ru_maxrss * 1024


def figure(name, value, unit, ratio_to=None, ratio=None):
    print(json.dumps({"name": name, "value": round(value, 4), "unit": unit,
                      "ratio_to": ratio_to, "ratio": None if ratio is None else round(ratio, 3)}))
    sys.stdout.flush()


def openblas_env():
    """Debian's OpenBLAS 0.3.21 (behind PyTorch's CPU matmuls: its BLAS is
    "generic", i.e. libblas.so.3) misdetects AVX-512 CPUs newer than it
    (Sapphire Rapids) and runs slow kernels, a third of the speed of its
    SkylakeX kernels here; PyTorch gets those, as matmul_bench's OpenBLAS
    does. An explicit OPENBLAS_CORETYPE is left alone."""
    if "OPENBLAS_CORETYPE" in os.environ:
        return {}
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return {}
    return {"OPENBLAS_CORETYPE": "SkylakeX"} if " avx512f " in flags else {}


def torch_settings(model, threads):
    """(label, extra arguments, extra environment) of each PyTorch setting
    tried: every thread count, also with OpenBLAS held to one thread (its
    own pool otherwise oversubscribes the cores), and for the CNN also in
    channels-last memory format (oneDNN's preferred layout)."""
    out = []
    for t in threads:
        out.append(("t%d" % t, ["--threads", str(t)], {}))
        out.append(("t%d/openblas1" % t, ["--threads", str(t)], {"OPENBLAS_NUM_THREADS": "1"}))
        if model == "cnn":
            out.append(("t%d/channels_last" % t, ["--threads", str(t), "--channels-last"], {}))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--flowstate", default=os.path.join(ROOT, "build", "flowstate"))
    p.add_argument("--steps", type=int, default=300, help="training steps per MLP run")
    p.add_argument("--cnn-steps", type=int, default=100, help="training steps per CNN run")
    p.add_argument("--repeat", type=int, default=2,
                   help="rounds; each setting's best round counts (the machine is shared)")
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--threads", default="1,2")
    a = p.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    if subprocess.run(["/usr/bin/python3", "-c", "import torch, numpy"],
                      capture_output=True).returncode != 0:
        print("train_bench: /usr/bin/python3 has no torch or numpy (python3-torch); "
              "no training figures", file=sys.stderr)
        return
    for model in a.models.split(","):
        steps = a.cnn_steps if model == "cnn" else a.steps
        job = json.load(open(os.path.join(ROOT, "examples", "jobs", "fashion_%s.json" % model)))
        job.pop("eval", None)
        job.pop("checkpoint", None)
        job["max_steps"] = steps
        job["input"]["epochs"] = 100
        sched = job["optimizer"].get("schedule", {})
        decay = sched.get("decay_steps", 0) if sched.get("type") == "cosine_decay" else 0
        settings = torch_settings(model, threads)
        torch, flow = {}, {}  # label -> (best examples/s, peak RSS of that run)
        with tempfile.TemporaryDirectory() as tmp:
            job_path = os.path.join(tmp, "job.json")
            with open(job_path, "w") as f:
                json.dump(job, f)
            for _ in range(a.repeat):  # the two systems alternate, round by round
                for label, args, env in settings:
                    out, rss = run(["/usr/bin/python3", os.path.join(HERE, "torch_reference.py"),
                                    "--model", model, "--steps", str(steps),
                                    "--cosine-decay-steps", str(decay)] + args,
                                   env=dict(os.environ, **openblas_env(), **env))
                    eps = json.loads(out.strip().splitlines()[-1])["examples_per_sec"]
                    if label not in torch or eps > torch[label][0]:
                        torch[label] = (eps, rss)
                for t in threads:
                    metrics = os.path.join(tmp, "m%d.json" % t)
                    _, rss = run([a.flowstate, "train", job_path, "--threads", str(t),
                                  "--metrics-out", metrics])
                    eps = json.load(open(metrics))["examples_per_sec"]
                    label = "t%d" % t
                    if label not in flow or eps > flow[label][0]:
                        flow[label] = (eps, rss)
        for label, _, _ in settings:
            figure("train/%s/torch/%s" % (model, label), torch[label][0], "examples/s")
        best_label = max(torch, key=lambda k: torch[k][0])
        best = torch[best_label][0]
        best_rss = min(v[1] for v in torch.values())
        figure("train/%s/torch/best" % model, best, "examples/s")
        figure("train/%s/torch/peak_rss" % model, best_rss / 2**20, "MiB")
        for t in threads:
            eps, rss = flow["t%d" % t]
            figure("train/%s/flowstate/t%d" % (model, t), eps, "examples/s",
                   "train/%s/torch/best" % model, eps / best)
            figure("train/%s/flowstate/t%d/peak_rss" % (model, t), rss / 2**20, "MiB",
                   "train/%s/torch/peak_rss" % model, rss / best_rss)


if __name__ == "__main__":
    main()
