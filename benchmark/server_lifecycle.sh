# Sourced by the recipe scripts: start one server, wait for /health, stop it.
# Needs PORT; sets URL and SERVER_PID. The server runs as `python3 -m sglang.srt.entrypoints serve` so
# it works where only the import package exists (the GPU machine has no `sglang` console script).
URL="http://127.0.0.1:${PORT:?PORT must be set}"
SERVER_PID=""

get() {  # get URL: the body, or a failure status (curl where the machine has it)
  if command -v curl >/dev/null; then curl -sf "$1"; else
    python3 -c "import sys, urllib.request as u; sys.stdout.write(u.urlopen(sys.argv[1], timeout=5).read().decode())" "$1" 2>/dev/null
  fi
}

start_server() {  # start_server LOGFILE WAIT_S FLAGS...: 0 once healthy; 1 (log tail on stderr) if it died or timed out
  local log=$1 wait_s=$2; shift 2
  python3 -m sglang.srt.entrypoints serve --port "$PORT" "$@" >> "$log" 2>&1 &
  SERVER_PID=$!
  local deadline=$((SECONDS + wait_s))
  while ((SECONDS < deadline)); do
    if get "$URL/health" >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "server died (log: $log)" >&2; tail -20 "$log" >&2; SERVER_PID=""; return 1
    fi
    sleep 0.5
  done
  echo "server not healthy after $wait_s s (log: $log)" >&2
  stop_server
  return 1
}

stop_server() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}
trap stop_server EXIT
