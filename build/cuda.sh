#!/usr/bin/env bash
# build/cuda.sh OUTDIR: builds the CUDA backend, OUTDIR/libverdict_cuda.so
# (a fat binary: sm_80, sm_86, sm_89, sm_90 machine code and compute_90
# PTX, the CUDA runtime linked statically so that only the driver is needed
# at run time), and the device test harnesses OUTDIR/ops_check,
# OUTDIR/catalog_check, OUTDIR/tower_check (CUDA backend against the CPU
# backend's C sources) and OUTDIR/q4_check (the tensor-core q4 product
# against float64; for sm_90 unless HARNESS_ARCH says otherwise;
# CUDA_ARCH=NN limits the library to sm_NN). Needs nvcc (CUDA 12 or 13) and
# a C compiler; no Go, no GPU.
#
# Each .cu file is compiled once, in parallel: the library's sources into
# -fPIC objects that the library links; the harnesses link those same
# objects when they are for the harness architecture (CUDA_ARCH=90 with the
# default HARNESS_ARCH=sm_90), else their own sm_NN objects.
set -euo pipefail
out=${1:?usage: build/cuda.sh OUTDIR}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
NVCC=${NVCC:-nvcc}
CC=${CC:-cc}
command -v "$NVCC" >/dev/null || { echo "build/cuda.sh: no nvcc (set NVCC)" >&2; exit 1; }
arch=(-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_86,code=sm_86
	-gencode=arch=compute_89,code=sm_89 -gencode=arch=compute_90,code=sm_90
	-gencode=arch=compute_90,code=compute_90)
# CUDA_ARCH=90 (say) builds for that one architecture only: a quicker
# build for the machine at hand, not for a release.
if [ -n "${CUDA_ARCH:-}" ]; then
	arch=(-gencode=arch=compute_$CUDA_ARCH,code=sm_$CUDA_ARCH)
fi
# -fmad=false: only the fmaf calls fuse (the CPU kernels' arithmetic).
flags=(-O3 -std=c++17 -fmad=false -lineinfo -Xcompiler -fPIC -Xptxas -warn-spills)
harnesses=(ops_check catalog_check tower_check q4_check)
cd "$root"
# The library's sources: every native/cuda/*.cu but the harnesses
# (*_check.cu): cuda_backend.cu (the table and its core), a file an op
# family (linear, q4_linear, sparse_mlp, norm, elementwise, rope,
# attention, gather, sampling, limits), catalog, tower and q4_mma.
libsrc=()
for f in native/cuda/*.cu; do
	b=$(basename "$f" .cu)
	[[ $b == *_check ]] || libsrc+=("$b")
done
obj=$(mktemp -d)
trap 'rm -rf "$obj"' EXIT

# pids of the compiles in flight; wait_all fails when one did.
pids=()
wait_all() {
	local bad=0
	for p in "${pids[@]}"; do wait "$p" || bad=1; done
	pids=()
	return $bad
}

mkdir -p "$obj/lib"
for f in "${libsrc[@]}"; do
	"$NVCC" "${arch[@]}" "${flags[@]}" -Xcompiler -fvisibility=hidden -c native/cuda/$f.cu -o "$obj/lib/$f.o" &
	pids+=($!)
done

harness=${HARNESS:-1} # HARNESS=0: the library only
harch=${HARNESS_ARCH:-sm_90}
if [ "$harness" != 0 ]; then
	mkdir -p "$obj/h" "$obj/c"
	for f in native/cpu/cpu_*.c; do
		"$CC" -O2 -std=c11 -pthread -fPIC -c "$f" -o "$obj/c/$(basename "$f" .c).o" &
		pids+=($!)
	done
	for f in "${harnesses[@]}"; do
		"$NVCC" -arch="$harch" "${flags[@]}" -c native/cuda/$f.cu -o "$obj/h/$f.o" &
		pids+=($!)
	done
	# The harnesses link the library's objects when they are for their
	# architecture; otherwise their own.
	hlib=$obj/lib
	if [ "${CUDA_ARCH:-}" != "${harch#sm_}" ]; then
		hlib=$obj/hlib
		mkdir -p "$hlib"
		for f in "${libsrc[@]}"; do
			"$NVCC" -arch="$harch" "${flags[@]}" -c native/cuda/$f.cu -o "$hlib/$f.o" &
			pids+=($!)
		done
	fi
fi
wait_all || { echo "build/cuda.sh: compile failed" >&2; exit 1; }

"$NVCC" "${arch[@]}" "${flags[@]}" -shared -o "$out/libverdict_cuda.so" "$obj"/lib/*.o
echo "built $out/libverdict_cuda.so"
[ "$harness" = 0 ] && exit 0
for f in "${harnesses[@]}"; do
	"$NVCC" -arch="$harch" "${flags[@]}" -o "$out/$f" "$obj/h/$f.o" "$hlib"/*.o "$obj"/c/*.o -lm -lpthread
	echo "built $out/$f"
done
