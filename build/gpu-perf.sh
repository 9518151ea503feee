#!/usr/bin/env bash
# build/gpu-perf.sh: where the CUDA backend's time goes, on a GPU machine
# (nvcc, no Go). Builds the library for this GPU only (CUDA_ARCH, default
# 90) and the harness, runs the harness, checks that recorded passes
# (graphs) give the bits of direct ones (greedy generation and a scorer
# request, VERDICT_GRAPHS=0 against the default), and times bench
# synthetic-e2b with graphs, without, and without under the per-operation
# profile (VERDICT_CUDA_PROFILE=file: decoding, a prefill, a scorer
# request). Results under $OUT (default /tmp/gpu-perf); CARRY as for
# gpu-check.sh; STAGES picks from "f64 graphs bench profile" (the default)
# and "ncu" (one decode step's kernels), "ncu-prefill" (a prefill's),
# "ncu-switches" (a prefill's kernels under each of SWITCHES against the
# defaults), "sanitize" (compute-sanitizer on the attention tiles) and "chain" (the
# cost a kernel of a chain of dependent ones, native/cuda/bench); HARNESS=0
# skips the harness.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
OUT=${OUT:-/tmp/gpu-perf}
CARRY=$(cd "${CARRY:-carry-cuda}" && pwd)
MODEL=${MODEL:-synthetic-e2b}
mkdir -p "$OUT"
tmp=$(mktemp -d)
log=$OUT/summary.txt
: >"$log"
say() { echo "$*" | tee -a "$log"; }
lib=/tmp/verdict-cuda
t0=$(date +%s)
if ! HARNESS=${HARNESS:-1} CUDA_ARCH=${CUDA_ARCH:-90} bash build/cuda.sh "$lib" >"$OUT/build.log" 2>&1; then
	say "BUILD FAILED"
	grep -E "error|warning" "$OUT/build.log" | head -40 | tee -a "$log"
	exit 1
fi
say "build: $(($(date +%s) - t0)) s"
grep -E "spill|registers" "$OUT/build.log" | head -5 | tee -a "$log"
if [ "${HARNESS:-1}" != 0 ]; then
	"$lib/ops_check" >"$OUT/ops_check.txt" 2>&1
	say "ops_check exit $? ($(grep -c ' ok' "$OUT/ops_check.txt") ok)"
	grep -E "FAIL|ERROR" "$OUT/ops_check.txt" | head -20 | tee -a "$log"
fi

. build/gpu-carry.sh
carry_bin "$lib"
v() { "$bin/verdict" "$@" 2> >(grep -v ALSA >&2); }

say "== verify-fixture --device cuda synthetic-tiny"
v verify-fixture --device cuda testdata/gemma3n-synthetic-tiny.tar.gz 2>&1 | tail -1 | tee -a "$log"

STAGES=${STAGES:-f64 graphs bench profile}
has() { [[ " $STAGES " == *" $1 "* ]]; }
if has f64 && [ -f "$CARRY/gemma3n-synthetic-e2b-f64.tar.gz" ]; then
	for dev in ${F64_DEVICES:-cuda}; do
		say "== verify-fixture --device $dev e2b-f64"
		timeout 300 "$bin/verdict" verify-fixture --device "$dev" "$CARRY/gemma3n-synthetic-e2b-f64.tar.gz" 2>&1 |
			grep -v ALSA | tail -6 | tee -a "$log"
	done
fi
gen=(generate --device cuda --model "$MODEL" --raw --prompt "one two three four five six" --max-tokens 48)
b=(bench --device cuda --model "$MODEL" --json --limits=false)
if has graphs; then
say "== graphs against direct runs ($MODEL)"
for g in 1 0; do
	VERDICT_GRAPHS=$g v "${gen[@]}" --temperature 0 >"$tmp/gen-greedy-$g.txt" 2>>"$tmp/gen.err"
	VERDICT_GRAPHS=$g v "${gen[@]}" --temperature 0.8 --seed 5 >"$tmp/gen-sample-$g.txt" 2>>"$tmp/gen.err"
done
for k in greedy sample; do
	if cmp -s "$tmp/gen-$k-1.txt" "$tmp/gen-$k-0.txt" && [ -s "$tmp/gen-$k-1.txt" ]; then
		say "generate $k: same text with and without graphs ($(wc -c <"$tmp/gen-$k-1.txt") bytes)"
	else
		say "generate $k: DIFFERENT with and without graphs"
		head -c 300 "$tmp/gen-$k-1.txt" "$tmp/gen-$k-0.txt" | tee -a "$log"
	fi
