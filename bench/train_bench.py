#!/usr/bin/python3
"""Training throughput and peak memory of the example models, Flowstate
against PyTorch 1.13 on the same machine, run side by side.

For each model (examples/jobs/fashion_mlp.json, fashion_cnn.json) it runs
`flowstate train` for --steps steps (eval off) and bench/torch_reference.py
with the same model, batch size, optimizer and thread count, at 1 and 2
threads, each in its own process (so peak RSS is that process's own), and
prints JSON lines:

  {"name": "train/mlp/flowstate/t1", "value": ..., "unit": "examples/s",
   "ratio_to": "train/mlp/torch/best", "ratio": ...}
  {"name": "train/mlp/flowstate/peak_rss", ... "ratio_to": "train/mlp/torch/peak_rss"}

The ratio compares with PyTorch's best thread setting (its 2-thread runs
oversubscribe two cores). Usage: bench/train_bench.py --flowstate build/flowstate
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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--flowstate", default=os.path.join(ROOT, "build", "flowstate"))
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--threads", default="1,2")
    a = p.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    for model in a.models.split(","):
        job = json.load(open(os.path.join(ROOT, "examples", "jobs", "fashion_%s.json" % model)))
        job.pop("eval", None)
        job.pop("checkpoint", None)
        job["max_steps"] = a.steps
        job["input"]["epochs"] = 100
        with tempfile.TemporaryDirectory() as tmp:
            job_path = os.path.join(tmp, "job.json")
            with open(job_path, "w") as f:
                json.dump(job, f)
            torch = {}
            for t in threads:
                sched = job["optimizer"].get("schedule", {})
                decay = sched.get("decay_steps", 0) if sched.get("type") == "cosine_decay" else 0
                out, rss = run(["/usr/bin/python3", os.path.join(HERE, "torch_reference.py"),
                                "--model", model, "--threads", str(t), "--steps", str(a.steps),
                                "--cosine-decay-steps", str(decay)])
                r = json.loads(out.strip().splitlines()[-1])
                torch[t] = (r["examples_per_sec"], rss)
                figure("train/%s/torch/t%d" % (model, t), r["examples_per_sec"], "examples/s")
            best = max(v[0] for v in torch.values())
            best_rss = min(v[1] for v in torch.values())
            figure("train/%s/torch/best" % model, best, "examples/s")
            figure("train/%s/torch/peak_rss" % model, best_rss / 2**20, "MiB")
            for t in threads:
                metrics = os.path.join(tmp, "m%d.json" % t)
                _, rss = run([a.flowstate, "train", job_path, "--threads", str(t),
                              "--metrics-out", metrics])
                m = json.load(open(metrics))
                figure("train/%s/flowstate/t%d" % (model, t), m["examples_per_sec"], "examples/s",
                       "train/%s/torch/best" % model, m["examples_per_sec"] / best)
                figure("train/%s/flowstate/t%d/peak_rss" % (model, t), rss / 2**20, "MiB",
                       "train/%s/torch/peak_rss" % model, rss / best_rss)


if __name__ == "__main__":
    main()
