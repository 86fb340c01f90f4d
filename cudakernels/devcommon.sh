# devcommon.sh, sourced by devrun.sh and devbench.sh with root set to the
# repository root: the GPU machine's driver path, a JIT cache large enough
# for every module, a folder for the logs (logs) and the binaries
# devpack.sh built (bins: .gpu/, or .gpu/bins.tar.xz unpacked).
export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
export CUDA_CACHE_MAXSIZE=4294967296
logs="$(mktemp -d)"
bins="$root/.gpu"
if [[ -f "$bins/bins.tar.xz" ]]; then
	bins="$(mktemp -d)"
	tar -xJf "$root/.gpu/bins.tar.xz" -C "$bins"
fi
