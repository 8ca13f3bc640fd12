#!/usr/bin/env bash
# Official MCP clients against a running Breeze.
#
# Builds `breeze`, starts `breeze demo` on a free loopback port in a temp dir, then drives it with
#   - the TypeScript SDK (@modelcontextprotocol/sdk): legacy SSE, Streamable HTTP, stdio bridge
#   - the Python SDK (PyPI `mcp`): Streamable HTTP and legacy SSE
#   each SDK calls every tool the execute key sees (and an error result), with its output-schema
#   validation on: a result that does not match the tool's outputSchema fails the suite
#   - the MCP Inspector CLI: tools/list over Streamable HTTP
#   - OAuth 2.1 with the TypeScript SDK's OAuth client provider and the Python SDK's
#     (`OAuthClientProvider`), on a second demo started with MCP_OAUTH_ENABLED: discovery → DCR
#     → consent (answered headless by a signed-in HTTP client) → token → tools → refresh →
#     (Python: scope step-up on 403 insufficient_scope) → revoke → 401 → re-authorization
# and exits non-zero when any check fails. Pins: tests/clients/package.json (+ package-lock.json)
# and tests/clients/requirements.txt.
#
# Environment: CLIENTS_KEEP_TMP=1 keeps the temp dir (server log, demo.json) for debugging.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLIENTS="$ROOT/tests/clients"
cd "$ROOT"

log() { printf '\n== %s\n' "$*"; }
die() { printf 'clients.sh: %s\n' "$*" >&2; exit 1; }

for tool in cargo npm python3 curl; do
  command -v "$tool" >/dev/null || die "$tool is required"
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/breeze-clients.XXXXXX")
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
  if [ "${CLIENTS_KEEP_TMP:-}" = 1 ]; then
    echo "kept $WORK"
  else
    rm -rf "$WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- 1. the breeze binary ---------------------------------------------------------------------
log "cargo build -p breeze-cli"
cargo build -p breeze-cli --locked
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
# A private copy: a concurrent rebuild of target/debug/breeze cannot swap it under the test.
mkdir -p "$WORK/bin"
cp "$TARGET_DIR/debug/breeze" "$WORK/bin/breeze"
BREEZE="$WORK/bin/breeze"

# ---- 2. npm deps (SDK, Inspector, Node 22) ----------------------------------------------------
log "npm deps in tests/clients"
lock_sum=$(sha256sum "$CLIENTS/package-lock.json" | cut -d' ' -f1)
stamp="$CLIENTS/node_modules/.breeze-lock-sha256"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$lock_sum" ] \
  && "$CLIENTS/node_modules/.bin/node" --version >/dev/null 2>&1; then
  echo "node_modules matches package-lock.json; reusing it"
else
  (cd "$CLIENTS" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$lock_sum" >"$stamp"
fi
NODE_BIN="$CLIENTS/node_modules/.bin"
node_version=$("$NODE_BIN/node" --version) || die "node@22 from tests/clients did not install (its preinstall script makes bin/node)"
case "$node_version" in v22.*) ;; *) die "tests/clients/node_modules/.bin/node is $node_version, want v22.x" ;; esac
echo "node $node_version, @modelcontextprotocol/sdk $("$NODE_BIN/node" -p 'require("'"$CLIENTS"'/node_modules/@modelcontextprotocol/sdk/package.json").version'), inspector $("$NODE_BIN/node" -p 'require("'"$CLIENTS"'/node_modules/@modelcontextprotocol/inspector/package.json").version')"

# ---- 3. Python venv with the pinned `mcp` -----------------------------------------------------
log "Python venv"
PYENV="${XDG_CACHE_HOME:-$HOME/.cache}/breeze/pyenv"
req_sum=$(sha256sum "$CLIENTS/requirements.txt" | cut -d' ' -f1)
if [ -f "$PYENV/.breeze-req-sha256" ] && [ "$(cat "$PYENV/.breeze-req-sha256")" = "$req_sum" ] \
  && "$PYENV/bin/python" -c 'import mcp' 2>/dev/null; then
  echo "reusing $PYENV"
else
  rm -rf "$PYENV"
  mkdir -p "$(dirname "$PYENV")"
  python3 -m venv "$PYENV"
  "$PYENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$CLIENTS/requirements.txt"
  echo "$req_sum" >"$PYENV/.breeze-req-sha256"
fi
echo "python $("$PYENV/bin/python" -c 'import sys; print(sys.version.split()[0])'), mcp $("$PYENV/bin/python" -c 'from importlib.metadata import version; print(version("mcp"))')"

# ---- 4. breeze demo on a free port ------------------------------------------------------------
# breeze refuses unknown BREEZE_*/MCP_* variables; DATABASE_URL/REDIS_URL would move it off the
# embedded SQLite database. Run it (and the stdio bridge) without any of them.
unset_args=()
while IFS= read -r name; do
  unset_args+=(-u "$name")
