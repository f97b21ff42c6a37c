#!/usr/bin/env bash
# From torch.onnx.export to a trained .onnx back in your hands, with curl:
# upload an exported model, train it with a job that names it, watch it,
# and download the trained model (ONNX, BatchNorm statistics included).
#
#   examples/onnx/walkthrough.sh [--server URL] [--token TOKEN] [--model NAME]
#                                [--onnx FILE] [--max-steps N] [--out DIR]
#
#   --server     the server's HTTP address (default http://127.0.0.1:8080)
#   --token      a bearer token, when the server has auth.tokens
#   --model      which example (examples/onnx/NAME.json; default fashion_cnn)
#   --onnx       the exported model (default: exported now by
#                examples/onnx/export.py, which needs python3-torch)
#   --max-steps  stop training after N steps (default 300; 0: the whole job)
#   --out        where the models go (default .)
#
# The server reads Fashion-MNIST under its data root (a server started with
# `--data-root /usr/share/datasets`). Besides the export, needs curl and
# sed only. Exit status: 0 when the job succeeded and the trained model was
# downloaded, 1 when a call failed, 2 for bad usage.
set -euo pipefail

SERVER=http://127.0.0.1:8080
TOKEN=""
MODEL=fashion_cnn
ONNX=""
MAX_STEPS=300
OUT=.
HERE=$(cd "$(dirname "$0")" && pwd)
while [ $# -gt 0 ]; do
  case "$1" in
    --server) SERVER="$2"; shift 2 ;;
    --token) TOKEN="$2"; shift 2 ;;
    --model) MODEL="$2"; shift 2 ;;
    --onnx) ONNX="$2"; shift 2 ;;
    --max-steps) MAX_STEPS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "walkthrough.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
case "$MAX_STEPS" in ''|*[!0-9]*) echo "walkthrough.sh: --max-steps needs an integer" >&2; exit 2 ;; esac
[ -f "$HERE/$MODEL.json" ] || { echo "walkthrough.sh: no job file $HERE/$MODEL.json" >&2; exit 2; }
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
  if [ "${code:0:1}" != 2 ]; then
    echo "walkthrough.sh: $method $path: HTTP $code: $(cat "$BODY")" >&2
    exit 1
  fi
  cat "$BODY"
}
# field NAME: a string or number field of the JSON object on stdin.
field() { sed -n "s/.*\"$1\": *\"\{0,1\}\([^\",}]*\).*/\1/p" | head -n 1; }

echo "== 1. export the model from PyTorch"
if [ -z "$ONNX" ]; then
  /usr/bin/python3 "$HERE/export.py" "$OUT" "$MODEL"
  ONNX=$OUT/$MODEL.onnx
fi

echo "== 2. upload it"
UP=$(api POST "/v1/models?name=$MODEL" -H 'Content-Type: application/octet-stream' --data-binary @"$ONNX")
MODEL_ID=$(field model_id <<<"$UP")
echo "$MODEL_ID: $(field bytes <<<"$UP") bytes, opset $(field opset <<<"$UP"), $(field parameters <<<"$UP") parameters"

echo "== 3. train it: $HERE/$MODEL.json names $MODEL_ID"
JOB_JSON=$(sed "s/MODEL_ID/$MODEL_ID/" "$HERE/$MODEL.json")
[ "$MAX_STEPS" -gt 0 ] && JOB_JSON=$(sed "s/\"seed\": 1/\"seed\": 1, \"max_steps\": $MAX_STEPS/" <<<"$JOB_JSON")
JOB=$(api POST /v1/jobs -H 'Content-Type: application/json' --data-binary "$JOB_JSON")
JOB_ID=$(field job_id <<<"$JOB")
while :; do
  JOB=$(api GET "/v1/jobs/$JOB_ID")
  STATE=$(field state <<<"$JOB")
  case "$STATE" in SUCCEEDED|FAILED|CANCELLED) break ;; esac
  echo "$JOB_ID: $STATE, step $(field step <<<"$JOB"), loss $(field loss <<<"$JOB")"
  sleep 2
done
echo "$JOB_ID: $STATE after $(field step <<<"$JOB") steps, loss $(field loss <<<"$JOB")"
if [ "$STATE" != SUCCEEDED ]; then
  echo "walkthrough.sh: the job ended $STATE: $(field error <<<"$JOB")" >&2
  exit 1
fi
echo "metrics: $(sed -n 's/.*"metrics": *\({[^}]*}\).*/\1/p' <<<"$JOB")"

echo "== 4. download the trained model"
api GET "/v1/jobs/$JOB_ID/model.onnx" >"$OUT/$MODEL.trained.onnx"
echo "$OUT/$MODEL.trained.onnx: $(wc -c <"$OUT/$MODEL.trained.onnx") bytes"
