# Shared by the CI scripts that drive a running `breeze demo` (.ci/clients.sh, .ci/browser.sh).
# Source it after `set -euo pipefail` and after setting:
#   CI_NAME      the script's name, for messages (e.g. clients.sh)
#   CI_KEEP_VAR  the variable that, set to 1, keeps the temp dir (e.g. CLIENTS_KEEP_TMP)
# Sourcing creates $WORK (a temp dir) and installs the EXIT trap that stops the server, shows
# the end of its log on failure and removes $WORK. It defines:
#   log MSG / die MSG            a section header / fail with a message
#   ci_require TOOL…             fail unless every tool is on PATH
#   ci_build_breeze              builds `breeze` as `cargo test --workspace` does; sets TARGET_DIR
#                                and BREEZE (a private copy, so a concurrent rebuild cannot swap it
#                                under the test)
#   ci_npm_ci DIR [CHECK…]       `npm ci` in DIR unless node_modules matches package-lock.json
#                                (a stamp) and the optional CHECK command succeeds
#   unset_args                   `env` arguments removing BREEZE_*, MCP_*, DATABASE_URL, REDIS_URL
#   free_port                    prints a free loopback port
#   ci_start_demo PORT [VAR=value…]
#                                starts `breeze demo` in $WORK/demo on PORT with the settings
#                                given (and none from the caller's environment); waits for
#                                /healthz and for every file of CI_DEMO_READY (paths under
#                                $WORK/demo; default breeze-data/demo.json); sets SERVER_PID
#   ci_demo_up LABEL START_FN [VAR=value…]
#                                up to 3 attempts of `START_FN PORT VAR=value…` on a fresh port;
#                                sets PORT and DEMO_JSON, dies when none starts
#   stop_server                  stops the server started last
# shellcheck shell=bash

# shellcheck source=.ci/nginx.sh
source "$(dirname "${BASH_SOURCE[0]}")/nginx.sh"

log() { printf '\n== %s\n' "$*"; }
die() { printf '%s: %s\n' "$CI_NAME" "$*" >&2; exit 1; }

ci_require() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || die "$tool is required"
  done
}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/breeze-${CI_NAME%.sh}.XXXXXX")
SERVER_PID=""

stop_server() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}

ci_cleanup() {
  local rc=$?
  stop_cluster
  stop_server
  if [ "$rc" -ne 0 ] && [ -f "$WORK/demo/server.log" ]; then
    printf '\n== server log (last 40 lines)\n'
    tail -n 40 "$WORK/demo/server.log" || true
  fi
  if [ "${!CI_KEEP_VAR:-}" = 1 ]; then
    echo "kept $WORK"
  else
    rm -rf "$WORK"
  fi
  exit "$rc"
}
trap ci_cleanup EXIT
trap 'exit 130' INT TERM

# `cargo build -p breeze-cli` would resolve features for the CLI alone and compile every
# dependency a second time beside the test build (gigabytes on a CI disk); building the tests'
# artifacts reuses what `cargo test --workspace` made, and `breeze` is one of them.
ci_build_breeze() {
  log "cargo test --workspace --no-run (builds breeze with the tests' features)"
  cargo test --workspace --locked --no-run --quiet
  TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
  mkdir -p "$WORK/bin"
  cp "$TARGET_DIR/debug/breeze" "$WORK/bin/breeze"
  BREEZE="$WORK/bin/breeze"
}

ci_npm_ci() {
  local dir=$1; shift
  log "npm deps in ${dir#"$ROOT/"}"
  local lock_sum stamp
  lock_sum=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
  stamp="$dir/node_modules/.breeze-lock-sha256"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$lock_sum" ] \
    && { [ "$#" -eq 0 ] || "$@" >/dev/null 2>&1; }; then
    echo "node_modules matches package-lock.json; reusing it"
  else
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$lock_sum" >"$stamp"
  fi
}

# breeze refuses unknown BREEZE_*/MCP_* variables; DATABASE_URL/REDIS_URL would move it off the
# embedded SQLite database. The demo (and what talks to it) runs without any of them.
unset_args=()
while IFS= read -r name; do
  unset_args+=(-u "$name")
done < <(env | sed -n 's/^\(BREEZE_[A-Za-z0-9_]*\|MCP_[A-Za-z0-9_]*\|DATABASE_URL\|REDIS_URL\)=.*/\1/p')

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

