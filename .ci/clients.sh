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
# With --cluster, every suite runs against two instances instead of one demo: `breeze demo` and
# `breeze serve` on one PostgreSQL database and Redis, behind nginx balancing round-robin per
# request with no affinity, so consecutive requests of one session land on different instances
# (sessions, legacy SSE replies, approvals, agent commands and OAuth tokens must all work
# across them); it then checks that both instances answered MCP requests.
#
# Environment: CLIENTS_KEEP_TMP=1 keeps the temp dir (server log, demo.json) for debugging.
set -euo pipefail
CLUSTER=""
case "${1:-}" in
  --cluster) CLUSTER=1 ;;
  "") ;;
  *) echo "usage: $0 [--cluster]" >&2; exit 2 ;;
esac
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLIENTS="$ROOT/tests/clients"
cd "$ROOT"

CI_NAME=clients.sh
CI_KEEP_VAR=CLIENTS_KEEP_TMP
# shellcheck source=.ci/lib.sh
. "$ROOT/.ci/lib.sh"
ci_require cargo npm python3 curl

# ---- 1. the breeze binary ---------------------------------------------------------------------
ci_build_breeze

# ---- 2. npm deps (SDK, Inspector, Node 22) ----------------------------------------------------
ci_npm_ci "$CLIENTS" "$CLIENTS/node_modules/.bin/node" --version
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
# start_server PORT [VAR=value...]: the extra settings go to this demo only.
# MCP_APPROVAL_WAIT_SECONDS=0: a Tier 3 call answers "pending approval" at once (its result is
# schema-checked by the SDKs like any other), so calling every tool stays fast.
start_server() { ci_start_demo "$1" MCP_APPROVAL_WAIT_SECONDS=0 "${@:2}"; }
if [ -n "$CLUSTER" ]; then
  ci_require psql
  ci_cluster_up "two instances behind nginx" MCP_APPROVAL_WAIT_SECONDS=0
else
  ci_demo_up "breeze demo" start_server
fi

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
  --demo-json "$DEMO_JSON" --breeze-bin "$BREEZE"

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

# both_answered LABEL: in a cluster, each instance answered MCP requests (nginx's log names the
# instance of every proxied request).
both_answered() {
  local counts
  counts=$(awk '$3 ~ /mcp/ { n[$1]++ } END { for (u in n) print u, n[u] }' "$UPSTREAM_LOG" | sort)
  if [ "$(printf '%s\n' "$counts" | grep -c .)" -ge 2 ]; then
    echo "PASS cluster $1: MCP requests answered by each instance: $(echo $counts)" | tee -a "$results"
  else
    echo "FAIL cluster $1: MCP requests answered by only: $(echo $counts)" | tee -a "$results"
  fi
}

# ---- 5b. OAuth: a second demo with OAuth and anonymous registration on -------------------------
oauth_settings=(MCP_OAUTH_ENABLED=true OAUTH_DCR_ENABLED=true OAUTH_DCR_ALLOW_ANONYMOUS=true)
if [ -n "$CLUSTER" ]; then
  both_answered "before OAuth"
  stop_cluster
  ci_cluster_up "two instances with OAuth behind nginx" MCP_APPROVAL_WAIT_SECONDS=0 "${oauth_settings[@]}"
else
  stop_server
  ci_demo_up "breeze demo with OAuth" start_server "${oauth_settings[@]}"
fi
run_suite ts-oauth timeout 120 env "${unset_args[@]}" node "$CLIENTS/ts_oauth.mjs" --demo-json "$DEMO_JSON"
run_suite py-oauth timeout 120 env "${unset_args[@]}" "$PYENV/bin/python" "$CLIENTS/py_oauth.py" --demo-json "$DEMO_JSON"

[ -n "$CLUSTER" ] && both_answered "OAuth"

# ---- 6. verdict -------------------------------------------------------------------------------
passed=$(grep -c '^PASS ' "$results" || true)
failed=$(grep -c '^FAIL ' "$results" || true)
log "summary"
grep -E '^(PASS|FAIL) ' "$results" || true
if [ "$failed_suites" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=$failed_suites; fi
echo "clients: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$failed_suites" -eq 0 ]
