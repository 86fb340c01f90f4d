#!/usr/bin/env bash
# cuda-sdk.sh [DIR] — make the CUDA driver API header (cuda.h) and a link stub
# (libcuda.so) available on a machine without a GPU or CUDA toolkit, so that
# cgo code using gorgonia.org/cu compiles and links. Nothing here runs CUDA.
#
# Source: Debian's nvidia-cuda-dev package (CUDA 11.8, non-free component).
# The driver API in cuda.h is backward compatible: binaries linked here run
# on newer drivers (checked on an H200 with driver 580 / CUDA 13).
#
# Prints shell exports on stdout; from the repository root:
#   eval "$(.ci/cuda-sdk.sh)"
# Cached: a second call costs nothing.
set -euo pipefail
DIR="${1:-${CUDA_SDK_DIR:-$HOME/.cache/cuda-sdk}}"
INC="$DIR/include"; LIB="$DIR/lib"
if [[ ! -f "$INC/cuda.h" || ! -f "$LIB/libcuda.so" ]]; then
  mkdir -p "$INC" "$LIB"
  SRC=/etc/apt/sources.list.d/debian-nonfree.sources
  if ! grep -rqs "non-free" /etc/apt/sources.list /etc/apt/sources.list.d/ ; then
    . /etc/os-release
    printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: %s %s-updates\nComponents: non-free\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      "$VERSION_CODENAME" "$VERSION_CODENAME" > "$SRC"
  fi
  apt-get update -qq >&2
  TMP="$(mktemp -d)"; chmod 755 "$TMP"
  ( cd "$TMP" && apt-get download -qq nvidia-cuda-dev >&2 )
  dpkg-deb --fsys-tarfile "$TMP"/nvidia-cuda-dev_*.deb \
    | tar -x -C "$TMP" ./usr/include/cuda.h ./usr/lib/x86_64-linux-gnu/stubs/libcuda.so
  cp "$TMP/usr/include/cuda.h" "$INC/"
  cp "$TMP/usr/lib/x86_64-linux-gnu/stubs/libcuda.so" "$LIB/"
  rm -rf "$TMP"
fi
echo "export CGO_ENABLED=1"
echo "export CGO_CFLAGS=\"-I$INC\""
echo "export CGO_LDFLAGS=\"-L$LIB\""