done
grep -v ALSA "$tmp/gen.err" | tail -4 | tee -a "$log"
fi
if has bench; then
for g in 1 0; do
	say "== bench graphs=$g"
	VERDICT_GRAPHS=$g timeout 200 "$bin/verdict" "${b[@]}" >"$OUT/bench-g$g.json" 2>/dev/null
	python3 - "$OUT/bench-g$g.json" <<'PY' | tee -a "$log"
import json, sys
m = json.load(open(sys.argv[1]))["models"][0]
print("prefill %.1f tok/s  decode %.1f tok/s  scorer %.4f s (prefix %.4f s; branch passes %s ms)" % (
    m["prefill"]["tokens_per_second"], m["decode"]["tokens_per_second"],
    m["scorer"]["seconds"], m["scorer"]["prefix_prefill_seconds"], m["scorer"].get("branch_passes_ms")))
PY
done
fi
if has profile; then
say "== profile of decoding (graphs off; 64 greedy tokens after a short prompt)"
VERDICT_GRAPHS=0 VERDICT_CUDA_PROFILE=$OUT/profile-decode.txt v "${gen[@]}" --temperature 0 --max-tokens 64 >/dev/null 2>&1
cat "$OUT/profile-decode.txt" | tee -a "$log"
say "== profile of a 512-token prefill (graphs off)"
VERDICT_GRAPHS=0 VERDICT_CUDA_PROFILE=$OUT/profile-prefill.txt timeout 200 "$bin/verdict" "${b[@]}" \
	--decode-tokens 1 --scorer=false >/dev/null 2>&1
cat "$OUT/profile-prefill.txt" | tee -a "$log"
say "== profile of a scorer request after a 512-token prefill (graphs off)"
VERDICT_GRAPHS=0 VERDICT_CUDA_PROFILE=$OUT/profile-scorer.txt timeout 200 "$bin/verdict" "${b[@]}" \
	--decode-tokens 1 --batch 0 --towers=false >"$OUT/bench-scorer.json" 2>/dev/null
cat "$OUT/profile-scorer.txt" | tee -a "$log"
fi
# ncu_table CSV: an ncu CSV of gpu__time_duration as one line a kernel
# (name, grid, block), its calls and device time, the largest first.
ncu_table() {
	python3 - "$1" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows:
    print("no ncu rows"); sys.exit()
h = rows[0]; ki, gi, bi, vi = h.index("Kernel Name"), h.index("Grid Size"), h.index("Block Size"), h.index("Metric Value")
tot = collections.defaultdict(lambda: [0, 0.0])
all_ns = 0.0
for r in rows[1:]:
    try: ns = float(r[vi].replace(",", ""))
    except ValueError: continue
    name = r[ki].split("(")[0][:40] + " g" + r[gi] + " b" + r[bi]
    tot[name][0] += 1; tot[name][1] += ns; all_ns += ns
print("kernels %d, device time %.1f us" % (sum(v[0] for v in tot.values()), all_ns / 1e3))
for k, v in sorted(tot.items(), key=lambda kv: -kv[1][1])[:45]:
    print("%-70s %5d %9.1f us %7.2f us/call" % (k, v[0], v[1] / 1e3, v[1] / 1e3 / v[0]))
PY
}
if has ncu; then
	# Per-kernel device times of about one decode step (graphs off), from
	# the hardware's own timer: ncu, clocks left alone (an 8-token run
	# makes about 5,000 launches: 600 from the 2,400th are about a step).
	say "== ncu: kernels of one decode step"
	VERDICT_GRAPHS=0 timeout 300 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
		--launch-skip "${NCU_SKIP:-2400}" --launch-count "${NCU_COUNT:-600}" \
		"$bin/verdict" "${gen[@]}" --temperature 0 --max-tokens 8 >"$tmp/ncu.csv" 2>"$tmp/ncu.err"
	say "ncu exit $?"
	ncu_table "$tmp/ncu.csv" | tee -a "$log"
	tail -3 "$tmp/ncu.err" | tee -a "$log"
