"""The gRPC stubs of api/flowstate.proto: ``from flowstate._gen import flowstate_pb2``.

An installed package has them in this folder (setup.py generated them at
build time). From the source tree they are generated on first import, with
protoc and grpc_python_plugin, into a cache folder keyed by the proto's hash
(``$FLOWSTATE_STUB_CACHE``, else ``$XDG_CACHE_HOME/flowstate`` or
``~/.cache/flowstate``), which is added to this package's path.
``$FLOWSTATE_PROTO_DIR`` names the folder of flowstate.proto when it is not
``api/`` of the checkout this package sits in.
"""

import os
import tempfile

from . import protogen

_here = os.path.dirname(os.path.abspath(__file__))


def _cache_root():
    root = os.environ.get("FLOWSTATE_STUB_CACHE")
    if root:
        return root
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "flowstate")


def _locate():
    if all(os.path.exists(os.path.join(_here, s)) for s in protogen.STUBS):
        return None  # installed: the stubs are here
    proto_dir = os.environ.get("FLOWSTATE_PROTO_DIR") or os.path.normpath(
        os.path.join(_here, "..", "..", "..", "api"))
    if not os.path.exists(os.path.join(proto_dir, protogen.PROTO)):
        raise ImportError(
            "flowstate: no gRPC stubs in %s and no %s in %s to generate them from "
            "(install the package with `pip install ./python`, or set FLOWSTATE_PROTO_DIR)"
            % (_here, protogen.PROTO, proto_dir))
    try:
        return protogen.generate_cached(proto_dir, _cache_root())
    except OSError:
        # A read-only home: a per-user temporary cache.
        return protogen.generate_cached(
            proto_dir, os.path.join(tempfile.gettempdir(), "flowstate-stubs-%d" % os.getuid()))


_extra = _locate()
if _extra is not None:
    __path__.append(_extra)  # noqa: F821 (a package's __path__)
