"""examples/python/fashion_mlp.py, cut short, against a server reading Debian's Fashion-MNIST."""

import os
import subprocess
import sys

import pytest

from conftest import HERE, SOURCE, Server, binary

DATA_ROOT = "/usr/share/datasets"


def test_fashion_mlp_example_trains_and_predicts(tmp_path):
    if not os.path.exists(os.path.join(DATA_ROOT, "fashion-mnist", "train-images-idx3-ubyte.gz")):
        pytest.skip("no Fashion-MNIST under %s (Debian's dataset-fashion-mnist)" % DATA_ROOT)
    server = Server(binary(), str(tmp_path), data_root=DATA_ROOT)
    try:
        env = dict(os.environ, PYTHONPATH=os.path.normpath(os.path.join(HERE, "..")))
        example = os.path.join(SOURCE, "examples", "python", "fashion_mlp.py")
        r = subprocess.run([sys.executable, example, "--server", server.grpc, "--max-steps", "30"],
                           capture_output=True, text=True, timeout=120, env=env)
    finally:
        server.stop()
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[-2].startswith("test accuracy ") and float(lines[-2].split()[-1]) > 0.5, r.stdout
    assert lines[-1].startswith("predicted classes of 8 test images: ["), r.stdout


def test_recommender_example_reaches_the_bayes_rate(tmp_path):
    root = tmp_path / "datasets"
    subprocess.run([sys.executable, os.path.join(SOURCE, "examples", "data", "make_clicks.py"),
                    str(root / "clicks")], check=True, capture_output=True, timeout=120)
    server = Server(binary(), str(tmp_path), data_root=str(root))
    try:
        env = dict(os.environ, PYTHONPATH=os.path.normpath(os.path.join(HERE, "..")))
        example = os.path.join(SOURCE, "examples", "python", "recommender.py")
        r = subprocess.run([sys.executable, example, "--server", server.http],
                           capture_output=True, text=True, timeout=120, env=env)
    finally:
        server.stop()
    assert r.returncode == 0, r.stdout + r.stderr
    accuracy = float(r.stdout.split("test accuracy ")[1].split()[0])
    assert accuracy >= 0.85, r.stdout  # the JSON twin: 0.874, Bayes rate 0.875
