#!/usr/bin/env bash
# Installs the official OpenAI JavaScript client into PREFIX/node_modules for the server tests
# (skipped when that version is already there).
#   npm_install.sh PREFIX
set -euo pipefail
prefix=$1
version=4.104.0   # the last 4.x; runs on Node.js 18 and later (Debian 12 ships 18)
f="$prefix/node_modules/openai/package.json"
if [ -f "$f" ] && grep -q "\"version\": \"$version\"" "$f"; then
  echo "npm package openai@$version already in $prefix"
  exit 0
fi
command -v npm >/dev/null || { echo "npm not found (scripts/install-deps.sh installs Node.js and npm)"; exit 1; }
mkdir -p "$prefix"
npm install --no-audit --no-fund --prefix "$prefix" "openai@$version"
grep -q "\"version\": \"$version\"" "$f" || { echo "openai@$version did not install into $prefix"; exit 1; }
node -e "require(process.argv[1])" "$prefix/node_modules/openai" || { echo "openai@$version does not load"; exit 1; }
echo "installed openai@$version into $prefix"
