#!/bin/bash
# The CLI client (`flowstate jobs ...`, `flowstate run ...`) against a real
# `flowstate serve` on free ports: submits a small CSV-regression job, lists
# it, gets it, watches it to SUCCEEDED (exit 0), cancels a second long job and
# watches that one end CANCELLED (exit 1), runs a tiny graph with feeds; then
# the error cases: an unknown job id (exit 1, the server's message), bad usage
# (exit 2), an unreachable server (exit 1), and — on a second server with
# auth.tokens set — a missing or wrong token (401 message) and the right one.
#
#   cli_client.sh --flowstate build/flowstate
#
# Exit status: 0 pass, 1 fail.
set -u

FLOWSTATE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --flowstate) FLOWSTATE="$2"; shift 2 ;;
    *) echo "cli_client.sh: unknown argument '$1'" >&2; exit 1 ;;
  esac
done
[ -x "$FLOWSTATE" ] || { echo "FAIL: no flowstate binary at '$FLOWSTATE'" >&2; exit 1; }
unset FLOWSTATE_SERVER FLOWSTATE_TOKEN

TMP="$(mktemp -d "${TMPDIR:-/tmp}/flowstate_cli.XXXXXX")"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  rm -rf "$TMP"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  for log in "$TMP"/server*.log; do
    echo "--- $log" >&2
    tail -30 "$log" >&2
  done
  exit 1
}

# start_server NAME [serve flags...]: sets URL to its HTTP address.
start_server() {
  local name="$1"
  shift
  "$FLOWSTATE" serve --http 127.0.0.1:0 --grpc 127.0.0.1:0 --port-file "$TMP/$name.ports" \
    --data-dir "$TMP/$name.data" --data-root "$TMP/root" "$@" >"$TMP/server-$name.log" 2>&1 &
  PIDS+=($!)
  local pid=$!
  for _ in $(seq 1 300); do
    [ -s "$TMP/$name.ports" ] && break
    kill -0 "$pid" 2>/dev/null || fail "server $name exited before writing its ports"
    sleep 0.1
  done
  local port
  port="$(sed -n 's/.*"http"[^0-9]*\([0-9]*\).*/\1/p' "$TMP/$name.ports")"
  [ -n "$port" ] || fail "no http port in $(cat "$TMP/$name.ports")"
  URL="http://127.0.0.1:$port"
}

# The data: y = 2a - 3b + 0.5 on 256 points.
mkdir -p "$TMP/root"
awk 'BEGIN { srand(3); print "a,b,target";
             for (i = 0; i < 256; i++) { a = 2*rand()-1; b = 2*rand()-1;
                                         printf "%.6f,%.6f,%.6f\n", a, b, 2*a - 3*b + 0.5 } }' \
  >"$TMP/root/points.csv"
job() {  # job NAME EPOCHS
  cat <<EOF
{"name": "$1",
 "graph": {"nodes": [
  {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1, 2]}},
  {"name": "y", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1]}},
  {"name": "w", "op": "Variable", "attrs": {"dtype": "float32", "shape": [2, 1], "init": "glorot_uniform"}},
  {"name": "b", "op": "Variable", "attrs": {"dtype": "float32", "shape": [1], "init": "zeros"}},
  {"name": "p", "op": "MatMul", "inputs": ["x", "w"]},
  {"name": "pb", "op": "BiasAdd", "inputs": ["p", "b"]},
  {"name": "flat", "op": "Const", "attrs": {"dtype": "int32", "value": [-1]}},
  {"name": "pred", "op": "Reshape", "inputs": ["pb", "flat"]},
  {"name": "sq", "op": "SquaredDifference", "inputs": ["pred", "y"]},
  {"name": "axes", "op": "Const", "attrs": {"dtype": "int32", "value": []}},
  {"name": "loss", "op": "Mean", "inputs": ["sq", "axes"]}]},
 "loss": "loss",
 "optimizer": {"type": "momentum", "learning_rate": 0.1, "momentum": 0.9},
 "input": {"format": "csv", "files": {"x": "points.csv", "y": "points.csv"},
           "columns": {"x": ["a", "b"], "y": ["target"]}, "batch_size": 16,
           "shuffle": true, "epochs": $2},
 "seed": 3}
