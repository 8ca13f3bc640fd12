#!/usr/bin/env bash
# The dashboard in a real browser.
#
# Installs Debian's chromium when /usr/bin/chromium is missing, builds `breeze`, starts
# `breeze demo` on a free loopback port in a temp dir (its agent enrolls this machine), then runs
# tests/browser/dashboard.test.mjs (node's test runner, playwright-core driving headless
# Chromium): sign in through `next`, create an API key (shown once, copied, revoked, then refused
# by MCP), approve a waiting Tier 3 MCP call and see it complete, deny one and see the error, the
# demo machine's chart gaining a point, another organization's device URL answering 404.
# Screenshots of every page at 1280 px and 390 px go to target/browser-screenshots/.
# Pins: tests/browser/package.json + package-lock.json.
#
# Environment: BROWSER_KEEP_TMP=1 keeps the temp dir (server log, demo.json) for debugging.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SUITE="$ROOT/tests/browser"
cd "$ROOT"

log() { printf '\n== %s\n' "$*"; }
die() { printf 'browser.sh: %s\n' "$*" >&2; exit 1; }

for tool in cargo npm node python3 curl; do
  command -v "$tool" >/dev/null || die "$tool is required"
done

# ---- 1. Chromium ------------------------------------------------------------------------------
if [ ! -x /usr/bin/chromium ]; then
  log "apt-get install chromium"
  command -v apt-get >/dev/null || die "/usr/bin/chromium is missing and apt-get is not available"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
/usr/bin/chromium --version

WORK=$(mktemp -d "${TMPDIR:-/tmp}/breeze-browser.XXXXXX")
SERVER_PID=""
cleanup() {
  local rc=$?
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  if [ "$rc" -ne 0 ] && [ -f "$WORK/demo/server.log" ]; then
    printf '\n== server log (last 40 lines)\n'
    tail -n 40 "$WORK/demo/server.log" || true
  fi
  if [ "${BROWSER_KEEP_TMP:-}" = 1 ]; then
    echo "kept $WORK"
  else
    rm -rf "$WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- 2. the breeze binary ---------------------------------------------------------------------
log "cargo build -p breeze-cli"
cargo build -p breeze-cli --locked
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
mkdir -p "$WORK/bin"
cp "$TARGET_DIR/debug/breeze" "$WORK/bin/breeze"
BREEZE="$WORK/bin/breeze"

# ---- 3. npm deps ------------------------------------------------------------------------------
log "npm deps in tests/browser"
lock_sum=$(sha256sum "$SUITE/package-lock.json" | cut -d' ' -f1)
stamp="$SUITE/node_modules/.breeze-lock-sha256"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$lock_sum" ]; then
  echo "node_modules matches package-lock.json; reusing it"
else
  (cd "$SUITE" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$lock_sum" >"$stamp"
fi

# ---- 4. breeze demo on a free port ------------------------------------------------------------
# breeze refuses unknown BREEZE_*/MCP_* variables; DATABASE_URL/REDIS_URL would move it off the
# embedded SQLite database. Run it without any of them.
unset_args=()
while IFS= read -r name; do
  unset_args+=(-u "$name")
done < <(env | sed -n 's/^\(BREEZE_[A-Za-z0-9_]*\|MCP_[A-Za-z0-9_]*\|DATABASE_URL\|REDIS_URL\)=.*/\1/p')

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

start_server() {
  local port=$1
  rm -rf "$WORK/demo" && mkdir -p "$WORK/demo"
  # A Tier 3 call waits up to 120 s for the browser to approve it.
  (cd "$WORK/demo" && exec env "${unset_args[@]}" MCP_APPROVAL_WAIT_SECONDS=120 "$BREEZE" demo --listen "127.0.0.1:$port" >server.log 2>&1) &
  SERVER_PID=$!
  for _ in $(seq 1 300); do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      wait "$SERVER_PID" 2>/dev/null || true
      SERVER_PID=""
      return 1
    fi
    if [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/healthz")" = 200 ] \
      && [ -s "$WORK/demo/breeze-data/demo.json" ] && [ -s "$WORK/demo/breeze-data/agent/agent.json" ]; then
      return 0
    fi
    sleep 0.2
  done
  echo "breeze demo did not become healthy within 60s" >&2
  return 1
}

log "breeze demo"
started=""
for attempt in 1 2 3; do
  PORT=$(free_port)
  if start_server "$PORT"; then started=1; break; fi
  echo "attempt $attempt: breeze demo on port $PORT did not start:" >&2
  tail -n 20 "$WORK/demo/server.log" >&2 || true
done
[ -n "$started" ] || die "breeze demo would not start"
echo "breeze demo (pid $SERVER_PID) at http://127.0.0.1:$PORT"

# ---- 5. the browser tests ---------------------------------------------------------------------
log "dashboard in headless Chromium"
SHOTS="$TARGET_DIR/browser-screenshots"
rm -rf "$SHOTS"
(cd "$SUITE" && timeout 600 env "${unset_args[@]}" BREEZE_URL="http://127.0.0.1:$PORT" \
  DEMO_JSON="$WORK/demo/breeze-data/demo.json" AGENT_JSON="$WORK/demo/breeze-data/agent/agent.json" \
  SCREENSHOTS="$SHOTS" node --test --test-reporter=spec dashboard.test.mjs)
echo "screenshots: $SHOTS"
