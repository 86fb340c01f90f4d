#!/usr/bin/env bash
# nvcc-debian.sh [DIR] — install nvcc 12.4, the compiler the committed PTX
# comes from, on a Debian machine without a GPU (as root), so that gen.sh
# runs there. Debian 13 (trixie) packages it (non-free: nvidia-cuda-toolkit,
# its headers in nvidia-cuda-dev and libcu++-dev, libnvvm4); the packages are
# unpacked under DIR (default /opt/cuda-12.4) rather than installed, so a
# Debian 12 machine keeps its own libraries, and an nvcc wrapper goes into
# /usr/local/bin. Only --ptx output is needed: no CUDA runtime, no driver.
set -euo pipefail
DIR="${1:-/opt/cuda-12.4}"
TK="$DIR/usr/lib/nvidia-cuda-toolkit"
if [[ ! -x "$TK/bin/nvcc" ]]; then
	src=/etc/apt/sources.list.d/nvcc-debian-trixie.sources
	printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie\nComponents: main non-free\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' >"$src"
	# Never install from trixie by accident: only the downloads below use it.
	printf 'Package: *\nPin: release n=trixie\nPin-Priority: 50\n' >/etc/apt/preferences.d/nvcc-debian-trixie
	apt-get update -qq
	tmp="$(mktemp -d)"
	chmod 755 "$tmp"
	(cd "$tmp" && apt-get download -qq -t trixie nvidia-cuda-toolkit nvidia-cuda-dev libnvvm4 libcu++-dev)
	mkdir -p "$DIR"
	for deb in "$tmp"/nvidia-cuda-toolkit_*.deb "$tmp"/libnvvm4_*.deb "$tmp"/libcu++-dev_*.deb; do
		dpkg-deb -x "$deb" "$DIR"
	done
	# Of nvidia-cuda-dev (a gigabyte of libraries) only the headers.
	dpkg-deb --fsys-tarfile "$tmp"/nvidia-cuda-dev_*.deb | tar -x -C "$DIR" ./usr/include
	rm -rf "$tmp"
	# The packaged profile points at /usr; this one at DIR.
	rm -f "$TK/bin/nvcc.profile"
	cat >"$TK/bin/nvcc.profile" <<PROFILE
NVVMIR_LIBRARY_DIR = $TK/libdevice
PATH		+= $TK/bin:$DIR/usr/bin:
INCLUDES	+= -I$DIR/usr/include \$(_SPACE_)
LIBRARIES	=+ \$(_SPACE_) -L$DIR/usr/lib/x86_64-linux-gnu
PROFILE
fi
cat >/usr/local/bin/nvcc <<WRAPPER
#!/bin/sh
export LD_LIBRARY_PATH=$DIR/usr/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
exec $TK/bin/nvcc "\$@"
WRAPPER
chmod +x /usr/local/bin/nvcc
nvcc --version | tail -n 2
