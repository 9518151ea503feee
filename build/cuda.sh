#!/usr/bin/env bash
# build/cuda.sh OUTDIR: builds the CUDA backend, OUTDIR/libverdict_cuda.so
# (a fat binary: sm_80, sm_86, sm_89, sm_90 machine code and compute_90
# PTX, the CUDA runtime linked statically so that only the driver is needed
# at run time), and the device test harnesses OUTDIR/ops_check and
# OUTDIR/catalog_check (CUDA backend against the CPU backend's C sources;
# for sm_90 unless HARNESS_ARCH says otherwise; CUDA_ARCH=NN limits the
# library to sm_NN). Needs nvcc (CUDA 12 or 13) and a C compiler; no Go, no GPU.
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
cd "$root"
"$NVCC" "${arch[@]}" "${flags[@]}" -Xcompiler -fvisibility=hidden -shared \
	-o "$out/libverdict_cuda.so" native/cuda/cuda_backend.cu native/cuda/catalog.cu
echo "built $out/libverdict_cuda.so"

[ "${HARNESS:-1}" = 0 ] && exit 0 # HARNESS=0: the library only
obj=$(mktemp -d)
trap 'rm -rf "$obj"' EXIT
for f in native/cpu_*.c; do
	"$CC" -O2 -std=c11 -pthread -fPIC -c "$f" -o "$obj/$(basename "$f" .c).o"
done
harch=${HARNESS_ARCH:-sm_90}
"$NVCC" -arch="$harch" "${flags[@]}" -o "$out/ops_check" native/cuda/ops_check.cu \
	native/cuda/cuda_backend.cu native/cuda/catalog.cu "$obj"/*.o -lm -lpthread
echo "built $out/ops_check"
"$NVCC" -arch="$harch" "${flags[@]}" -o "$out/catalog_check" native/cuda/catalog_check.cu \
	native/cuda/cuda_backend.cu native/cuda/catalog.cu "$obj"/*.o -lm -lpthread
echo "built $out/catalog_check"
