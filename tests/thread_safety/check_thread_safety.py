#!/usr/bin/env python3
"""Checks the lock annotations of the sources with clang's thread-safety
analysis: every field declared ABSL_GUARDED_BY(mu) is touched only with `mu`
held, every ABSL_EXCLUSIVE_LOCKS_REQUIRED function is called with it, and no
scope leaves a Mutex locked (graph/mutex.h). GCC, which builds Flowstate,
ignores the attributes; this runs clang -fsyntax-only over each library
source that uses them (directly or through the headers it includes), with
the flags CMake recorded in compile_commands.json, and turns only the
-Wthread-safety warnings into errors.

Usage: check_thread_safety.py --build DIR --source DIR [--jobs N] [--clang BIN]
           (exit 1 printing every warning; 2 when clang is missing)
       check_thread_safety.py --self-test [--clang BIN]
           (the checker reports a planted unguarded access, and passes its fix)
"""
import argparse
import concurrent.futures
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

# The library folders (tests and benches are left out: they build fixtures,
# not the service's shared state).
FOLDERS = ["graph", "devices", "state", "scheduler", "checkpoints", "api", "config",
           "distributed", "jobs", "server", "cli"]
USES = re.compile(r"\b(Mutex|SharedMutex|CondVar|ABSL_[A-Z_]*(LOCK|GUARDED)[A-Z_]*)\b")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# What the analysis says; everything else clang might warn about is GCC's
# business (the build's own warnings), so it is switched off.
FLAGS = ["-fsyntax-only", "-Wno-everything", "-Wthread-safety", "-Werror=thread-safety",
         "-Wno-unknown-warning-option", "-ferror-limit=0"]


def uses_annotations(path, source, memo):
    """True when `path` (relative to source) or a project header it includes uses them."""
    if path in memo:
        return memo[path]
    memo[path] = False  # an include cycle ends here
    try:
        with open(os.path.join(source, path), encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return False
    found = bool(USES.search(text)) or any(
        uses_annotations(inc, source, memo) for inc in INCLUDE.findall(text))
    memo[path] = found
    return found


def clang_command(entry, clang):
    """The entry's compile command for clang, checking syntax only."""
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    out, skip = [], False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD") or a == entry["file"] or a.startswith("-fdiagnostics-color"):
            continue
        out.append(a)
    return [clang] + out + FLAGS + [entry["file"]]


def check(build, source, jobs, clang):
    if shutil.which(clang) is None:
        print(f"check_thread_safety: {clang} not found (scripts/install-deps installs clang-14)")
        return 2
    with open(os.path.join(build, "compile_commands.json"), encoding="utf-8") as f:
        entries = json.load(f)
    memo, chosen = {}, []
    source = os.path.realpath(source)
    for e in entries:
        path = os.path.relpath(os.path.realpath(os.path.join(e["directory"], e["file"])), source)
        if path.split(os.sep)[0] in FOLDERS and uses_annotations(path, source, memo):
            chosen.append((path, e))
    if not chosen:
        print("check_thread_safety: no source uses the annotations; is --source right?")
        return 1

    def run(item):
        path, e = item
        r = subprocess.run(clang_command(e, clang), cwd=e["directory"], capture_output=True, text=True)
        return path, r.returncode, r.stdout + r.stderr

    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for path, rc, text in pool.map(run, sorted(chosen, key=lambda x: x[0])):
            if rc != 0:
                failed += 1
                print(f"--- {path}\n{text}")
    print(f"check_thread_safety: {len(chosen)} sources checked, {failed} with errors")
    return 1 if failed else 0


PLANTED = r'''
#include "graph/mutex.h"
namespace flowstate {
class Counter {
 public:
  void Add() { %s ++n_; }
 private:
  Mutex mu_;
  int n_ ABSL_GUARDED_BY(mu_) = 0;
};
void Use() { Counter c; c.Add(); }
}  // namespace flowstate
'''


def self_test(clang):
    if shutil.which(clang) is None:
        print(f"check_thread_safety: {clang} not found (scripts/install-deps installs clang-14)")
        return 2
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with tempfile.TemporaryDirectory() as d:
        for name, lock, want_fail in (("bad", "", True), ("good", "MutexLock l(mu_);", False)):
            src = os.path.join(d, name + ".cc")
            with open(src, "w", encoding="utf-8") as f:
                f.write(PLANTED % lock)
            entry = {"directory": d, "file": src,
                     "command": f"g++ -std=c++20 -I{shlex.quote(root)} -c {shlex.quote(src)} -o x.o"}
            r = subprocess.run(clang_command(entry, clang), cwd=d, capture_output=True, text=True)
            reported = r.returncode != 0 and "requires holding mutex 'mu_'" in r.stderr
            if want_fail and not reported:
                print(f"self-test: the unguarded write was not reported:\n{r.stderr}")
                return 1
            if not want_fail and r.returncode != 0:
                print(f"self-test: the guarded write was refused:\n{r.stderr}")
                return 1
    print("self-test: the planted unguarded write is reported and its fix passes")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build")
    p.add_argument("--source")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--clang", default="clang++-14")
    p.add_argument("--self-test", action="store_true")
    a = p.parse_args()
    if a.self_test:
        return self_test(a.clang)
    if not a.build or not a.source:
        p.error("--build and --source are required")
    return check(a.build, a.source, a.jobs, a.clang)


if __name__ == "__main__":
    sys.exit(main())