fi
if has ncu-prefill; then
	# The same for the first 512-token prefill of bench (its first
	# launches: the model's upload makes none), graphs off.
	say "== ncu: kernels of a 512-token prefill"
	VERDICT_GRAPHS=0 timeout 300 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
		--launch-skip 0 --launch-count "${NCU_PREFILL_COUNT:-700}" \
		"$bin/verdict" "${b[@]}" --decode-tokens 1 --scorer=false --batch 0 --towers=false >"$tmp/ncu-p.csv" 2>"$tmp/ncu-p.err"
	say "ncu exit $?"
	ncu_table "$tmp/ncu-p.csv" | tee -a "$log"
	tail -3 "$tmp/ncu-p.err" | tee -a "$log"
fi
if has ncu-switches; then
	# Each comparison switch against the defaults, by the kernels it
	# touches: their device time summed by family over a 512-token prefill
	# (graphs off, clocks and caches left alone), the settings in turn,
	# ROUNDS times. SWITCHES: settings separated by spaces, a setting's
	# variables by commas ("default" for none); NCU_KERNELS: the kernels'
	# regex.
	say "== ncu: switches, kernels /${NCU_KERNELS:=k_q4|k_sp_}/ of a 512-token prefill"
	for r in $(seq "${ROUNDS:-2}"); do
		for sw in default ${SWITCHES:-VERDICT_Q4_STAGED=0 VERDICT_Q4_SPLIT_WIDE=0 VERDICT_SP_UP_BLOCKS=16}; do
			vars=()
			[ "$sw" = default ] || IFS=, read -ra vars <<<"$sw"
			env "${vars[@]}" VERDICT_GRAPHS=0 timeout 300 ncu --cache-control none --clock-control none \
				--metrics gpu__time_duration.sum --csv -k "regex:$NCU_KERNELS" --launch-count "${NCU_PREFILL_COUNT:-700}" \
				"$bin/verdict" "${b[@]}" --decode-tokens 1 --scorer=false --batch 0 --towers=false >"$tmp/ncu-s.csv" 2>/dev/null
			python3 - "$tmp/ncu-s.csv" "$sw" "$r" <<'PY' | tee -a "$log"
import csv, sys, collections, re
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows:
    print("%s round %s: no ncu rows" % (sys.argv[2], sys.argv[3])); sys.exit()
h = rows[0]; ki, vi = h.index("Kernel Name"), h.index("Metric Value")
fam = collections.defaultdict(float)
for r in rows[1:]:
    name = r[ki].replace("(anonymous namespace)::", "").replace("void ", "")
    try: fam[re.split(r"[<(]", name)[0]] += float(r[vi].replace(",", "")) / 1e3
    except (ValueError, IndexError): pass
print("%s round %s: %.1f us | %s" % (sys.argv[2], sys.argv[3], sum(fam.values()),
      " ".join("%s %.1f" % kv for kv in sorted(fam.items(), key=lambda kv: -kv[1]))))
PY
		done
	done
fi
if has chain; then
	say "== the chain's floor (native/cuda/bench/chain_floor.cu)"
	if nvcc -O3 -arch=sm_"${CUDA_ARCH:-90}" -std=c++17 -I native/cuda -o "$tmp/chain" native/cuda/bench/chain_floor.cu \
		>"$OUT/chain-build.log" 2>&1; then
		timeout 120 "$tmp/chain" 2>&1 | tee -a "$log"
	else
		say "chain_floor: BUILD FAILED"
		tail -5 "$OUT/chain-build.log" | tee -a "$log"
	fi
fi
if has sanitize; then
	# compute-sanitizer's initcheck (a read of shared or global memory
	# never written) and memcheck over the attention's checks at the full
	# shapes, the prefill's tiles among them (they once read past the
	# value pool: native/cuda/README.md).
	for tool in initcheck memcheck; do
		say "== compute-sanitizer --tool $tool ops_check -attn-all, VERDICT_ATTN_TILE=1"
		VERDICT_ATTN_TILE=1 timeout 240 compute-sanitizer --tool "$tool" --print-limit 8 "$lib/ops_check" -attn-all \
			>"$OUT/sanitize-$tool.txt" 2>&1
		say "exit $?"
		grep -v ' ok$' "$OUT/sanitize-$tool.txt" | head -40 | tee -a "$log"
	done
fi
