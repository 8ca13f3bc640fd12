#!/usr/bin/env bash
# The dashboard in a real browser.
#
# Installs Debian's chromium when /usr/bin/chromium is missing, builds `breeze`, starts
# `breeze demo` on a free loopback port in a temp dir (its agent enrolls this machine), then runs
# tests/browser/dashboard.test.mjs (node's test runner, playwright-core driving headless
# Chromium): sign in through `next`, create an API key (shown once, copied, revoked, then refused
# by MCP), approve a waiting Tier 3 MCP call and see it complete, deny one and see the error, the
# device list updating live as devices are added, the demo machine's chart gaining a point,
# another organization's device URL answering 404, an OAuth client's grant under Connected apps
# (consent, token, revoke, then refused by MCP). Then every other *.test.mjs there, one file at
# a time: console.test.mjs (an alert arriving live in the inbox and acknowledged from its row,
# every console page at both widths), console2.test.mjs (a library script run from the device
# page and its output), console3.test.mjs (every page at 1280 and 390 px, light and dark, with
# axe-core's serious and critical checks; an enrollment key's install command copied),
# assistant.test.mjs (the AI chat on a phone against a
# stand-in model provider), apps.test.mjs (MCP Apps views in a minimal host built on the ext-apps
# package's AppBridge; APPS_IMAGES=docs/images refreshes the committed screenshots).
# Screenshots of every page at 1280 px and 390 px go to target/screenshots/ (CI artifacts).
# Setup and cleanup shared with clients.sh live in .ci/lib.sh.
# Pins: tests/browser/package.json + package-lock.json.
#
# Environment: BROWSER_KEEP_TMP=1 keeps the temp dir (server log, demo.json) for debugging.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SUITE="$ROOT/tests/browser"
cd "$ROOT"

CI_NAME=browser.sh
CI_KEEP_VAR=BROWSER_KEEP_TMP
# shellcheck source=.ci/lib.sh
. "$ROOT/.ci/lib.sh"
ci_require cargo npm node python3 curl

# ---- 1. Chromium ------------------------------------------------------------------------------
if [ ! -x /usr/bin/chromium ]; then
  log "apt-get install chromium"
  command -v apt-get >/dev/null || die "/usr/bin/chromium is missing and apt-get is not available"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
/usr/bin/chromium --version

# ---- 2. the breeze binary, npm deps -----------------------------------------------------------
ci_build_breeze
ci_npm_ci "$SUITE"

# ---- 3. breeze demo on a free port (its agent enrolled) ---------------------------------------
# A Tier 3 call waits up to 120 s for the browser to approve it; OAuth with anonymous
# registration is on, so a client can connect and show up under Connected apps.
# The AI assistant talks to a stand-in of Anthropic's streaming API (tests/browser/
# stand-in-anthropic.mjs), started first so the demo can be pointed at it.
AI_PORT=$(free_port)
node "$SUITE/stand-in-anthropic.mjs" "$AI_PORT" >"$WORK/stand-in.log" 2>&1 &
AI_PID=$!
# Stopped on exit before lib.sh's cleanup, which keeps the exit status.
stop_stand_in() { local rc=$?; kill "$AI_PID" 2>/dev/null || true; (exit "$rc"); ci_cleanup; }
trap stop_stand_in EXIT
for _ in $(seq 1 50); do grep -q listening "$WORK/stand-in.log" 2>/dev/null && break; sleep 0.1; done
CI_DEMO_READY=(breeze-data/demo.json breeze-data/agent/agent.json)
start_server() {
  ci_start_demo "$1" MCP_APPROVAL_WAIT_SECONDS=120 MCP_OAUTH_ENABLED=true OAUTH_DCR_ENABLED=true \
    OAUTH_DCR_ALLOW_ANONYMOUS=true BREEZE_AI_PROVIDER=anthropic BREEZE_AI_API_KEY=sk-stand-in \
    BREEZE_AI_BASE_URL="http://127.0.0.1:$AI_PORT" "${@:2}"
}
ci_demo_up "breeze demo" start_server

# ---- 4. the browser tests ---------------------------------------------------------------------
log "dashboard in headless Chromium"
SHOTS="$TARGET_DIR/screenshots"
rm -rf "$SHOTS"
(cd "$SUITE" && timeout 600 env "${unset_args[@]}" BREEZE_URL="http://127.0.0.1:$PORT" \
  DEMO_JSON="$DEMO_JSON" AGENT_JSON="$WORK/demo/breeze-data/agent/agent.json" \
  BREEZE_BIN="$BREEZE" DEMO_DIR="$WORK/demo" SCREENSHOTS="$SHOTS" node --test --test-concurrency=1 --test-reporter=spec ./*.test.mjs)
echo "screenshots: $SHOTS"
