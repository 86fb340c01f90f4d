#!/usr/bin/env bash
# devpack.sh — build the flashgpu test binaries that devrun.sh runs on the
# GPU machine and pack them for the device tool's carry. Run from anywhere on
# the development machine (cgo against .ci/cuda-sdk.sh's headers, no GPU
# needed). Writes .gpu/{cudakernels,op,bench}.test, .gpu/flashtune (for
# devbench.sh) and .gpu/bins.tar.xz;
# keep .gpu/ in .git/info/exclude and carry .gpu/bins.tar.xz.
#
# Why xz -9 with a 192 MiB dictionary: each binary embeds the 30 MB of PTX
# under ptx/, and a dictionary larger than the binaries together stores it
# once for the four (about 8 MB in all, against 16 MB at the default level), which keeps the carried tree (tracked files,
# about 55 MB, plus the carry) under the device tool's 64 MiB.
#
# CUBIN=1 embeds Hopper machine code instead of the PTX: the tracked files
# are copied to a temporary tree whose ptx/*.ptx are replaced by ptxas's
# output for sm_90a (flash_sm90a) and sm_90 (the sm80 modules), and the
# binaries are built there. A fresh GPU machine otherwise spends 100–145 s
# compiling the PTX before the first kernel runs (NOTES.md, "The next
# device run"). The binaries then run on Hopper GPUs only, and devrun.sh
# must be told to use what they embed (FLASHATTN_KERNEL_DIR= , empty).
# PTXAS names ptxas (default: ptxas on PATH, else /opt/cuda-12.4/usr/bin/ptxas).
# Written 2026-12-04, not yet run on the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(.ci/cuda-sdk.sh)"
root=$PWD
mkdir -p .gpu
src=$root
if [[ "${CUBIN:-0}" == 1 ]]; then
	ptxas=${PTXAS:-$(command -v ptxas || echo /opt/cuda-12.4/usr/bin/ptxas)}
	src=$(mktemp -d)
	trap 'rm -rf "$src"' EXIT
	git ls-files -z | xargs -0 cp --parents -t "$src"
	for m in flash_sm90a:sm_90a flash_sm80:sm_90 decode_sm80:sm_90 probe_sm90a:sm_90a; do
		"$ptxas" -O3 -arch="${m#*:}" "cudakernels/ptx/${m%%:*}.ptx" -o "$src/cudakernels/ptx/${m%%:*}.ptx" &
	done
	wait
fi
pkgs=(cudakernels op bench)
for p in "${pkgs[@]}"; do
	(cd "$src" && go test -c -tags flashgpu -ldflags='-s -w' -o "$root/.gpu/$p.test" "./$p")
done
(cd "$src" && go build -tags flashgpu -ldflags='-s -w' -o "$root/.gpu/flashtune" ./cudakernels/cmd/flashtune)
tar -C .gpu -cf - "${pkgs[@]/%/.test}" flashtune | xz -9 --lzma2=preset=9,dict=192MiB -T1 >.gpu/bins.tar.xz.tmp
mv .gpu/bins.tar.xz.tmp .gpu/bins.tar.xz
tracked=$(git ls-files -z | du -cb --files0-from=- | tail -n 1 | cut -f 1)
packed=$(stat -c %s .gpu/bins.tar.xz)
echo "devpack: .gpu/bins.tar.xz $((packed >> 20)) MiB; with the tracked files $(((tracked + packed) >> 20)) MiB of the device tool's 64"
if ((tracked + packed > 64 << 20)); then
	echo "devpack: over the 64 MiB a device call carries" >&2
	exit 1
fi
