#!/usr/bin/env bash
# Scrapes a real `flowstate serve` with the real Prometheus server:
#
#   prometheus_scrape.sh --flowstate BINARY [--prometheus BINARY] [--timeout SECONDS]
#
# Starts flowstate on free ports (--port-file), starts Prometheus scraping it
# every second, and polls Prometheus's HTTP API until up{job="flowstate"} is
# 1 and flowstate_* series are stored (with Prometheus's own `job` label, not
# an `exported_job`), then stops both with SIGTERM; flowstate must exit 0.
# Needs Debian's `prometheus` package (scripts/install-deps installs it) and
# /usr/bin/python3 (for free ports and the JSON API).
set -uo pipefail

FLOWSTATE=""
PROMETHEUS="$(command -v prometheus || true)"
TIMEOUT=60
while [ $# -gt 0 ]; do
  case "$1" in
    --flowstate) FLOWSTATE="${2:-}"; shift 2 ;;
    --prometheus) PROMETHEUS="${2:-}"; shift 2 ;;
    --timeout) TIMEOUT="${2:-}"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "prometheus_scrape: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
PY=/usr/bin/python3

fail() {
  echo "prometheus_scrape: FAIL: $*" >&2
  for log in "$TMP/flowstate.log" "$TMP/prometheus.log"; do
    if [ -s "$log" ]; then
      echo "--- last lines of $(basename "$log") ---" >&2
      tail -n 30 "$log" >&2
    fi
  done
  exit 1
}

if [ -z "$FLOWSTATE" ] || [ ! -x "$FLOWSTATE" ]; then
  echo "prometheus_scrape: --flowstate BINARY is required and must be executable (got '$FLOWSTATE')" >&2
  exit 2
fi
if [ -z "$PROMETHEUS" ] || [ ! -x "$PROMETHEUS" ]; then
  echo "prometheus_scrape: the prometheus server was not found: install Debian's 'prometheus' package" \
       "(scripts/install-deps does) or pass --prometheus" >&2
  exit 2
fi
[ -x "$PY" ] || { echo "prometheus_scrape: $PY is needed" >&2; exit 2; }

TMP="$(mktemp -d "${TMPDIR:-/tmp}/flowstate_prom_scrape.XXXXXX")"
FS_PID=""
PROM_PID=""
cleanup() {
  # Only the processes this script started, by their ids.
  [ -n "$PROM_PID" ] && kill -TERM "$PROM_PID" 2>/dev/null && wait "$PROM_PID" 2>/dev/null
  [ -n "$FS_PID" ] && kill -KILL "$FS_PID" 2>/dev/null && wait "$FS_PID" 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT

# --- flowstate ---------------------------------------------------------------
mkdir -p "$TMP/data"
"$FLOWSTATE" serve --http 127.0.0.1:0 --grpc 127.0.0.1:0 --port-file "$TMP/ports.json" \
  --data-dir "$TMP/data" >"$TMP/flowstate.log" 2>&1 &
FS_PID=$!

deadline=$((SECONDS + 30))
while [ ! -s "$TMP/ports.json" ]; do
  kill -0 "$FS_PID" 2>/dev/null || fail "flowstate serve exited before writing its port file"
  [ $SECONDS -lt $deadline ] || fail "no port file from flowstate serve after 30 s"
  sleep 0.1
done
HTTP_PORT="$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["http"])' "$TMP/ports.json")" \
  || fail "cannot read the http port from $(cat "$TMP/ports.json")"
echo "prometheus_scrape: flowstate serve on 127.0.0.1:$HTTP_PORT (pid $FS_PID)"

# --- prometheus --------------------------------------------------------------
PROM_PORT="$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
cat >"$TMP/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: flowstate
    metrics_path: /metrics
    static_configs:
      - targets: ["127.0.0.1:$HTTP_PORT"]
EOF
"$PROMETHEUS" --config.file "$TMP/prometheus.yml" --storage.tsdb.path "$TMP/tsdb" \
  --web.listen-address "127.0.0.1:$PROM_PORT" >"$TMP/prometheus.log" 2>&1 &
PROM_PID=$!
echo "prometheus_scrape: prometheus on 127.0.0.1:$PROM_PORT (pid $PROM_PID)"

# --- poll --------------------------------------------------------------------
"$PY" - "$PROM_PORT" "$HTTP_PORT" "$TIMEOUT" "$PROM_PID" "$FS_PID" <<'EOF' || fail "Prometheus did not store flowstate's metrics"
import json, os, sys, time, urllib.parse, urllib.request

prom_port, http_port, timeout, prom_pid, fs_pid = sys.argv[1:6]
base = f"http://127.0.0.1:{prom_port}/api/v1/query?query="

def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except OSError:
        return False

def query(q):
    with urllib.request.urlopen(base + urllib.parse.quote(q), timeout=5) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{q}: {body}")
    return body["data"]["result"]

# One request of our own, so that flowstate_http_requests_total has a series.
try:
    urllib.request.urlopen(f"http://127.0.0.1:{http_port}/healthz", timeout=5).read()
except Exception as e:  # noqa: BLE001 - reported, the poll decides
    print(f"prometheus_scrape: GET /healthz: {e}")

deadline = time.monotonic() + float(timeout)
last = "no answer yet"
while time.monotonic() < deadline:
    if not alive(prom_pid):
        sys.exit("prometheus exited")
    if not alive(fs_pid):
        sys.exit("flowstate serve exited")
    try:
        up = query('up{job="flowstate"}')
        reqs = query('flowstate_http_requests_total{job="flowstate"}')
        if up and up[0]["value"][1] == "1" and reqs:
            exported = query('{__name__=~"flowstate_.*", exported_job!=""}')
            if exported:
                sys.exit(f"series with exported_job (a `job` label clashes with Prometheus's): {exported[:3]}")
            names = query('count by (__name__) ({__name__=~"flowstate_.*", job="flowstate"})')
            print("prometheus_scrape: up == 1; stored: "
                  + ", ".join(sorted(r["metric"]["__name__"] for r in names)))
            sys.exit(0)
        last = f"up={up and up[0]['value'][1]} flowstate_http_requests_total series={len(reqs)}"
    except Exception as e:  # noqa: BLE001 - Prometheus is still starting
        last = str(e)
    time.sleep(0.5)
sys.exit(f"timed out after {timeout} s ({last})")
EOF

# --- stop --------------------------------------------------------------------
kill -TERM "$PROM_PID" 2>/dev/null
wait "$PROM_PID" 2>/dev/null
PROM_PID=""

kill -TERM "$FS_PID" || fail "flowstate serve is gone before SIGTERM"
# A watchdog kills it if it does not stop within 30 s.
( sleep 30; kill -KILL "$FS_PID" ) >/dev/null 2>&1 &
WATCHDOG=$!
wait "$FS_PID"
rc=$?
FS_PID=""
kill "$WATCHDOG" 2>/dev/null
wait "$WATCHDOG" 2>/dev/null
[ "$rc" -ne 137 ] || fail "flowstate serve still running 30 s after SIGTERM (killed)"
[ "$rc" -eq 0 ] || fail "flowstate serve exited with $rc after SIGTERM (want 0)"
echo "prometheus_scrape: OK (flowstate exited 0 on SIGTERM)"
