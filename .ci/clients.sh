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
#     (Python: scope step-up on 403 insufficient_scope) → revoke → 401 → re-authorization; the
#     same suites on the SDKs' newest releases
#   - mcp-remote (pinned and newest), run as a client config runs it and driven over stdio by
#     the TypeScript SDK: its software_id registration refused by default with the setting
#     named, then (OAUTH_DCR_IGNORE_SOFTWARE_ID) the whole sign-in through its callback server,
#     tools through the bridge, and a second start from its stored tokens
#   - the clients' latest releases beside the pinned ones (on a third demo): the Python SDK 2.x
#     (`mcp`, pinned in tests/clients/requirements-modern.txt, and the newest on PyPI) in its
#     default mode (2026-07-28, with every method's result checked against that revision's
#     schema) and in legacy mode; the TypeScript SDK v1 (@modelcontextprotocol/sdk) and the v2
#     client package (@modelcontextprotocol/client) at the pinned and the newest versions; the
#     Inspector CLI's schema portability check (--strict: no warning) at both; and /metrics in
#     both formats through the Prometheus Python client's parsers
# and exits non-zero when any check fails. Pins: tests/clients/package.json (+ package-lock.json)
# and tests/clients/requirements*.txt. The newest releases are installed once a day into
# ~/.cache/breeze (npm-latest, pyenv-latest), so a client that updates shows up within a day
# and CI does not reinstall them on every run.
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

# make_venv DIR STAMP PIP_ARGS…: a venv in DIR with PIP_ARGS installed, reused while DIR's stamp
# is STAMP.
make_venv() {
  local dir=$1 stamp=$2; shift 2
  if [ -f "$dir/.breeze-stamp" ] && [ "$(cat "$dir/.breeze-stamp")" = "$stamp" ] \
    && "$dir/bin/python" -c 'import mcp' 2>/dev/null; then
    echo "reusing $dir"
    return 0
  fi
  rm -rf "$dir"
  mkdir -p "$(dirname "$dir")"
  python3 -m venv "$dir"
  "$dir/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
  echo "$stamp" >"$dir/.breeze-stamp"
}
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/breeze"
TODAY=$(date -u +%Y-%m-%d)
if [ -z "$CLUSTER" ]; then
  log "Python SDK 2.x, pinned and newest"
  PYMOD="$CACHE/pyenv-modern"
  make_venv "$PYMOD" "$(sha256sum "$CLIENTS/requirements-modern.txt" | cut -d' ' -f1)" \
    -r "$CLIENTS/requirements-modern.txt"
  PYLATEST="$CACHE/pyenv-latest"
  make_venv "$PYLATEST" "latest $TODAY" --upgrade mcp prometheus-client
  for env_dir in "$PYMOD" "$PYLATEST"; do
    echo "$env_dir: mcp $("$env_dir/bin/python" -c 'from importlib.metadata import version; print(version("mcp"))')"
  done

  log "npm: the newest TypeScript SDK, v2 client and Inspector"
  NPM_LATEST="$CACHE/npm-latest"
  if [ "$(cat "$NPM_LATEST/.breeze-stamp" 2>/dev/null)" != "latest $TODAY" ]; then
    rm -rf "$NPM_LATEST" && mkdir -p "$NPM_LATEST"
    printf '{"name":"breeze-latest-clients","private":true,"type":"module"}\n' >"$NPM_LATEST/package.json"
    (cd "$NPM_LATEST" && npm install --no-audit --no-fund --loglevel=error \
      @modelcontextprotocol/sdk@latest @modelcontextprotocol/client@latest @modelcontextprotocol/inspector@latest \
      mcp-remote@latest)
    echo "latest $TODAY" >"$NPM_LATEST/.breeze-stamp"
  else
    echo "reusing $NPM_LATEST"
  fi
  for pkg in @modelcontextprotocol/sdk @modelcontextprotocol/client @modelcontextprotocol/inspector mcp-remote; do
    echo "newest $pkg: $("$NODE_BIN/node" -p "require('$NPM_LATEST/node_modules/$pkg/package.json').version")"
  done
fi

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
if [ -z "$CLUSTER" ]; then
  # The newest SDKs' OAuth clients, and mcp-remote (pinned and newest), whose software_id this
  # demo refuses by default.
  cp "$CLIENTS/ts_oauth.mjs" "$CLIENTS/oauth_consent.mjs" "$CLIENTS/mcp_remote.mjs" "$NPM_LATEST/"
  run_suite ts-oauth-latest timeout 120 env "${unset_args[@]}" node "$NPM_LATEST/ts_oauth.mjs" --demo-json "$DEMO_JSON" --label ts-oauth-latest
  run_suite py-oauth-latest timeout 120 env "${unset_args[@]}" "$PYLATEST/bin/python" "$CLIENTS/py_oauth.py" --demo-json "$DEMO_JSON" \
    --label py-oauth-latest
  mcp_remote() { # LABEL DIR EXPECT: DIR holds mcp_remote.mjs and node_modules/mcp-remote
    timeout 150 env "${unset_args[@]}" node "$2/mcp_remote.mjs" --demo-json "$DEMO_JSON" \
      --mcp-remote "$2/node_modules/mcp-remote/dist/proxy.js" --expect "$3" --label "$1"
  }
  run_suite mcp-remote-pinned-refused mcp_remote pinned "$CLIENTS" refused
  run_suite mcp-remote-latest-refused mcp_remote latest "$NPM_LATEST" refused
  stop_server
  ci_demo_up "breeze demo with OAuth accepting mcp-remote's software_id" start_server \
    "${oauth_settings[@]}" OAUTH_DCR_IGNORE_SOFTWARE_ID=true
  run_suite mcp-remote-pinned mcp_remote pinned "$CLIENTS" accepted
  run_suite mcp-remote-latest mcp_remote latest "$NPM_LATEST" accepted
