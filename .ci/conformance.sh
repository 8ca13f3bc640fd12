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
# what Breeze serves). Scenarios that cannot pass are listed, with the reason, in
# .ci/conformance-baseline.yml. Exits non-zero on any failure.
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

log "cargo build --example conformance -p breeze-mcp"
cargo build --locked --example conformance -p breeze-mcp
BIN="${CARGO_TARGET_DIR:-target}/debug/examples/conformance"
[ -x "$BIN" ] || die "$BIN was not built"

WORK=$(mktemp -d)
SERVER_PID=
stop_server() {
  if [ -n "$SERVER_PID" ]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
  fi
}
trap 'stop_server; rm -rf "$WORK"' EXIT

passed=0
failed=0
status=0
summary=()
for mode in "${MODES[@]}"; do
  log "active server suite against the fixtures server, $mode replies"
  "$BIN" 0 --replies "$mode" >"$WORK/$mode.url" 2>"$WORK/$mode.server.log" &
  SERVER_PID=$!
  url=
  for _ in $(seq 1 100); do
    url=$(head -n1 "$WORK/$mode.url" 2>/dev/null || true)
    [ -n "$url" ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$url" ] || { cat "$WORK/$mode.server.log" >&2; die "the fixtures server did not start"; }
  echo "fixtures server at $url (pid $SERVER_PID)"

  # A request the server never answers costs the suite's 60 s timeout; a hung run is cut short.
  rc=0
  timeout 900 conformance server --url "$url" --suite active --expected-failures "$BASELINE" \
    2>&1 | tee "$WORK/$mode.log" || rc=$?
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    cat "$WORK/$mode.server.log" >&2
    echo "the fixtures server exited during the run" >&2
    rc=1
  fi
  stop_server

  total=$(grep -E '^Total: [0-9]+ passed, [0-9]+ failed' "$WORK/$mode.log" | tail -n1 || true)
  if [[ $total =~ ^Total:\ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
    passed=$((passed + BASH_REMATCH[1]))
    failed=$((failed + BASH_REMATCH[2]))
  else
    total="no summary"
    failed=$((failed + 1))
  fi
  [ "$rc" -eq 0 ] || status=1
  summary+=("$mode replies: $total (exit $rc)")
done

log "conformance summary"
printf '%s\n' "${summary[@]}"
[ "$status" -eq 0 ] || echo "conformance failed: a FAILURE or WARNING check, or a stale baseline entry (see above)"
echo "Total: $passed passed, $failed failed"
exit "$status"
