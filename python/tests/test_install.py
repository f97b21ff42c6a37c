"""`pip install` of the package into a new virtual environment, as the README says.

A copy of python/ and api/flowstate.proto in a temporary folder is
installed (so the source tree gets no build folder) with Debian's setuptools
seen through --system-site-packages, offline, and its dependencies satisfied
by Debian's packages (pip checks them: --no-index); the installed package must
carry its generated stubs and import outside the source tree.
"""

import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.normpath(os.path.join(HERE, ".."))
API_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "api"))


def test_pip_install_into_a_venv(tmp_path):
    base = sys.executable if sys.executable.startswith("/usr/bin/") else "/usr/bin/python3"
    if subprocess.run([base, "-c", "import venv, pip"], capture_output=True).returncode:
        pytest.skip("%s has no venv or pip (Debian's python3-venv, python3-pip)" % base)
    src = tmp_path / "src"
    shutil.copytree(PYTHON_DIR, src / "python",
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests"))
    (src / "api").mkdir()
    shutil.copy(os.path.join(API_DIR, "flowstate.proto"), src / "api")
    venv = tmp_path / "venv"
    # --without-pip: Debian's pip, seen through the system site-packages, installs
    # into the venv just as the venv's own would (and ensurepip takes seconds).
    subprocess.run([base, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
                   check=True, timeout=120)
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                          "--no-build-isolation", "--no-index", str(src / "python")],
                         capture_output=True, text=True, timeout=180)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    check = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import flowstate, flowstate._gen.flowstate_pb2 as pb, flowstate._gen.flowstate_pb2_grpc;"
         "print(flowstate.__file__); print(pb.__file__)"],
        capture_output=True, text=True, timeout=60, cwd=str(tmp_path),
        env=dict(os.environ, FLOWSTATE_STUB_CACHE=str(tmp_path / "no-cache")))
    assert check.returncode == 0, check.stderr
    pkg, stubs = check.stdout.split()
    assert pkg.startswith(str(venv)) and stubs.startswith(str(venv)), check.stdout
    assert not (tmp_path / "no-cache").exists()  # the installed stubs, none generated
