#!/usr/bin/env bash
# devpack.sh — build the flashgpu test binaries that devrun.sh runs on the
# GPU machine and pack them for the device tool's carry. Run from anywhere on
# the development machine (cgo against .ci/cuda-sdk.sh's headers, no GPU
# needed). Writes .gpu/{cudakernels,op,bench}.test and .gpu/bins.tar.xz;
# keep .gpu/ in .git/info/exclude and carry .gpu/bins.tar.xz.
#
# Why xz -9: each binary embeds the 30 MB of PTX under ptx/, and xz's 64 MB
# dictionary at -9 stores it once for the three (about 8 MB in all, against
# 16 MB at the default level), which keeps the carried tree (tracked files,
# about 55 MB, plus the carry) under the device tool's 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(.ci/cuda-sdk.sh)"
mkdir -p .gpu
pkgs=(cudakernels op bench)
for p in "${pkgs[@]}"; do
	go test -c -tags flashgpu -ldflags='-s -w' -o ".gpu/$p.test" "./$p"
done
tar -C .gpu -cf - "${pkgs[@]/%/.test}" | xz -9 -T1 >.gpu/bins.tar.xz.tmp
mv .gpu/bins.tar.xz.tmp .gpu/bins.tar.xz
tracked=$(git ls-files -z | du -cb --files0-from=- | tail -n 1 | cut -f 1)
packed=$(stat -c %s .gpu/bins.tar.xz)
echo "devpack: .gpu/bins.tar.xz $((packed >> 20)) MiB; with the tracked files $(((tracked + packed) >> 20)) MiB of the device tool's 64"
if ((tracked + packed > 64 << 20)); then
	echo "devpack: over the 64 MiB a device call carries" >&2
	exit 1
fi