ci_start_demo() {
  local port=$1; shift
  rm -rf "$WORK/demo" && mkdir -p "$WORK/demo"
  (cd "$WORK/demo" && exec env "${unset_args[@]}" "$@" "$BREEZE" demo --listen "127.0.0.1:$port" >server.log 2>&1) &
  SERVER_PID=$!
  local ready=("${CI_DEMO_READY[@]:-breeze-data/demo.json}") f all
  for _ in $(seq 1 300); do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      wait "$SERVER_PID" 2>/dev/null || true
      SERVER_PID=""
      return 1
    fi
    if [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/healthz")" = 200 ]; then
      all=1
      for f in "${ready[@]}"; do [ -s "$WORK/demo/$f" ] || all=""; done
      [ -n "$all" ] && return 0
    fi
    sleep 0.2
  done
  echo "breeze demo did not become healthy within 60s" >&2
  return 1
}

ci_demo_up() {
  local label=$1 start=$2; shift 2
  log "$label"
  local started="" attempt
  for attempt in 1 2 3; do
    PORT=$(free_port)
    if "$start" "$PORT" "$@"; then started=1; break; fi
    echo "attempt $attempt: $label on port $PORT did not start:" >&2
    tail -n 20 "$WORK/demo/server.log" >&2 || true
  done
  [ -n "$started" ] || die "$label would not start"
  DEMO_JSON="$WORK/demo/breeze-data/demo.json"
  echo "$label (pid $SERVER_PID) at http://127.0.0.1:$PORT"
}

# ---- a cluster behind nginx ---------------------------------------------------------------------
CLUSTER_PIDS=()

stop_cluster() {
  local pid
  for pid in "${CLUSTER_PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${CLUSTER_PIDS[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  CLUSTER_PIDS=()
  stop_server
}

# wait_healthy PORT PID: /healthz answers 200 within 60 s while PID lives.
wait_healthy() {
  for _ in $(seq 1 300); do
    kill -0 "$2" 2>/dev/null || return 1
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/healthz")" = 200 ] && return 0
    sleep 0.2
  done
  return 1
}

ci_cluster_up() {
  local label=$1; shift
  log "$label"
  nginx_install
  local db="breeze_ci_cluster"
  # The instances connect as a role that owns the database but cannot bypass row-level
  # security, as a deployment that follows the README does.
  psql -q -h 127.0.0.1 -U postgres -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" \
    -c "DO \$\$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'breeze_ci') THEN
          CREATE ROLE breeze_ci LOGIN NOSUPERUSER NOBYPASSRLS; END IF; END \$\$" \
    -c "CREATE DATABASE $db OWNER breeze_ci" >/dev/null
  PORT=$(free_port)
  local port_a port_b
  port_a=$(free_port)
  port_b=$(free_port)
  UPSTREAM_LOG="$WORK/nginx/upstream.log"
  nginx_round_robin "$WORK/nginx" "$PORT" "$port_a" "$port_b"
  CLUSTER_PIDS+=("$NGINX_PID")
  # One signing key and cookie secret for both, as a deployment shares them (only read with
  # MCP_OAUTH_ENABLED).
  local jwk secret
  jwk=$(python3 -c 'import base64,os,json; print(json.dumps({"kty":"OKP","crv":"Ed25519","kid":"ci","d":base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")}))')
  secret=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
  local shared=(DATABASE_URL="postgres://breeze_ci@127.0.0.1:5432/$db" REDIS_URL=redis://127.0.0.1:6379
    BREEZE_REDIS_PREFIX="ci$$-$RANDOM:"
    BREEZE_PUBLIC_URL="http://127.0.0.1:$PORT" OAUTH_JWKS_PRIVATE_JWK="$jwk" OAUTH_COOKIE_SECRET="$secret" "$@")
  ci_start_demo "$port_a" "${shared[@]}" || die "$label: breeze demo would not start"
  mkdir -p "$WORK/second"
  (cd "$WORK/second" && exec env "${unset_args[@]}" "${shared[@]}" "$BREEZE" serve --listen "127.0.0.1:$port_b" >server.log 2>&1) &
  CLUSTER_PIDS+=($!)
  wait_healthy "$port_b" "${CLUSTER_PIDS[-1]}" || { tail -n 20 "$WORK/second/server.log" >&2; die "$label: breeze serve would not start"; }
  wait_healthy "$PORT" "${CLUSTER_PIDS[0]}" || die "$label: nginx would not proxy"
  DEMO_JSON="$WORK/demo/breeze-data/demo.json"
  echo "$label: nginx at http://127.0.0.1:$PORT over breeze demo (:$port_a, pid $SERVER_PID) and breeze serve (:$port_b)"
}
