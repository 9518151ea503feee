#!/usr/bin/env bash
# build/cuda-syntax.sh [run|q4|ops ARGS]: checks native/cuda where there is no nvcc.
# Every .cu file is compiled as C++20 by g++ against the stub runtime of
# native/cuda/stub (kernel launches rewritten as stub_launch calls, dynamic
# shared memory as the stub's buffer), then the harnesses are linked with
# the CPU backend's C sources: a check of syntax, types and links, not a
# CUDA build (nvcc's device rules, registers and spills are not checked).
# With "run", tower_check then runs on the host emulation for its small
# shapes (tower_check -small): the kernels' logic against the CPU backend,
# with libm's arithmetic for the device's intrinsics; and q4_check, the
# tensor-core q4 product (the stub's mma sums in k order) against float64
# and its batch identity ("q4": q4_check alone); ops_check -steps, the
# layer steps against the CPU and the operations they stand for (again
# with VERDICT_PRE_PARTS=0, the norm-adds apart); and
# ops_check -q4, the q4 products (tensor-core and float-core kernels) and
# the sparse MLP against the CPU; ops_check -attn, the paged attention,
# causal and with per-query key limits, against the CPU; ops_check
# -linears, the grouped products against the CPU and each alone ("ops
# ARGS": ops_check ARGS alone).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
CXX=${CXX:-g++}
CC=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cxx=("$CXX" -std=c++20 -O1 -ffp-contract=off -pthread -Wall -Wno-unused-function -Wno-unused-variable
	-Wno-unknown-pragmas -Wno-unused-but-set-variable -Wno-sign-compare -I native/cuda/stub -include cuda_runtime.h -iquote native/cuda)
fail=0
for f in native/cuda/*.cu; do
	b=$(basename "$f" .cu)
	# k<<<cfg>>>(args) -> stub_launch([&] { k(args); }, cfg); extern
	# __shared__ T a[]; -> T *a = (T *)stub_dyn_smem();
	perl -0777 -pe '
		s/extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?(\w+)\s+(\w+)\s*\[\s*\]\s*;/$1 *$2 = ($1 *)stub_dyn_smem();/g;
		s/(\b[A-Za-z_]\w*(?:<[^<>;()]*>)?)\s*<<<(.*?)>>>\s*(\((?:[^()]++|(?3))*\))/stub_launch([&] { $1$3; }, $2)/gs;
	' "$f" >"$tmp/$b.cpp"
	if "${cxx[@]}" -c "$tmp/$b.cpp" -o "$tmp/$b.o" 2>"$tmp/$b.err"; then
		echo "ok   $f"
	else
		echo "FAIL $f"
		sed "s|$tmp/$b.cpp|$f (rewritten)|" "$tmp/$b.err" | head -40
		fail=1
	fi
done
[ "$fail" = 0 ] || exit 1
mkdir -p "$tmp/c"
for f in native/cpu/cpu_*.c; do
	"$CC" -O2 -std=c11 -pthread -fPIC -c "$f" -o "$tmp/c/$(basename "$f" .c).o"
done
# The library's objects: every .cu but the harnesses (*_check.cu).
lib=()
for f in native/cuda/*.cu; do
	b=$(basename "$f" .cu)
	[[ $b == *_check ]] || lib+=("$tmp/$b.o")
done
for h in ops_check catalog_check tower_check; do
	"$CXX" -pthread -o "$tmp/$h" "$tmp/$h.o" "${lib[@]}" "$tmp"/c/*.o -lm
	echo "linked $h"
done
"$CXX" -pthread -o "$tmp/q4_check" "$tmp/q4_check.o" "$tmp/q4_mma.o" "$tmp/q4_gemv.o" "$tmp/q4_bulk.o" -lm
echo "linked q4_check"
case "${1:-}" in
run)
	"$tmp/tower_check" -small
	"$tmp/q4_check"
	"$tmp/ops_check" -steps
	VERDICT_PRE_PARTS=0 "$tmp/ops_check" -steps # the norm-adds apart (the pre parts are on by default)
	"$tmp/ops_check" -q4
	VERDICT_ATTN_TILE=1 "$tmp/ops_check" -attn # the prefill's tiles wherever the shape allows, against each query alone
	"$tmp/ops_check" -linears
	;;
q4) "$tmp/q4_check" ;;
ops) "$tmp/ops_check" "${@:2}" ;;
esac
