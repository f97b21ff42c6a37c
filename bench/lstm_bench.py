#!/usr/bin/python3
"""Training throughput of the LSTM example, Flowstate against
PyTorch's nn.LSTM on the same machine, run side by side.

Flowstate: `flowstate train examples/jobs/fashion_lstm.json` (a compact
While over the 28 rows of each image, its gradient a backward While whose
forward values come from per-iteration stacks), eval and checkpoints off,
--steps steps. PyTorch: bench/torch_reference.py --model lstm, nn.LSTM(28,
128) and a linear layer on its last hidden state, with the same batch size,
optimizer (Adam, the job's learning rate and cosine schedule),
preprocessing and thread count (also with OpenBLAS held to one thread). Each
in its own process, --repeat rounds alternating between the two, each
setting's best round counting. Prints JSON lines:

  {"name": "lstm/flowstate/t2", "value": ..., "unit": "examples/s",
   "ratio_to": "lstm/torch/t2/best", "ratio": ...}

where lstm/torch/tN/best is PyTorch's best setting at N threads.
Usage: bench/lstm_bench.py --flowstate build/flowstate [--threads 1,2]
       [--steps 200] [--batch 128] [--repeat 2]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from train_bench import figure, openblas_env, run  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--flowstate", default=os.path.join(ROOT, "build", "flowstate"))
    p.add_argument("--steps", type=int, default=200, help="timed training steps per run")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--repeat", type=int, default=2,
                   help="rounds; each setting's best round counts (the machine is shared)")
    a = p.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    if subprocess.run(["/usr/bin/python3", "-c", "import torch, numpy"],
                      capture_output=True).returncode != 0:
        print("lstm_bench: /usr/bin/python3 has no torch or numpy (python3-torch); "
              "no figures", file=sys.stderr)
        return
    job = json.load(open(os.path.join(ROOT, "examples", "jobs", "fashion_lstm.json")))
    job.pop("eval", None)
    job.pop("checkpoint", None)
    job["max_steps"] = a.steps
    job["input"]["epochs"] = 100
    job["input"]["batch_size"] = a.batch
    lr = job["optimizer"]["learning_rate"]
    sched = job["optimizer"].get("schedule", {})
    decay = sched.get("decay_steps", 0) if sched.get("type") == "cosine_decay" else 0
    torch, flow = {}, {}  # label -> best examples/s
    with tempfile.TemporaryDirectory() as tmp:
        job_path = os.path.join(tmp, "job.json")
        with open(job_path, "w") as f:
            json.dump(job, f)
        for _ in range(a.repeat):  # the two systems alternate, round by round
            for t in threads:
                for label, env in (("t%d" % t, {}), ("t%d/openblas1" % t, {"OPENBLAS_NUM_THREADS": "1"})):
                    out, _ = run(["/usr/bin/python3", os.path.join(HERE, "torch_reference.py"),
                                  "--model", "lstm", "--steps", str(a.steps), "--lr", str(lr),
                                  "--batch-size", str(a.batch), "--threads", str(t),
                                  "--cosine-decay-steps", str(decay)],
                                 env=dict(os.environ, **openblas_env(), **env))
                    eps = json.loads(out.strip().splitlines()[-1])["examples_per_sec"]
                    torch[label] = max(eps, torch.get(label, 0))
                metrics = os.path.join(tmp, "m%d.json" % t)
                # Flowstate's figure counts every step (the first, which
                # builds the graph, included); PyTorch's skips 20 warm-up steps.
                run([a.flowstate, "train", job_path, "--threads", str(t), "--metrics-out", metrics])
                eps = json.load(open(metrics))["examples_per_sec"]
                flow["t%d" % t] = max(eps, flow.get("t%d" % t, 0))
    for t in threads:
        for label in ("t%d" % t, "t%d/openblas1" % t):
            figure("lstm/torch/%s" % label, torch[label], "examples/s")
        best = max(torch["t%d" % t], torch["t%d/openblas1" % t])
        figure("lstm/torch/t%d/best" % t, best, "examples/s")
        eps = flow["t%d" % t]
        figure("lstm/flowstate/t%d" % t, eps, "examples/s", "lstm/torch/t%d/best" % t, eps / best)


if __name__ == "__main__":
    main()
