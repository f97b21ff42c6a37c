#!/usr/bin/python3
"""The recommender example as a user runs it: examples/data/make_clicks.py
writes a small click dataset into a temporary data root (same seed twice:
the same bytes), and `flowstate train examples/jobs/recommender.json`, cut
to fewer epochs, learns the planted user/item groups: test accuracy well
above chance (0.5) and the majority class, within reach of the Bayes rate
the generator prints.

  tests/integration/recommender_example.py --flowstate build/flowstate --source .
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flowstate", required=True)
    ap.add_argument("--source", required=True)
    a = ap.parse_args()
    make = os.path.join(a.source, "examples", "data", "make_clicks.py")
    small = ["--users", "500", "--items", "100", "--train", "30000", "--test", "4000"]
    failures = []

    with tempfile.TemporaryDirectory() as root:
        out = os.path.join(root, "clicks")
        p = subprocess.run([sys.executable, make, out] + small, capture_output=True, text=True,
                           check=True)
        print(p.stdout, end="")
        m = re.search(r"Bayes rate[^:]*: ([0-9.]+)", p.stdout)
        bayes = float(m.group(1)) if m else 0.0
        if not 0.8 < bayes < 0.95:
            failures.append("make_clicks.py printed no plausible Bayes rate")
        again = os.path.join(root, "again")
        subprocess.run([sys.executable, make, again] + small, capture_output=True, check=True)
        for name in ("train.csv", "test.csv"):
            with open(os.path.join(out, name), "rb") as f1, open(os.path.join(again, name), "rb") as f2:
                if f1.read() != f2.read():
                    failures.append(name + " differs between two runs with the same seed")

        with open(os.path.join(a.source, "examples", "jobs", "recommender.json")) as f:
            job = json.load(f)
        job["input"]["epochs"] = 2
        job_path = os.path.join(root, "recommender.json")
        with open(job_path, "w") as f:
            json.dump(job, f)
        metrics = os.path.join(root, "metrics.json")
        p = subprocess.run([a.flowstate, "train", job_path, "--data-root", root,
                            "--metrics-out", metrics, "--threads", "2"],
                           capture_output=True, text=True, timeout=240)
        if p.returncode != 0:
            print(p.stdout[-4000:], p.stderr[-4000:])
            failures.append("flowstate train exited %d" % p.returncode)
        else:
            with open(metrics) as f:
                m = json.load(f)
            acc = m.get("accuracy")
            print("test accuracy %.4f (Bayes rate %.4f)" % (acc or 0.0, bayes))
            if acc is None or acc < 0.75:
                failures.append("test accuracy %s, expected >= 0.75" % acc)

    for f in failures:
        print("FAIL " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
