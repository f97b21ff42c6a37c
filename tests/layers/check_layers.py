#!/usr/bin/env python3
"""Checks the dependency direction of the source tree (DESIGN.md, "Layers and
folders"): every `#include "folder/..."` in a folder's sources must name a
folder in that folder's "may use" column. The build enforces the same rule
with per-library include roots (cmake/FlowstateLibrary.cmake); this test
also catches what the build cannot see, such as a library that lists a
folder above it in USES, or the REST and gRPC frontends including each
other. It also keeps the heavy third-party headers (gRPC, protobuf, Gloo,
Boost, Eigen, RocksDB, prometheus-cpp) out of every header but the few
adapter headers listed in ADAPTERS.

Usage: check_layers.py --source DIR   (exit 1 listing every violation)
       check_layers.py --self-test    (the checker finds a planted violation)
"""
import argparse
import os
import re
import sys
import tempfile

CORE = ["graph", "devices", "state", "scheduler"]
# folder -> the folders its sources may include (itself always allowed).
MAY_USE = {
    "graph": [],
    "devices": ["graph"],
    "state": ["graph", "devices"],
    "scheduler": ["graph", "devices", "state"],
    "checkpoints": ["graph", "state"],
    "api": ["graph"],
    "config": ["graph"],
    "distributed": CORE + ["api"],
    "jobs": CORE + ["checkpoints", "api", "distributed"],
    # The web console's embedded files: standard library only.
    "web": [],
    "server": CORE + ["checkpoints", "api", "distributed", "jobs", "web"],
    "cli": CORE + ["checkpoints", "api", "distributed", "jobs", "server", "config"],
}
# Sub-folders that must not include each other: the two frontends are thin
# adapters over the service layer, not over each other.
SIBLINGS = [("server/rest", "server/grpc")]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([^"]+)"', re.M)
# Third-party headers that stay inside .cc files ("Keep Eigen, Boost, gRPC,
# Gloo inside .cc files"): a header that includes one hands its types to
# every includer and its compile time to every build.
HEAVY = re.compile(r'^\s*#\s*include\s+[<"]((?:grpc|grpcpp|gloo|boost|Eigen|unsupported/Eigen|'
                   r'google/protobuf|rocksdb|prometheus)/[^">]*|[^">]*\.pb\.h)[">]', re.M)
# The adapter headers allowed to name them: each is included only by the
# .cc files of the module that wraps the library (and by its tests).
ADAPTERS = {
    "api/proto_convert.h",           # protobuf <-> internal types, for the gRPC frontend
    "server/grpc/grpc_frontend.h",   # the gRPC frontend's own services
    "server/rest/http_connection.h", # one Beast connection, inside server/rest
    "checkpoints/store_internal.h",  # RocksDB behind checkpoints/store.h
}
SOURCE = (".h", ".cc")


def violations(root):
    found = []
    for folder, allowed in MAY_USE.items():
        base = os.path.join(root, folder)
        for dirpath, _, files in os.walk(base):
            for name in sorted(files):
                if not name.endswith(SOURCE):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for m in INCLUDE.finditer(text):
                    target = m.group(1)
                    if target not in MAY_USE or target == folder:
                        pass
                    elif target not in allowed:
                        found.append(f"{rel}: includes \"{target}/{m.group(2)}\", but {folder}/ "
                                     f"may use only {', '.join(allowed) or 'the standard library'}")
                    for a, b in SIBLINGS:
                        for mine, other in ((a, b), (b, a)):
                            if rel.startswith(mine + "/") and f"{m.group(1)}/{m.group(2)}".startswith(other + "/"):
                                found.append(f"{rel}: includes \"{m.group(1)}/{m.group(2)}\": "
                                             f"{mine}/ and {other}/ must not include each other")
    for folder in MAY_USE:
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for name in sorted(files):
                if not name.endswith(".h"):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                if rel in ADAPTERS:
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    for m in HEAVY.finditer(f.read()):
                        found.append(f"{rel}: includes <{m.group(1)}> in a header; keep it in the "
                                     f".cc file (or behind an adapter header listed in ADAPTERS)")
    # Nothing outside cli/ includes cli/ (checked above for the layered
    # folders; MAY_USE lists cli for nobody).
    return found


def self_test():
    with tempfile.TemporaryDirectory() as d:
        def write(rel, text):
            os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as f:
                f.write(text)
        write("graph/ok.h", '#include "graph/tensor.h"\n')
        write("scheduler/ok.cc", '#include "devices/device.h"\n#include "state/variable.h"\n')
        if violations(d):
            print("self-test: a clean tree was reported:", violations(d))
            return 1
        write("devices/up.cc", '#include "scheduler/session.h"\n')
        write("api/up.h", '  #  include "jobs/job_manager.h"\n')
        write("server/rest/x.cc", '#include "server/grpc/grpc_server.h"\n')
        write("jobs/cli.cc", '#include "cli/commands.h"\n')
        write("scheduler/heavy.h", '#include <Eigen/Core>\n')
        write("jobs/heavy.h", '#include "api/flowstate.pb.h"\n')
        write("jobs/fine.cc", '#include <grpcpp/grpcpp.h>\n')
        got = violations(d)
        want = ["devices/up.cc", "api/up.h", "server/rest/x.cc", "jobs/cli.cc", "scheduler/heavy.h",
                "jobs/heavy.h"]
        missing = [w for w in want if not any(g.startswith(w + ":") for g in got)]
        if missing or len(got) != len(want):
            print("self-test: expected one violation in each of", want, "got", got)
            return 1
    print(f"self-test: ok ({len(want)} planted violations found, none in a clean tree)")
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--source")
    p.add_argument("--self-test", action="store_true")
    a = p.parse_args()
    if a.self_test:
        return self_test()
    found = violations(a.source)
    for v in found:
        print(v)
    if found:
        print(f"{len(found)} include(s) against the dependency direction of DESIGN.md")
        return 1
    print("every include follows the dependency direction")
    return 0


if __name__ == "__main__":
    sys.exit(main())