EOF
}
job cli-short 20 >"$TMP/short.json"
job cli-long 100000 >"$TMP/long.json"
cat >"$TMP/add.json" <<'EOF'
{"nodes": [
  {"name": "a", "op": "Placeholder", "attrs": {"dtype": "float32"}},
  {"name": "b", "op": "Placeholder", "attrs": {"dtype": "float32"}},
  {"name": "sum", "op": "Add", "inputs": ["a", "b"]},
  {"name": "prod", "op": "Mul", "inputs": ["a", "b"]}]}
EOF

start_server open
FS() { "$FLOWSTATE" "$@" --server "$URL"; }

# submit / list / get / watch.
ID="$(FS jobs submit "$TMP/short.json" 2>"$TMP/err")" || fail "submit: $(cat "$TMP/err")"
[[ "$ID" == job-* ]] || fail "submit printed '$ID', not a job id"
FS jobs list >"$TMP/list" 2>"$TMP/err" || fail "list: $(cat "$TMP/err")"
grep -q "^$ID  cli-short  " "$TMP/list" || fail "list does not show $ID: $(cat "$TMP/list")"
FS jobs get "$ID" >"$TMP/get" 2>"$TMP/err" || fail "get: $(cat "$TMP/err")"
grep -q "\"job_id\": \"$ID\"" "$TMP/get" || fail "get: $(cat "$TMP/get")"
timeout 120 "$FLOWSTATE" jobs watch "$ID" --server "$URL" >"$TMP/watch" 2>"$TMP/err"
RC=$?
[ "$RC" -eq 0 ] || fail "watch of a job that succeeds exited $RC: $(cat "$TMP/err") $(tail -5 "$TMP/watch")"
grep -q "$ID  cli-short  SUCCEEDED" "$TMP/watch" || fail "watch did not print SUCCEEDED: $(cat "$TMP/watch")"
FS jobs get "$ID" | grep -q '"state": "SUCCEEDED"' || fail "get after watch is not SUCCEEDED"
# env FLOWSTATE_SERVER is the default --server.
FLOWSTATE_SERVER="$URL" "$FLOWSTATE" jobs list | grep -q "^$ID " || fail "FLOWSTATE_SERVER not used"

# cancel a long job while it is watched; its watch ends non-zero.
LONG="$(FS jobs submit "$TMP/long.json" 2>/dev/null)" || fail "submit long"
timeout 60 "$FLOWSTATE" jobs watch "$LONG" --server "$URL" >"$TMP/watch2" 2>"$TMP/err2" &
WATCH_PID=$!
# Plain (not a terminal) progress: a line per epoch.
for _ in $(seq 1 100); do
  grep -q "^epoch [0-9]*/100000 step [0-9]*/[0-9]* loss" "$TMP/watch2" && break
  sleep 0.1
done
grep -q "^epoch [0-9]*/100000 step" "$TMP/watch2" || fail "watch printed no progress line: $(cat "$TMP/watch2")"
FS jobs cancel "$LONG" >"$TMP/cancel" 2>"$TMP/err" || fail "cancel: $(cat "$TMP/err")"
wait "$WATCH_PID"
RC=$?
[ "$RC" -eq 1 ] || fail "watch of a cancelled job exited $RC (want 1): $(cat "$TMP/err2")"
grep -q "CANCELLED" "$TMP/err2" || fail "watch did not say CANCELLED: $(cat "$TMP/err2")"
FS jobs get "$LONG" | grep -q '"state": "CANCELLED"' || fail "the long job is not CANCELLED"

