"""Generates the gRPC stubs of api/flowstate.proto (standard library only).

Used twice: by setup.py when the package is built (``pip install ./python``
puts the stubs into the installed package) and by ``flowstate._gen`` when the
package runs from the source tree (the stubs go into a cache folder keyed by
the proto's hash, so a changed proto regenerates them and needs no change
here). Both run Debian's ``protoc`` (protobuf-compiler) with gRPC's own
Python plugin ``grpc_python_plugin`` (protobuf-compiler-grpc): Debian's
python3-grpc-tools is too old for these protos.

The plugin writes ``import flowstate_pb2 as flowstate__pb2``; the import is
made relative so that the stubs live inside the package and never shadow, or
are shadowed by, a top-level ``flowstate_pb2`` of someone else's.
"""

import hashlib
import os
import shutil
import subprocess
import tempfile

PROTO = "flowstate.proto"
STUBS = ("flowstate_pb2.py", "flowstate_pb2_grpc.py")


def proto_hash(proto_dir):
    with open(os.path.join(proto_dir, PROTO), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def find_tool(name, env):
    path = os.environ.get(env) or shutil.which(name)
    if not path:
        raise RuntimeError(
            "flowstate: '%s' is needed to generate the gRPC stubs from %s and is not on PATH "
            "(install Debian's %s, or set %s)"
            % (name, PROTO, "protobuf-compiler-grpc" if "grpc" in name else "protobuf-compiler",
               env))
    return path


def generate(proto_dir, out_dir):
    """Writes flowstate_pb2.py and flowstate_pb2_grpc.py into out_dir."""
    protoc = find_tool("protoc", "FLOWSTATE_PROTOC")
    plugin = find_tool("grpc_python_plugin", "FLOWSTATE_GRPC_PYTHON_PLUGIN")
    os.makedirs(out_dir, exist_ok=True)
    cmd = [protoc, "-I", proto_dir, "--python_out=" + out_dir, "--grpc_out=" + out_dir,
           "--plugin=protoc-gen-grpc=" + plugin, os.path.join(proto_dir, PROTO)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError("flowstate: protoc failed (%s): %s" % (" ".join(cmd), r.stderr.strip()))
    grpc_file = os.path.join(out_dir, STUBS[1])
    with open(grpc_file) as f:
        text = f.read()
    text = text.replace("import flowstate_pb2 as flowstate__pb2",
                        "from . import flowstate_pb2 as flowstate__pb2")
    with open(grpc_file, "w") as f:
        f.write(text)


def generate_cached(proto_dir, cache_root):
    """The folder of stubs for proto_dir's proto under cache_root, made once.

    Written into a temporary folder renamed into place, so that concurrent
    processes never see half a stub.
    """
    target = os.path.join(cache_root, "stubs-" + proto_hash(proto_dir))
    if all(os.path.exists(os.path.join(target, s)) for s in STUBS):
        return target
    os.makedirs(cache_root, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".stubs-", dir=cache_root)
    try:
        generate(proto_dir, tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not all(os.path.exists(os.path.join(target, s)) for s in STUBS):
                raise
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    return target
