#!/usr/bin/env bash
# MCP conformance: runs the official server suite (@modelcontextprotocol/conformance, active
# scenarios) against the engine's fixtures server, crates/mcp/examples/conformance.rs.
#
# The suite and the Node 22 it needs come from npm, pinned by .ci/conformance/package-lock.json,
# and are installed into a cache folder that later runs reuse while the lock file is unchanged:
# $BREEZE_CONFORMANCE_KIT, default ${XDG_CACHE_HOME:-$HOME/.cache}/breeze/conformance-kit.
# Only `npm` (any Node.js) is needed beforehand.
#
# The suite runs once per reply mode of the engine: `stream` (every answer an SSE stream, as the
# reference server does) and `adaptive` (JSON unless the handler sends something first, which is
# what Breeze serves), then once more through two of those servers sharing their sessions in
# Redis (CONFORMANCE_REDIS_URL, default redis://127.0.0.1:6379) behind a round-robin nginx
# (installed from Debian's packages when missing). Scenarios that cannot pass are listed, with
# the reason, in .ci/conformance-baseline.yml. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*"; }
die() { printf 'conformance: %s\n' "$*" >&2; exit 1; }

LOCK_DIR=.ci/conformance
BASELINE=.ci/conformance-baseline.yml
KIT="${BREEZE_CONFORMANCE_KIT:-${XDG_CACHE_HOME:-$HOME/.cache}/breeze/conformance-kit}"
MODES=(stream adaptive)

command -v cargo >/dev/null || die "cargo is required (install Rust with rustup)"
command -v npm >/dev/null || die "npm is required (any Node.js; the suite's Node 22 is installed from npm)"

sha256() {
  if command -v sha256sum >/dev/null; then sha256sum "$1"; else shasum -a 256 "$1"; fi | cut -d' ' -f1
}

log "conformance kit in $KIT"
stamp=$(sha256 "$LOCK_DIR/package-lock.json")
if [ "$(cat "$KIT/.lock-sha256" 2>/dev/null || true)" = "$stamp" ] \
  && [ -x "$KIT/node_modules/.bin/conformance" ] && [ -x "$KIT/node_modules/.bin/node" ]; then
  echo "reusing the installed kit"
else
  rm -rf "$KIT/node_modules" "$KIT/.lock-sha256"
  mkdir -p "$KIT"
  cp "$LOCK_DIR/package.json" "$LOCK_DIR/package-lock.json" "$KIT/"
  (cd "$KIT" && npm ci --no-audit --no-fund)
  echo "$stamp" >"$KIT/.lock-sha256"
fi
export PATH="$KIT/node_modules/.bin:$PATH"
node_version=$(node --version)
case "$node_version" in
  v22.*) echo "node $node_version, conformance $(node -p "require('$KIT/node_modules/@modelcontextprotocol/conformance/package.json').version")" ;;
  *) die "the kit's node is $node_version, expected v22" ;;
esac

# The example is one of `cargo test --workspace`'s artifacts: building it that way reuses the
# test build instead of compiling its dependencies again with the engine's features alone.
log "cargo test --workspace --no-run (builds the conformance example with the tests' features)"
cargo test --workspace --locked --no-run --quiet
BIN="${CARGO_TARGET_DIR:-target}/debug/examples/conformance"
[ -x "$BIN" ] || die "$BIN was not built"

WORK=$(mktemp -d)
SERVER_PIDS=()
stop_servers() {
  local pid
  for pid in "${SERVER_PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  SERVER_PIDS=()
}
trap 'stop_servers; rm -rf "$WORK"' EXIT

# start_fixtures NAME [--replies MODE]: starts the fixtures server (the caller's CONFORMANCE_*
# environment applies), waits for its URL; sets URL.
start_fixtures() {
  local name=$1; shift
  "$BIN" 0 "$@" >"$WORK/$name.url" 2>"$WORK/$name.server.log" &
  SERVER_PIDS+=($!)
  URL=
  for _ in $(seq 1 100); do
    URL=$(head -n1 "$WORK/$name.url" 2>/dev/null || true)
    [ -n "$URL" ] && break
    kill -0 "${SERVER_PIDS[-1]}" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$URL" ] || { cat "$WORK/$name.server.log" >&2; die "the fixtures server $name did not start"; }
  echo "fixtures server $name at $URL (pid ${SERVER_PIDS[-1]})"
}

passed=0
failed=0
status=0
summary=()

# run_suite NAME URL: the active suite against URL; adds its totals to the summary.
run_suite() {
  local name=$1 url=$2 rc=0 total pid
  # A request the server never answers costs the suite's 60 s timeout; a hung run is cut short.
  timeout 900 conformance server --url "$url" --suite active --expected-failures "$BASELINE" \
    2>&1 | tee "$WORK/$name.log" || rc=$?
  for pid in "${SERVER_PIDS[@]}"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      cat "$WORK"/*.server.log >&2
      echo "a fixtures server exited during the run" >&2
      rc=1
    fi
  done
  stop_servers
  total=$(grep -E '^Total: [0-9]+ passed, [0-9]+ failed' "$WORK/$name.log" | tail -n1 || true)
  if [[ $total =~ ^Total:\ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
    passed=$((passed + BASH_REMATCH[1]))
    failed=$((failed + BASH_REMATCH[2]))
  else
    total="no summary"
    failed=$((failed + 1))
  fi
  [ "$rc" -eq 0 ] || status=1
  summary+=("$name: $total (exit $rc)")
}

for mode in "${MODES[@]}"; do
  log "active server suite against the fixtures server, $mode replies"
  start_fixtures "$mode" --replies "$mode"
  run_suite "$mode replies" "$URL"
done

# The same suite through two fixtures servers sharing their sessions in Redis, behind nginx
# balancing every request round robin (what `breeze serve` does with REDIS_URL, see README:
# Deployment): a session made on one is used on the other, and a server-to-client request
# (sampling, elicitation) asked by one is answered through the other.
log "active server suite through two clustered fixtures servers behind nginx, adaptive replies"
# shellcheck source=.ci/nginx.sh
source .ci/nginx.sh
nginx_install
export CONFORMANCE_REDIS_URL="${CONFORMANCE_REDIS_URL:-redis://127.0.0.1:6379}"
export CONFORMANCE_REDIS_PREFIX="conformance$$-$RANDOM:"
upstreams=()
for name in cluster-a cluster-b; do
  start_fixtures "$name" --replies adaptive
  port=${URL#http://127.0.0.1:}
  upstreams+=("${port%%/*}")
done
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
nginx_round_robin "$WORK/nginx" "$port" "${upstreams[@]}"
SERVER_PIDS+=("$NGINX_PID")
for _ in $(seq 1 100); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/mcp")" != 000 ] && break
  sleep 0.1
done
run_suite "cluster (2 servers, adaptive replies)" "http://127.0.0.1:$port/mcp"
for upstream in "${upstreams[@]}"; do
  grep -q "127.0.0.1:$upstream POST" "$WORK/nginx/upstream.log" \
    || { echo "nginx sent no request to :$upstream" >&2; status=1; }
done

log "conformance summary"
printf '%s\n' "${summary[@]}"
[ "$status" -eq 0 ] || echo "conformance failed: a FAILURE or WARNING check, or a stale baseline entry (see above)"
echo "Total: $passed passed, $failed failed"
exit "$status"