# run a tiny graph with feeds in two encodings.
FS run "$TMP/add.json" --feed a=3.0 --feed 'b={"dtype":"float32","shape":[],"data":[4]}' \
  --fetch sum --fetch prod >"$TMP/run" 2>"$TMP/err" || fail "run: $(cat "$TMP/err")"
grep -q '^sum: {"dtype":"float32","shape":\[\],"data":\[7.0\]}$' "$TMP/run" || fail "run sum: $(cat "$TMP/run")"
grep -q '^prod: .*"data":\[12.0\]' "$TMP/run" || fail "run prod: $(cat "$TMP/run")"
FS run "$TMP/add.json" --feed a=[1.0,2.0] --feed b=[10.0,20.0] --fetch sum --encoding nested >"$TMP/run" \
  || fail "run nested"
grep -q '^sum: \[11.0,22.0\]$' "$TMP/run" || fail "run nested: $(cat "$TMP/run")"

# errors: unknown job, unknown fetch, bad usage, no server.
FS jobs get job-999 >/dev/null 2>"$TMP/err"
RC=$?
[ "$RC" -eq 1 ] || fail "get of an unknown job exited $RC"
grep -q "404" "$TMP/err" && grep -q "job-999" "$TMP/err" || fail "unknown job message: $(cat "$TMP/err")"
FS jobs watch job-999 >/dev/null 2>"$TMP/err"
[ $? -eq 1 ] && grep -q "job-999" "$TMP/err" || fail "watch of an unknown job: $(cat "$TMP/err")"
FS run "$TMP/add.json" --feed a=1.0 --feed b=2.0 --fetch nope >/dev/null 2>"$TMP/err"
[ $? -eq 1 ] && grep -q "nope" "$TMP/err" || fail "run with an unknown fetch: $(cat "$TMP/err")"
FS jobs submit "$TMP/add.json" >/dev/null 2>"$TMP/err"
[ $? -eq 1 ] && grep -q "400" "$TMP/err" || fail "submit of a graph that is not a job: $(cat "$TMP/err")"
FS jobs frobnicate >/dev/null 2>&1
[ $? -eq 2 ] || fail "an unknown subcommand does not exit 2"
FS jobs get >/dev/null 2>&1
[ $? -eq 2 ] || fail "get without an id does not exit 2"
FS run "$TMP/add.json" >/dev/null 2>&1
[ $? -eq 2 ] || fail "run without --fetch does not exit 2"
"$FLOWSTATE" jobs list --server http://127.0.0.1:1 >/dev/null 2>"$TMP/err"
[ $? -eq 1 ] && grep -q "cannot connect" "$TMP/err" || fail "no server: $(cat "$TMP/err")"

# auth: a second server with a token.
start_server auth --set auth.tokens=s3cret
"$FLOWSTATE" jobs list --server "$URL" >/dev/null 2>"$TMP/err"
RC=$?
[ "$RC" -eq 1 ] && grep -q "401" "$TMP/err" || fail "no token: exit $RC, $(cat "$TMP/err")"
"$FLOWSTATE" run "$TMP/add.json" --feed a=1.0 --feed b=2.0 --fetch sum --server "$URL" --token wrong \
  >/dev/null 2>"$TMP/err"
[ $? -eq 1 ] && grep -q "401" "$TMP/err" || fail "wrong token: $(cat "$TMP/err")"
"$FLOWSTATE" jobs list --server "$URL" --token s3cret >/dev/null 2>"$TMP/err" ||
  fail "the right token: $(cat "$TMP/err")"
FLOWSTATE_TOKEN=s3cret "$FLOWSTATE" run "$TMP/add.json" --feed a=1.0 --feed b=2.0 --fetch sum \
  --server "$URL" >"$TMP/run" 2>"$TMP/err" || fail "FLOWSTATE_TOKEN: $(cat "$TMP/err")"
grep -q '"data":\[3.0\]' "$TMP/run" || fail "authorized run: $(cat "$TMP/run")"

echo "PASS: jobs submit/list/get/watch/cancel, run with feeds, errors and auth"
exit 0