done < <(env | sed -n 's/^\(BREEZE_[A-Za-z0-9_]*\|MCP_[A-Za-z0-9_]*\|DATABASE_URL\|REDIS_URL\)=.*/\1/p')

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# start_server PORT [VAR=value...]: the extra settings go to this demo only.
start_server() {
  local port=$1; shift
  rm -rf "$WORK/demo" && mkdir -p "$WORK/demo"
  # MCP_APPROVAL_WAIT_SECONDS=0: a Tier 3 call answers "pending approval" at once (its result is
  # schema-checked by the SDKs like any other), so calling every tool stays fast.
  (cd "$WORK/demo" && exec env "${unset_args[@]}" MCP_APPROVAL_WAIT_SECONDS=0 "$@" "$BREEZE" demo --listen "127.0.0.1:$port" >server.log 2>&1) &
  SERVER_PID=$!
  for _ in $(seq 1 300); do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      wait "$SERVER_PID" 2>/dev/null || true
      SERVER_PID=""
      return 1
    fi
    if [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/healthz")" = 200 ] \
      && [ -s "$WORK/demo/breeze-data/demo.json" ]; then
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
DEMO_JSON="$WORK/demo/breeze-data/demo.json"
echo "breeze demo (pid $SERVER_PID) at http://127.0.0.1:$PORT"

# ---- 5. the clients ---------------------------------------------------------------------------
results="$WORK/results.txt"
: >"$results"
failed_suites=0

# run_suite NAME CMD... (CMD may be a shell function): stdout is shown and recorded; stderr is shown once per distinct line
# (the SDK's Ajv repeats the same schema warning for every tools/list).
run_suite() {
  local name=$1; shift
  log "$name"
  local rc=0
  "$@" 2>"$WORK/$name.stderr" | tee -a "$results" || rc=$?
  if [ -s "$WORK/$name.stderr" ]; then
    echo "-- $name stderr (each distinct line once):"
    awk '!seen[$0]++' "$WORK/$name.stderr"
  fi
  if [ "$rc" -ne 0 ]; then
    echo "-- $name exited $rc"
    failed_suites=$((failed_suites + 1))
  fi
}

export PATH="$NODE_BIN:$PATH"
run_suite ts-sdk timeout 300 env "${unset_args[@]}" node "$CLIENTS/ts_client.mjs" \
  --demo-json "$DEMO_JSON" --breeze-bin "$BREEZE"
run_suite py-sdk timeout 300 env "${unset_args[@]}" "$PYENV/bin/python" "$CLIENTS/py_client.py" \
  --demo-json "$DEMO_JSON"

READ_KEY=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["api_keys"]["read"])' "$DEMO_JSON")
MCP_URL=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["mcp_url"])' "$DEMO_JSON")
inspector_check() {
  # HOME in the temp dir: the Inspector keeps its catalog and storage under ~/.mcp-inspector.
  mkdir -p "$WORK/inspector-home"
  local rc=0
  HOME="$WORK/inspector-home" timeout 120 "$NODE_BIN/mcp-inspector" --cli "$MCP_URL" --transport http \
    --method tools/list --header "X-API-Key: $READ_KEY" --format json --quiet \
    >"$WORK/inspector.json" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "FAIL inspector-cli tools/list (http): mcp-inspector exited $rc"
    return 1
  fi
  node "$CLIENTS/inspector_check.mjs" "$WORK/inspector.json"
}
run_suite inspector-cli inspector_check

# ---- 5b. OAuth: a second demo with OAuth and anonymous registration on -------------------------
stop_server() {
  kill "$SERVER_PID" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}
log "breeze demo with OAuth"
stop_server
started=""
for attempt in 1 2 3; do
  PORT=$(free_port)
  if start_server "$PORT" MCP_OAUTH_ENABLED=true OAUTH_DCR_ENABLED=true OAUTH_DCR_ALLOW_ANONYMOUS=true; then
    started=1; break
  fi
  echo "attempt $attempt: breeze demo with OAuth on port $PORT did not start:" >&2
  tail -n 20 "$WORK/demo/server.log" >&2 || true
done
[ -n "$started" ] || die "breeze demo with OAuth would not start"
run_suite ts-oauth timeout 120 env "${unset_args[@]}" node "$CLIENTS/ts_oauth.mjs" --demo-json "$DEMO_JSON"
run_suite py-oauth timeout 120 env "${unset_args[@]}" "$PYENV/bin/python" "$CLIENTS/py_oauth.py" --demo-json "$DEMO_JSON"

# ---- 6. verdict -------------------------------------------------------------------------------
passed=$(grep -c '^PASS ' "$results" || true)
failed=$(grep -c '^FAIL ' "$results" || true)
log "summary"
grep -E '^(PASS|FAIL) ' "$results" || true
if [ "$failed_suites" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=$failed_suites; fi
echo "clients: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$failed_suites" -eq 0 ]
