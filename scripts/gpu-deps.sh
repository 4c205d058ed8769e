#!/usr/bin/env bash
# Packs what building dspark-train needs beside libtorch, from Debian 12's packages, for a GPU
# machine that has a CUDA PyTorch but none of the project's libraries (and no package registry):
# the headers, pkg-config files and shared libraries of the packages scripts/install-deps.sh
# installs for the engine libraries the trainer links, and pkgconf. Run it on Debian 12; it writes
# OUT_DIR/overlay.tar.xz, which scripts/gpu-train-drafters.sh unpacks there.
#
#   scripts/gpu-deps.sh OUT_DIR
set -euo pipefail
out=${1:?usage: scripts/gpu-deps.sh OUT_DIR}
pkgs=(nlohmann-json3-dev libpcre2-dev libpcre2-8-0 libutf8proc-dev libutf8proc2 libcpp-httplib-dev libcpp-httplib0.11
  libhiredis-dev libhiredis0.14 zlib1g-dev zlib1g libssl-dev libbrotli-dev libbrotli1 libdnnl-dev libdnnl2
  libbenchmark-dev libbenchmark1debian pkgconf pkgconf-bin libpkgconf3)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/debs" "$work/root" "$out"
(cd "$work/debs" && apt-get download "${pkgs[@]}" 2>&1 | grep -v unsandboxed || true)
for d in "$work"/debs/*.deb; do dpkg -x "$d" "$work/root"; done
root=$work/root
# Debian 12 merges /lib into /usr/lib: keep one tree.
if [ -d "$root/lib" ]; then
  cp -a "$root/lib/." "$root/usr/lib/"
  rm -rf "$root/lib"
fi
# Static archives, documentation and manual pages are not needed to build or run.
find "$root" \( -name '*.a' -o -path '*/share/doc*' -o -path '*/share/man*' -o -path '*/share/lintian*' \) \
  -prune -exec rm -rf {} +
# Absolute links (zlib's libz.so -> /lib/...) would leave the tree once it is unpacked elsewhere.
while IFS= read -r link; do
  target=$(readlink "$link")
  case $target in
    /*) rel=$(realpath -m --relative-to="$(dirname "$link")" "$root/usr${target#/usr}")
        ln -sfn "$rel" "$link" ;;
  esac
done < <(find "$root" -type l)
tar -C "$root" -cJf "$out/overlay.tar.xz" usr
ls -l "$out/overlay.tar.xz"
