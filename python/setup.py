"""Builds the package, generating the gRPC stubs of ../api/flowstate.proto.

The stubs are generated into the build folder (never into the source tree)
with Debian's protoc and grpc_python_plugin, so a change to the proto needs
no change here. Metadata is in pyproject.toml.
"""

import importlib.util
import os

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def _protogen():
    path = os.path.join(HERE, "flowstate", "_gen", "protogen.py")
    spec = importlib.util.spec_from_file_location("_flowstate_protogen", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithStubs(build_py):
    def run(self):
        super().run()
        proto_dir = os.environ.get("FLOWSTATE_PROTO_DIR") or os.path.join(HERE, "..", "api")
        if not os.path.exists(os.path.join(proto_dir, "flowstate.proto")):
            raise SystemExit("flowstate: no flowstate.proto in %s; build from a checkout "
                             "(pip install ./python) or set FLOWSTATE_PROTO_DIR" % proto_dir)
        out = os.path.join(self.build_lib, "flowstate", "_gen")
        _protogen().generate(os.path.abspath(proto_dir), out)


setup(cmdclass={"build_py": BuildPyWithStubs})
