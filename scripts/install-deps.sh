#!/usr/bin/env bash
# Installs every Debian 12 package that dspark's build and tests need.
# A no-op when all are present; works as root or through sudo.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build clang libclang-rt-14-dev pkg-config git
  # engine libraries
  libdnnl-dev nlohmann-json3-dev libcpp-httplib-dev libboost-dev libpcre2-dev libutf8proc-dev zlib1g-dev
  libhiredis-dev
  # training (its own binary): libtorch, with OpenBLAS behind it (Debian's default BLAS is
  # the slow reference one; the OpenMP build shares libgomp with libtorch)
  libtorch-dev libopenblas0-openmp libgloo-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev python3 python3-numpy python3-torch redis-server
  gnuplot-nox curl
  # scripts/long-functions.sh (the function-length check)
  universal-ctags
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# Node.js and npm run the tokenizer conformance test; keep any node already on PATH.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The Debian packages whose text `dspark corpus build` reads (the drafters' training prompts and
# the test that checks them against the evaluation sets).
bash "$(dirname "$0")/corpus-deps.sh"
