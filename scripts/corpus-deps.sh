#!/usr/bin/env bash
# Installs the Debian 12 packages whose text `dspark corpus build` reads.
#   scripts/corpus-deps.sh                 install every corpus package that is missing
#   scripts/corpus-deps.sh PKG...          install just these (when missing)
#   scripts/corpus-deps.sh --check [PKG...] print the missing ones, exit 1 if any; install nothing
# A no-op when all are present; works as root or through sudo.
set -euo pipefail

check_only=0
if [ "${1:-}" = "--check" ]; then
  check_only=1
  shift
fi

packages=("$@")
if [ ${#packages[@]} -eq 0 ]; then
  packages=(
    # code
    libpython3.11-stdlib
    # prose / knowledge
    dict-gcide bible-kjv-text
    coreutils diffutils findutils grep sed gzip bc ed time wget gettext gnupg readline-common bzip2-doc
    # translation
    dict-freedict-deu-eng dict-freedict-fra-eng dict-freedict-spa-eng dict-freedict-ita-eng
    dict-freedict-nld-eng dict-freedict-por-eng
    dict-freedict-eng-deu dict-freedict-eng-fra dict-freedict-eng-spa dict-freedict-eng-ita
    dict-freedict-eng-nld dict-freedict-eng-por
  )
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ $check_only -eq 1 ]; then
  echo "corpus-deps: missing ${missing[*]}"
  exit 1
fi

echo "corpus-deps: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
