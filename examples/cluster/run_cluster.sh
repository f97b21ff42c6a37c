#!/usr/bin/env bash
# A three-task Flowstate cluster on one machine, and one step across it.
#
#   examples/cluster/run_cluster.sh [--flowstate PATH]   (default: flowstate on PATH)
#
# Task 0 is `flowstate serve` (the REST API; the master of the session),
# tasks 1 and 2 are `flowstate worker` (the gRPC port only). All listen on
# 127.0.0.1 on free ports; the cluster is job "worker" of three tasks, given
# to each process with --cluster and --task (the same as `cluster` and
# `task` in a configuration file, FLOWSTATE_CLUSTER/FLOWSTATE_TASK_*, or
# TF_CONFIG). The script waits for every task to be UP in GET /v1/cluster,
# then creates a session whose graph (graph.json) places its nodes on the
# three tasks -- x fed on task 0, x·w on task 1, + b on task 2 -- runs it
# with curl, checks the answer and stops the processes it started.
set -euo pipefail

FLOWSTATE=flowstate
while [ $# -gt 0 ]; do
  case "$1" in
    --flowstate) FLOWSTATE="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "run_cluster.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$TMP"
}
trap cleanup EXIT

# Four free ports at once (task 0's HTTP, each task's gRPC).
read -r HTTP G0 G1 G2 < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(4)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')
CLUSTER="{\"worker\": [\"127.0.0.1:$G0\", \"127.0.0.1:$G1\", \"127.0.0.1:$G2\"]}"
echo "cluster: $CLUSTER"

"$FLOWSTATE" serve --http "127.0.0.1:$HTTP" --grpc "127.0.0.1:$G0" --data-dir "$TMP/data" \
  --cluster "$CLUSTER" --task worker:0 --port-file "$TMP/ports-0" 2>"$TMP/task-0.log" &
PIDS+=($!)
for i in 1 2; do
  port="G$i"
  "$FLOWSTATE" worker --grpc "127.0.0.1:${!port}" --cluster "$CLUSTER" --task "worker:$i" \
    --port-file "$TMP/ports-$i" 2>"$TMP/task-$i.log" &
  PIDS+=($!)
done

fail() {
  echo "run_cluster.sh: $*" >&2
  for i in 0 1 2; do echo "--- task $i:" >&2; cat "$TMP/task-$i.log" >&2 || true; done
  exit 1
}

# Every process listens (its port file appears) within 30 s ...
deadline=$((SECONDS + 30))
for i in 0 1 2; do
  until [ -s "$TMP/ports-$i" ]; do
    [ $SECONDS -lt $deadline ] || fail "task $i does not listen after 30 s"
    sleep 0.1
  done
done
API="http://127.0.0.1:$HTTP"
# ... and task 0 sees all three UP within 30 s (their heartbeats).
deadline=$((SECONDS + 30))
until curl -fsS "$API/v1/cluster" | python3 -c '
import json, sys
sys.exit(0 if all(t["state"] == "UP" for t in json.load(sys.stdin)["tasks"]) else 1)'; do
  [ $SECONDS -lt $deadline ] || { "$FLOWSTATE" cluster --server "$API" >&2 || true;
                                   fail "not every task is UP after 30 s"; }
  sleep 0.2
done
"$FLOWSTATE" cluster --server "$API"

# One session across the three tasks: created on task 0, which places,
# partitions and runs each part on its task.
SESSION=$(curl -fsS -X POST "$API/v1/sessions" -H 'Content-Type: application/json' \
            --data "{\"graph\": $(cat "$HERE/graph.json")}" |
          python3 -c 'import json, sys; print(json.load(sys.stdin)["session_id"])') ||
  fail "POST /v1/sessions failed"
OUT=$(curl -sS -X POST "$API/v1/sessions/$SESSION/run" -H 'Content-Type: application/json' \
        --data '{"feeds": {"x": [[1.0, 2.0], [3.0, 4.0]]}, "fetches": ["y"], "encoding": "nested"}')
echo "y = $OUT"
curl -fsS -X DELETE "$API/v1/sessions/$SESSION" >/dev/null
# x·w = [[1, 4], [3, 8]]; + b = [[11, 24], [13, 28]].
python3 -c '
import json, sys
y = json.loads(sys.argv[1]).get("outputs", {}).get("y")
sys.exit(0 if y == [[11, 24], [13, 28]] else 1)' "$OUT" || fail "expected y = [[11, 24], [13, 28]]"
echo "run_cluster.sh: OK (one step across tasks 0, 1 and 2)"