fi

[ -n "$CLUSTER" ] && both_answered "OAuth"

# ---- 5c. the newest releases, the 2026-07-28 schema, the portability check, /metrics ---------
if [ -z "$CLUSTER" ]; then
  METRICS_TOKEN="metrics-$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
  stop_server
  # Every suite here calls every tool with one key: the message limit is lifted so that they
  # do not starve each other (the limit has its own tests).
  ci_demo_up "breeze demo for the newest clients" start_server \
    BREEZE_METRICS_TOKEN="$METRICS_TOKEN" MCP_MESSAGE_RATE_LIMIT_PER_MINUTE=100000
  cp "$CLIENTS/ts_client.mjs" "$CLIENTS/ts_v2_client.mjs" "$NPM_LATEST/"
  run_suite ts-sdk-latest timeout 300 env "${unset_args[@]}" "$NODE_BIN/node" "$NPM_LATEST/ts_client.mjs" \
    --demo-json "$DEMO_JSON" --breeze-bin "$BREEZE"
  run_suite ts-v2-pinned timeout 300 env "${unset_args[@]}" "$NODE_BIN/node" "$CLIENTS/ts_v2_client.mjs" \
    --demo-json "$DEMO_JSON"
  run_suite ts-v2-latest timeout 300 env "${unset_args[@]}" "$NODE_BIN/node" "$NPM_LATEST/ts_v2_client.mjs" \
    --demo-json "$DEMO_JSON"
  run_suite py-modern-pinned timeout 300 env "${unset_args[@]}" "$PYMOD/bin/python" "$CLIENTS/py_modern.py" \
    --demo-json "$DEMO_JSON" --breeze-bin "$BREEZE"
  run_suite py-modern-latest timeout 300 env "${unset_args[@]}" "$PYLATEST/bin/python" "$CLIENTS/py_modern.py" \
    --demo-json "$DEMO_JSON" --breeze-bin "$BREEZE"
  EXEC_KEY=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["api_keys"]["execute"])' "$DEMO_JSON")
  MCP_URL=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["mcp_url"])' "$DEMO_JSON")
  # portability LABEL INSPECTOR_BIN: the Inspector CLI's schema portability check on the execute
  # key's whole listing finds nothing (--strict reports each finding on stderr).
  portability() {
    mkdir -p "$WORK/inspector-home"
    local rc=0
    HOME="$WORK/inspector-home" timeout 120 "$2" --cli "$MCP_URL" --transport http \
      --method tools/list --header "X-API-Key: $EXEC_KEY" --format json --strict \
      >"$WORK/portability-$1.json" 2>"$WORK/portability-$1.err" || rc=$?
    local summary
    summary=$(grep -E '[0-9]+ errors?, [0-9]+ warnings?' "$WORK/portability-$1.err" | tail -1)
    if [ "$rc" -eq 0 ] && ! grep -q '^Warning:' "$WORK/portability-$1.err"; then
      echo "PASS inspector-portability $1: ${summary:-no finding}"
    else
      echo "FAIL inspector-portability $1 (exit $rc): ${summary:-see below}"
      grep -A3 '^Warning:\|^Error:' "$WORK/portability-$1.err" | head -40
      return 1
    fi
  }
  run_suite inspector-portability-pinned portability pinned "$NODE_BIN/mcp-inspector"
  run_suite inspector-portability-latest portability latest "$NPM_LATEST/node_modules/.bin/mcp-inspector"
  for env_dir in "$PYMOD" "$PYLATEST"; do
    run_suite "metrics-$(basename "$env_dir")" "$env_dir/bin/python" "$CLIENTS/metrics_check.py" \
      --url "http://127.0.0.1:$PORT/metrics" --token "$METRICS_TOKEN"
  done
fi

# ---- 6. verdict -------------------------------------------------------------------------------
passed=$(grep -c '^PASS ' "$results" || true)
failed=$(grep -c '^FAIL ' "$results" || true)
log "summary"
grep -E '^(PASS|FAIL) ' "$results" || true
if [ "$failed_suites" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=$failed_suites; fi
echo "clients: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$failed_suites" -eq 0 ]
