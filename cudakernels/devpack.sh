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
# Run on the GPU machine from 2026-12-05 on (the cubins load).
#
# OLD=<rev> also builds bench at that revision (with cubins when CUBIN=1)
# into .gpu/bench-old.test, packed with the rest, for devab.sh's
# alternated timings of a kernel change against its base in one call. The
# two binaries share most of their bytes, so the archive grows by little
# (0.3 MB for a change to the Hopper kernels, 2026-12-05).
#
# PATCH=<file> builds the new binaries from the tracked files with that
# patch applied (git apply) and the kernels regenerated (gen.sh, which
# needs nvcc: cudakernels/nvcc-debian.sh), in a temporary tree, so that
# a patch is timed without touching the working tree, whose regenerated
# PTX would be carried too and can push a call past the 64 MiB
# (2026-12-06). PKGS chooses the test binaries (default "cudakernels op
# bench"), and FLASHTUNE=0 leaves flashtune out: three binaries of about
# 35, 35 and 23 MB pack into 6.7 MB (2026-12-06: cudakernels, bench and
# bench-old).
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(.ci/cuda-sdk.sh)"
root=$PWD
mkdir -p .gpu
tmps=()
trap 'rm -rf "${tmps[@]}"' EXIT
# cubins DIR replaces the PTX of the tree at DIR by Hopper machine code
# (CUBIN=1), read from the same files.
cubins() {
	[[ "${CUBIN:-0}" == 1 ]] || return 0
	local ptxas=${PTXAS:-$(command -v ptxas || echo /opt/cuda-12.4/usr/bin/ptxas)} m
	for m in flash_sm90a:sm_90a flash_sm80:sm_90 decode_sm80:sm_90 probe_sm90a:sm_90a; do
		[[ -f "$1/cudakernels/ptx/${m%%:*}.ptx" ]] || continue
		"$ptxas" -O3 -arch="${m#*:}" "$1/cudakernels/ptx/${m%%:*}.ptx" -o "$1/cudakernels/ptx/${m%%:*}.cubin" &
	done
	wait
	for m in "$1"/cudakernels/ptx/*.cubin; do mv "$m" "${m%.cubin}.ptx"; done
}
src=$root
if [[ "${CUBIN:-0}" == 1 || -n "${PATCH:-}" ]]; then
	src=$(mktemp -d)
	tmps+=("$src")
	git ls-files -z | xargs -0 cp --parents -t "$src"
	if [[ -n "${PATCH:-}" ]]; then
		patch_file=$(realpath "$PATCH")
		(cd "$src" && git apply "$patch_file" && bash cudakernels/gen.sh >/dev/null)
	fi
	cubins "$src"
fi
read -r -a pkgs <<<"${PKGS:-cudakernels op bench}"
for p in "${pkgs[@]}"; do
	(cd "$src" && go test -c -tags flashgpu -ldflags='-s -w' -o "$root/.gpu/$p.test" "./$p")
done
packed_bins=("${pkgs[@]/%/.test}")
if [[ "${FLASHTUNE:-1}" == 1 ]]; then
	(cd "$src" && go build -tags flashgpu -ldflags='-s -w' -o "$root/.gpu/flashtune" ./cudakernels/cmd/flashtune)
	packed_bins+=(flashtune)
fi
rm -f .gpu/bench-old.test
if [[ -n "${OLD:-}" ]]; then
	old=$(mktemp -d)
	tmps+=("$old")
	git archive "$OLD" | tar -x -C "$old"
	cubins "$old"
	(cd "$old" && go test -c -tags flashgpu -ldflags='-s -w' -o "$root/.gpu/bench-old.test" ./bench)
	packed_bins+=(bench-old.test)
fi
tar -C .gpu -cf - "${packed_bins[@]}" | xz -9 --lzma2=preset=9,dict=192MiB -T1 >.gpu/bins.tar.xz.tmp
mv .gpu/bins.tar.xz.tmp .gpu/bins.tar.xz
tracked=$(git ls-files -z | du -cb --files0-from=- | tail -n 1 | cut -f 1)
packed=$(stat -c %s .gpu/bins.tar.xz)
echo "devpack: .gpu/bins.tar.xz $((packed >> 20)) MiB; with the tracked files $(((tracked + packed) >> 20)) MiB of the device tool's 64"
if ((tracked + packed > 64 << 20)); then
	echo "devpack: over the 64 MiB a device call carries" >&2
	exit 1
fi
