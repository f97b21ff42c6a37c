#!/usr/bin/env bash
# Flowstate's REST API with curl alone: train the Fashion-MNIST MLP, watch
# it learn, ask it for predictions, and take its checkpoint home, both as a
# .fsck file (Flowstate's own; re-importable) and as a NumPy .npz.
#
#   examples/curl/walkthrough.sh [--server URL] [--token TOKEN] [--max-steps N]
#                                [--out DIR] [--images FILE] [--labels FILE]
#
#   --server     the server's HTTP address (default http://127.0.0.1:8080)
#   --token      a bearer token, when the server has auth.tokens
#   --max-steps  stop training after N steps (default 200; 0: the whole job)
#   --out        where the exported checkpoints go (default .)
#   --images, --labels
#                the Fashion-MNIST test set, read here for the predictions
#                (default /usr/share/datasets/fashion-mnist/t10k-*.gz)
#
# The server reads the training data itself, under its data root (a server
# started with `--data-root /usr/share/datasets` finds the paths of
# examples/jobs/fashion_mlp.json). Needs curl, gzip, od, sed and grep only.
# Exit status: 0 when the job succeeded and everything was exported, 1 when
# a call failed, 2 for bad usage.
set -euo pipefail

SERVER=http://127.0.0.1:8080
TOKEN=""
MAX_STEPS=200
OUT=.
DATASET=/usr/share/datasets/fashion-mnist
IMAGES=$DATASET/t10k-images-idx3-ubyte.gz
LABELS=$DATASET/t10k-labels-idx1-ubyte.gz
HERE=$(cd "$(dirname "$0")" && pwd)
JOB_FILE=$HERE/../jobs/fashion_mlp.json
while [ $# -gt 0 ]; do
  case "$1" in
    --server) SERVER="$2"; shift 2 ;;
    --token) TOKEN="$2"; shift 2 ;;
    --max-steps) MAX_STEPS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --images) IMAGES="$2"; shift 2 ;;
    --labels) LABELS="$2"; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "walkthrough.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
case "$MAX_STEPS" in ''|*[!0-9]*) echo "walkthrough.sh: --max-steps needs an integer" >&2; exit 2 ;; esac
mkdir -p "$OUT"

AUTH=()
[ -n "$TOKEN" ] && AUTH=(-H "Authorization: Bearer $TOKEN")
BODY=$(mktemp)
trap 'rm -f "$BODY"' EXIT

# api METHOD PATH [curl options...]: the response body on stdout; an HTTP
# error prints the server's error body and stops the script.
api() {
  local method=$1 path=$2
  shift 2
  local code
  code=$(curl -sS -X "$method" "${AUTH[@]}" -o "$BODY" -w '%{http_code}' "$@" "$SERVER$path") ||
    { echo "walkthrough.sh: $method $path: no answer from $SERVER" >&2; exit 1; }
  if [ "$code" -ge 400 ]; then
    echo "walkthrough.sh: $method $path -> HTTP $code: $(cat "$BODY")" >&2
    exit 1
  fi
  cat "$BODY"
}

# field NAME: the first string or number field NAME of the JSON on stdin
# (the server writes compact JSON: "name":"value" or "name":1.5).
field() {
  { grep -o "\"$1\":\"\{0,1\}[^\",}]*" || true; } | head -n 1 | sed "s/^\"$1\":\"\{0,1\}//"
}

echo "== 1. the server"
api GET /healthz; echo

echo "== 2. submit the job (examples/jobs/fashion_mlp.json, max_steps $MAX_STEPS)"
# The job file as it is, with "max_steps" added after its opening brace.
if [ "$MAX_STEPS" -gt 0 ]; then
  sed "0,/{/s//{\"max_steps\": $MAX_STEPS, /" "$JOB_FILE" >"$OUT/job.json"
else
  cp "$JOB_FILE" "$OUT/job.json"
