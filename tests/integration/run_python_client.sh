#!/bin/bash
# The Python gRPC client (examples/python/client.py) against a real
# `flowstate serve`: starts the server on free ports, runs the client with a
# short Fashion-MNIST job (max_steps), checks that it exits 0 and printed
# predictions, then stops the server with SIGTERM and checks that it exits 0
# within 10 s.
#
#   run_python_client.sh --flowstate build/flowstate --python-stubs build/python \
#                        [--source .] [--max-steps 20] [--data-root /usr/share/datasets]
#
# Exit status: 0 pass, 1 fail, 77 skipped (no grpc module in /usr/bin/python3,
# or no Fashion-MNIST under the data root).
set -u

FLOWSTATE=""
STUBS=""
SOURCE="$(cd "$(dirname "$0")/../.." && pwd)"
MAX_STEPS=20
DATA_ROOT=/usr/share/datasets
PYTHON=/usr/bin/python3

while [ $# -gt 0 ]; do
  case "$1" in
    --flowstate) FLOWSTATE="$2"; shift 2 ;;
    --python-stubs) STUBS="$2"; shift 2 ;;
    --source) SOURCE="$2"; shift 2 ;;
    --max-steps) MAX_STEPS="$2"; shift 2 ;;
    --data-root) DATA_ROOT="$2"; shift 2 ;;
    *) echo "run_python_client.sh: unknown argument '$1'" >&2; exit 1 ;;
  esac
done

if [ -z "$FLOWSTATE" ] || [ -z "$STUBS" ]; then
  echo "run_python_client.sh: --flowstate and --python-stubs are required" >&2
  exit 1
fi
if ! "$PYTHON" -c 'import grpc' 2>/dev/null; then
  echo "SKIP: $PYTHON has no grpc module (install python3-grpcio)"
  exit 77
fi
if [ ! -f "$DATA_ROOT/fashion-mnist/train-images-idx3-ubyte.gz" ]; then
  echo "SKIP: no Fashion-MNIST under $DATA_ROOT (install dataset-fashion-mnist)"
  exit 77
fi
if [ ! -x "$FLOWSTATE" ]; then
  echo "FAIL: no flowstate binary at $FLOWSTATE" >&2
  exit 1
fi
if [ ! -f "$STUBS/flowstate_pb2_grpc.py" ]; then
  echo "FAIL: no Python stubs in $STUBS (the build makes them)" >&2
  exit 1
fi

TMP="$(mktemp -d "${TMPDIR:-/tmp}/flowstate_pyclient.XXXXXX")"
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -KILL "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  echo "--- server log" >&2
  cat "$TMP/server.log" >&2 2>/dev/null
  exit 1
}

"$FLOWSTATE" serve --http 127.0.0.1:0 --grpc 127.0.0.1:0 --port-file "$TMP/ports.json" \
  --data-dir "$TMP/data" --data-root "$DATA_ROOT" >"$TMP/server.log" 2>&1 &
SERVER_PID=$!

for _ in $(seq 1 300); do
  [ -f "$TMP/ports.json" ] && break
  kill -0 "$SERVER_PID" 2>/dev/null || fail "the server exited before writing its ports"
  sleep 0.1
done
[ -f "$TMP/ports.json" ] || fail "no port file after 30 s"
GRPC_PORT="$("$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["grpc"])' \
             "$TMP/ports.json")" || fail "unreadable port file: $(cat "$TMP/ports.json")"
echo "server pid $SERVER_PID, gRPC on 127.0.0.1:$GRPC_PORT"

"$PYTHON" "$SOURCE/examples/python/client.py" --server "127.0.0.1:$GRPC_PORT" \
  --stubs "$STUBS" --job "$SOURCE/examples/jobs/fashion_mlp.json" \
  --max-steps "$MAX_STEPS" --data-root "$DATA_ROOT" --images 5 --timeout 240 \
  >"$TMP/client.log" 2>&1
CLIENT_RC=$?
cat "$TMP/client.log"
[ "$CLIENT_RC" -eq 0 ] || fail "client.py exited $CLIENT_RC"
[ "$(grep -c '^prediction [0-9]*: ' "$TMP/client.log")" -eq 5 ] || fail "no predictions printed"
grep -q '^state  .* SUCCEEDED' "$TMP/client.log" || fail "the job's SUCCEEDED event was not printed"

kill -TERM "$SERVER_PID"
for _ in $(seq 1 100); do
  kill -0 "$SERVER_PID" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$SERVER_PID" 2>/dev/null; then
  fail "the server did not exit within 10 s of SIGTERM"
fi
wait "$SERVER_PID"
SERVER_RC=$?
SERVER_PID=""
[ "$SERVER_RC" -eq 0 ] || fail "the server exited $SERVER_RC after SIGTERM"
echo "PASS: python client trained, watched and predicted; server stopped cleanly"
exit 0
