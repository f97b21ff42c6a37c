#!/usr/bin/python3
"""`flowstate train` as a user runs it: a small CSV regression job under its
own data root trains, converges, and writes --metrics-out with every field
the format promises; a bad job exits 2 naming the JSON path of the field; a
dataset path escaping the data root exits 2; bad flags exit 2; a NaN loss
fails naming the step unless on_nan is "skip_step".

  tests/integration/train_cli.py --flowstate build/flowstate
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile

FAILURES = []


def expect(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL " + what)


def job(lr=0.1, path="points.csv", epochs=40):
    return {
        "name": "cli-regression",
        "graph": {"nodes": [
            {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1, 2]}},
            {"name": "y", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1]}},
            {"name": "w", "op": "Variable",
             "attrs": {"dtype": "float32", "shape": [2, 1], "init": "glorot_uniform"}},
            {"name": "b", "op": "Variable", "attrs": {"dtype": "float32", "shape": [1], "init": "zeros"}},
            {"name": "p", "op": "MatMul", "inputs": ["x", "w"]},
            {"name": "pb", "op": "BiasAdd", "inputs": ["p", "b"]},
            {"name": "flat", "op": "Const", "attrs": {"dtype": "int32", "value": [-1]}},
            {"name": "pred", "op": "Reshape", "inputs": ["pb", "flat"]},
            {"name": "sq", "op": "SquaredDifference", "inputs": ["pred", "y"]},
            {"name": "axes", "op": "Const", "attrs": {"dtype": "int32", "value": []}},
            {"name": "loss", "op": "Mean", "inputs": ["sq", "axes"]},
            {"name": "mse", "op": "Mean", "inputs": ["sq", "axes"]},
        ]},
        "loss": "loss",
        "optimizer": {"type": "momentum", "learning_rate": lr, "momentum": 0.9},
        "input": {"format": "csv", "files": {"x": path, "y": path},
                  "columns": {"x": ["a", "b"], "y": ["target"]}, "batch_size": 16,
                  "shuffle": True, "epochs": epochs},
        "eval": {"files": {"x": path, "y": path}, "columns": {"x": ["a", "b"], "y": ["target"]},
                 "metrics": ["mse"]},
        "seed": 3,
    }


def run(flowstate, args, cwd):
    p = subprocess.run([flowstate, "train"] + args, cwd=cwd, capture_output=True, text=True,
                       timeout=120)
    return p.returncode, p.stdout, p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flowstate", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "data")
        os.makedirs(root)
        rng = random.Random(3)
        with open(os.path.join(root, "points.csv"), "w") as f:
            f.write("a,b,target\n")
            for _ in range(256):
                x1, x2 = rng.uniform(-1, 1), rng.uniform(-1, 1)
                f.write("%.6f,%.6f,%.6f\n" % (x1, x2, 2 * x1 - 3 * x2 + 0.5))
        with open(os.path.join(tmp, "secret.csv"), "w") as f:
            f.write("a,b,target\n1,2,3\n")

        def write(name, j):
            path = os.path.join(tmp, name)
            with open(path, "w") as f:
                json.dump(j, f)
            return path

        # A job that trains, with --metrics-out.
        metrics = os.path.join(tmp, "metrics.json")
        rc, _, err = run(a.flowstate, [write("good.json", job()), "--data-root", root,
                                       "--threads", "2", "--metrics-out", metrics], tmp)
        expect(rc == 0, "good job exits 0, got %d: %s" % (rc, err[-500:]))
        if rc == 0:
            m = json.load(open(metrics))
            for k in ("steps", "epochs", "examples_per_sec", "final_loss", "mse"):
                expect(k in m, "metrics-out has %r: %s" % (k, m))
            expect(m.get("steps") == 16 * 40, "steps = 16 per epoch x 40: %s" % m.get("steps"))
            expect(m.get("epochs") == 40, "epochs = 40: %s" % m.get("epochs"))
            expect(m.get("final_loss", 1) < 1e-3, "converged: final_loss %s" % m.get("final_loss"))
            expect(m.get("mse", 1) < 1e-3, "eval metric mse %s" % m.get("mse"))
            expect(m.get("examples_per_sec", 0) > 0, "examples_per_sec > 0")
            expect("epoch 40/40" in err, "progress lines name the epoch")

        # Errors in the job: exit 2, the JSON path of the field in the message.
        rc, _, err = run(a.flowstate, [write("bad_lr.json", job(lr=0)), "--data-root", root], tmp)
        expect(rc == 2, "learning_rate 0 exits 2, got %d" % rc)
        expect("optimizer.learning_rate" in err, "message names optimizer.learning_rate: " + err)
        bad = job()
        bad["input"]["batch_size"] = "many"
        rc, _, err = run(a.flowstate, [write("bad_batch.json", bad), "--data-root", root], tmp)
        expect(rc == 2, "batch_size string exits 2, got %d" % rc)
        expect("input.batch_size" in err, "message names input.batch_size: " + err)
        rc, _, err = run(a.flowstate, [write("escape.json", job(path="../secret.csv")),
                                       "--data-root", root], tmp)
        expect(rc == 2, "a path escaping the data root exits 2, got %d: %s" % (rc, err))
        expect("secret.csv" in err, "message names the path: " + err)
        # A loss that blows up (momentum at 1e18) fails naming the step, as
        # in the server (on_nan "fail"); with "skip_step" the NaN steps of a
        # row that is NaN are skipped and counted.
        rc, _, err = run(a.flowstate, [write("blowup.json", job(lr=1e18, epochs=2)),
                                       "--data-root", root], tmp)
        expect(rc == 1, "a NaN/Inf loss exits 1, got %d: %s" % (rc, err[-500:]))
        expect(re.search(r"flowstate train: step \d+: the (loss|gradient of '\w+') (is|has) (NaN|Inf)",
                         err) is not None, "the error names the step: " + err[-500:])
        with open(os.path.join(root, "nan.csv"), "w") as f:
            f.write("a,b,target\n")
            for i in range(64):
                f.write("nan,1,1\n" if i == 3 else "%d,1,%d\n" % (i % 3, i % 3))
        skip = job(lr=0.01, path="nan.csv", epochs=2)
        skip["input"]["shuffle"] = False
        skip["on_nan"] = "skip_step"
        del skip["eval"]
        rc, _, err = run(a.flowstate, [write("skip.json", skip), "--data-root", root,
                                       "--metrics-out", metrics], tmp)
        expect(rc == 0, "skip_step exits 0, got %d: %s" % (rc, err[-500:]))
        if rc == 0:
            m = json.load(open(metrics))
            expect(m.get("skipped_steps") == 2, "2 skipped steps (one a epoch): %s" % m)
            expect(m.get("steps") == 8, "every step counted: %s" % m)
            expect("step 1: the loss is NaN; the step was skipped" in err, "names the step: " + err)
        rc, _, err = run(a.flowstate, [os.path.join(tmp, "missing.json")], tmp)
        expect(rc == 2, "a missing job file exits 2, got %d" % rc)
        rc, _, err = run(a.flowstate, [write("good2.json", job()), "--threads", "zero"], tmp)
        expect(rc == 2, "--threads zero exits 2, got %d" % rc)
    if FAILURES:
        print("%d check(s) failed" % len(FAILURES))
        return 1
    print("flowstate train CLI: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