fi
JOB=$(api POST /v1/jobs -H 'Content-Type: application/json' --data-binary @"$OUT/job.json")
JOB_ID=$(field job_id <<<"$JOB")
echo "submitted $JOB_ID ($(field state <<<"$JOB"))"

echo "== 3. watch it (server-sent events until the job ends)"
# Each event is "event: KIND" then "data: {job}"; the stream ends after the
# job's final state. (Without a stream: poll GET /v1/jobs/$JOB_ID.)
kind=""
curl -sSN "${AUTH[@]}" "$SERVER/v1/jobs/$JOB_ID/events" | while IFS= read -r line; do
  case "$line" in
    "event: "*) kind=${line#event: } ;;
    "data: "*)
      data=${line#data: }
      case "$kind" in
        step) echo "step $(field step <<<"$data")/$(field total_steps <<<"$data")  loss $(field loss <<<"$data")  $(field examples_per_sec <<<"$data") examples/s" ;;
        eval) echo "eval  accuracy $(field accuracy <<<"$data")" ;;
        *) echo "$kind  $(field state <<<"$data")  $(sed -n 's/.*"message":"\([^"]*\)".*/\1/p' <<<"$data")" ;;
      esac ;;
  esac
done
JOB=$(api GET "/v1/jobs/$JOB_ID")
STATE=$(field state <<<"$JOB")
echo "$JOB_ID: $STATE after $(field step <<<"$JOB") steps, loss $(field loss <<<"$JOB")"
if [ "$STATE" != SUCCEEDED ]; then
  echo "walkthrough.sh: the job ended $STATE: $(field error <<<"$JOB")" >&2
  exit 1
fi

echo "== 4. predict the first 8 test images"
# IDX files: a 16-byte header (images) or 8-byte one (labels), then one
# byte per pixel or label. The images go as uint8 [8, 28, 28], as training saw them.
N=8
# (head stops reading early: the subshells do not count gzip's broken pipe.)
PIXELS=$(set +o pipefail; gzip -dc "$IMAGES" | tail -c +17 | head -c $((N * 784)) | od -An -v -tu1 |
         tr -s ' \n' ',' | sed 's/^,//; s/,$//')
TRUTH=$(set +o pipefail; gzip -dc "$LABELS" | tail -c +9 | head -c $N | od -An -v -tu1 |
        tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
printf '{"inputs": {"x": {"dtype": "uint8", "shape": [%d, 28, 28], "data": [%s]}}, "fetches": ["predicted"], "encoding": "nested"}' \
  "$N" "$PIXELS" >"$OUT/predict.json"
PRED=$(api POST "/v1/jobs/$JOB_ID/predict" -H 'Content-Type: application/json' --data-binary @"$OUT/predict.json")
echo "predicted: $(sed -n 's/.*"predicted":\[\([^]]*\)\].*/\1/p' <<<"$PRED" | tr ',' ' ')"
echo "true:      $TRUTH"

echo "== 5. export the latest checkpoint"
api GET "/v1/jobs/$JOB_ID/checkpoints"; echo
api GET "/v1/jobs/$JOB_ID/checkpoints/export" >"$OUT/$JOB_ID.fsck"
api GET "/v1/jobs/$JOB_ID/checkpoints/export?format=npz" >"$OUT/$JOB_ID.npz"
echo "wrote $OUT/$JOB_ID.fsck ($(wc -c <"$OUT/$JOB_ID.fsck") bytes) and $OUT/$JOB_ID.npz ($(wc -c <"$OUT/$JOB_ID.npz") bytes)"
echo "  numpy: python3 -c 'import numpy; z = numpy.load(\"$OUT/$JOB_ID.npz\"); print({k: z[k].shape for k in z})'"

echo "== 6. import the .fsck back (a job can start from it with init_from)"
api POST /v1/checkpoints/import -H 'Content-Type: application/octet-stream' --data-binary @"$OUT/$JOB_ID.fsck"; echo
echo "walkthrough.sh: OK"
