#!/bin/bash
# examples/curl/walkthrough.sh against a real `flowstate serve`: starts the
# server on free ports (port 0, read back from its port file) with its own
# data directory, runs the walk-through with a short job (--max-steps), then
# checks what it exported: the .npz read with numpy.load against the .fsck
# (tests/integration/compare_npz_fsck.py: names, dtypes, shapes, values),
# and stops the server by its PID (SIGTERM, then SIGKILL after 10 s).
#
#   run_curl_example.sh --flowstate build/flowstate [--source .] [--max-steps 30]
#                       [--data-root /usr/share/datasets] [--timeout 240]
#
# Exit status: 0 pass, 1 fail, 77 skipped (no Fashion-MNIST under the data root).
set -u

FLOWSTATE=""
SOURCE="$(cd "$(dirname "$0")/../.." && pwd)"
MAX_STEPS=30
DATA_ROOT=/usr/share/datasets
TIMEOUT=240
while [ $# -gt 0 ]; do
  case "$1" in
    --flowstate) FLOWSTATE="$2"; shift 2 ;;
    --source) SOURCE="$2"; shift 2 ;;
    --max-steps) MAX_STEPS="$2"; shift 2 ;;
    --data-root) DATA_ROOT="$2"; shift 2 ;;
    --timeout) TIMEOUT="$2"; shift 2 ;;
    *) echo "run_curl_example.sh: unknown argument '$1'" >&2; exit 1 ;;
  esac
done
[ -x "$FLOWSTATE" ] || { echo "FAIL: no flowstate binary at '$FLOWSTATE'" >&2; exit 1; }
if [ ! -f "$DATA_ROOT/fashion-mnist/train-images-idx3-ubyte.gz" ]; then
  echo "SKIP: no Fashion-MNIST under $DATA_ROOT (install dataset-fashion-mnist)"
  exit 77
fi

TMP="$(mktemp -d "${TMPDIR:-/tmp}/flowstate_curl.XXXXXX")"
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
  echo "--- server log (tail)" >&2
  tail -n 40 "$TMP/server.log" >&2 2>/dev/null
  exit 1
}

"$FLOWSTATE" serve --http 127.0.0.1:0 --grpc 127.0.0.1:0 --port-file "$TMP/ports.json" \
  --data-dir "$TMP/data" --data-root "$DATA_ROOT" >"$TMP/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 300); do
  [ -s "$TMP/ports.json" ] && break
  kill -0 "$SERVER_PID" 2>/dev/null || fail "the server exited before writing its ports"
  sleep 0.1
done
[ -s "$TMP/ports.json" ] || fail "no port file after 30 s"
HTTP_PORT=$(sed -n 's/.*"http": *\([0-9]*\).*/\1/p' "$TMP/ports.json")
[ -n "$HTTP_PORT" ] || fail "unreadable port file: $(cat "$TMP/ports.json")"
echo "server pid $SERVER_PID on 127.0.0.1:$HTTP_PORT"

timeout "$TIMEOUT" bash "$SOURCE/examples/curl/walkthrough.sh" --server "http://127.0.0.1:$HTTP_PORT" \
  --max-steps "$MAX_STEPS" --out "$TMP/out" \
  --images "$DATA_ROOT/fashion-mnist/t10k-images-idx3-ubyte.gz" \
  --labels "$DATA_ROOT/fashion-mnist/t10k-labels-idx1-ubyte.gz" >"$TMP/walkthrough.log" 2>&1
RC=$?
cat "$TMP/walkthrough.log"
[ "$RC" -ne 124 ] || fail "walkthrough.sh did not finish within $TIMEOUT s"
[ "$RC" -eq 0 ] || fail "walkthrough.sh exited $RC"
grep -q '^step [0-9]*/' "$TMP/walkthrough.log" || fail "no step event was printed"
grep -q "SUCCEEDED after $MAX_STEPS steps" "$TMP/walkthrough.log" || fail "the job did not succeed after $MAX_STEPS steps"
PREDICTED=$(sed -n 's/^predicted: //p' "$TMP/walkthrough.log")
[ "$(echo "$PREDICTED" | wc -w)" -eq 8 ] || fail "expected 8 predictions, got '$PREDICTED'"
grep -q '"job_id":"import-1"' "$TMP/walkthrough.log" || fail "the .fsck was not imported back"
JOB_ID=$(sed -n 's/^submitted \(job-[0-9]*\) .*/\1/p' "$TMP/walkthrough.log")
[ -n "$JOB_ID" ] || fail "no job id in the walk-through's output"
/usr/bin/python3 "$SOURCE/tests/integration/compare_npz_fsck.py" "$TMP/out/$JOB_ID.npz" "$TMP/out/$JOB_ID.fsck" ||
  fail "the .npz export does not match the checkpoint"

kill -TERM "$SERVER_PID"
for _ in $(seq 1 100); do
  kill -0 "$SERVER_PID" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$SERVER_PID" 2>/dev/null && fail "the server did not exit within 10 s of SIGTERM"
wait "$SERVER_PID"
SERVER_RC=$?
SERVER_PID=""
[ "$SERVER_RC" -eq 0 ] || fail "the server exited $SERVER_RC after SIGTERM"
echo "PASS: the curl walk-through trained, watched, predicted and exported; the .npz matches the .fsck"
exit 0
