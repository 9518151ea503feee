#!/usr/bin/env bash
# build/gpu-check.sh: the CUDA backend's check on a GPU machine (nvcc, no
# Go). Builds libverdict_cuda.so and the harnesses (build/cuda.sh), runs
# them (ops_check, catalog_check, tower_check, q4_check), then the carried
# verdict binary:
# verify-fixture on the synthetic and micro fixtures, Gemma 4's tower
# fixtures (vision, audio: the towers on the device's operations) and the E2B float64
# one (when carried) with --device cuda and cpu; greedy and sampled
# generation with and without graphs; bench of both shapes with --device
# cuda (with the card's limits) and cpu; the catalog decoder's gates, its
# fixture on the GPU and its benchmark (cuda, and a shorter CPU sweep);
# transformers' catalog anchor when PEER_CATALOG_DIR holds
# peer_catalog_hf.py; and transformers on the same card when PEER_HF names
# peer_bench_hf.py. Everything goes under $OUT (default
# /tmp/gpu-check). CARRY names the folder holding verdict.xz,
# tokenizer.json.xz and libasound.so.2 (or libasound.so.2.xz; default
# carry-cuda).
#
# STAGES (default all) picks the parts, space-separated: harness fixtures
# gates graphs bench catbench catpeer peer; FIXTURE_DEVICES (default "cuda
# cpu") and BENCH_DEVICES (default "cuda cpu") the devices of those parts.
set -uo pipefail
STAGES=${STAGES:-harness fixtures gates graphs bench catbench catpeer peer}
want() { [[ " $STAGES " == *" $1 "* ]]; }
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
OUT=${OUT:-/tmp/gpu-check}
CARRY=$(cd "${CARRY:-carry-cuda}" && pwd)
mkdir -p "$OUT"
log=$OUT/summary.txt
: >"$log"
say() { echo "$*" | tee -a "$log"; }
lib=/tmp/verdict-cuda
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$log"
nvcc --version | tail -2 | tee -a "$log"
t0=$(date +%s)
if ! bash build/cuda.sh "$lib" >"$OUT/build.log" 2>&1; then
	say "BUILD FAILED"
	grep -E "error|warning" "$OUT/build.log" | head -40 | tee -a "$log"
	exit 1
fi
say "build: $(($(date +%s) - t0)) s"
if want harness; then
"$lib/ops_check" >"$OUT/ops_check.txt" 2>&1
say "ops_check exit $? ($(grep -c ' ok' "$OUT/ops_check.txt") checks ok, $(grep -c FAIL "$OUT/ops_check.txt") FAIL)"
grep -E "FAIL|ERROR|failure" "$OUT/ops_check.txt" | tee -a "$log"
VERDICT_PRE_PARTS=0 "$lib/ops_check" -steps >>"$OUT/ops_check.txt" 2>&1 # the norm-adds apart (the pre parts are on by default)
say "ops_check -steps with VERDICT_PRE_PARTS=0: exit $? ($(tail -1 "$OUT/ops_check.txt"))"
for t in 0 1; do # the few queries' one launch (off by default) against the chunks; the prefill's tiles (on by default) in both
	VERDICT_ATTN_ONE=$t "$lib/ops_check" -attn-bench 2>&1 | tee -a "$OUT/attn_bench.txt" | grep 'attention bench' | tee -a "$log"
done
"$lib/catalog_check" >"$OUT/catalog_check.txt" 2>&1
say "catalog_check exit $?"
tail -2 "$OUT/catalog_check.txt" | tee -a "$log"
grep -E "FAIL|ERROR|failure" "$OUT/catalog_check.txt" | tee -a "$log"
"$lib/q4_check" >"$OUT/q4_check.txt" 2>&1
say "q4_check exit $?"
tail -1 "$OUT/q4_check.txt" | tee -a "$log"
grep -E "FAIL" "$OUT/q4_check.txt" | tee -a "$log"
"$lib/tower_check" >"$OUT/tower_check.txt" 2>&1
say "tower_check exit $?"
tail -1 "$OUT/tower_check.txt" | tee -a "$log"
grep -E "FAIL|ERROR" "$OUT/tower_check.txt" | tee -a "$log"
fi

. build/gpu-carry.sh
carry_bin "$lib"
want fixtures && for fx in testdata/gemma3n-synthetic-tiny.tar.gz testdata/gemma3n-micro-bf16.tar.gz \
	testdata/gemma4-synthetic-vision.tar.gz testdata/gemma4-synthetic-audio.tar.gz \
	"$CARRY/gemma3n-synthetic-e2b-f64.tar.gz"; do
	[ -f "$fx" ] || { say "== $(basename "$fx"): not carried, skipped"; continue; }
	for dev in ${FIXTURE_DEVICES:-cuda cpu}; do
		say "== verify-fixture --device $dev $(basename "$fx")"
		timeout "${FIXTURE_TIMEOUT:-200}" "$bin/verdict" verify-fixture --device "$dev" "$fx" 2>&1 | grep -v ALSA |
			tee -a "$OUT/fixtures.txt" | tail -6 | tee -a "$log"
		say "exit ${PIPESTATUS[0]}"
	done
	# the same on the GPU with the attention's one launch on
	say "== verify-fixture --device cuda, VERDICT_ATTN_ONE=1, $(basename "$fx")"
	VERDICT_ATTN_ONE=1 timeout "${FIXTURE_TIMEOUT:-200}" "$bin/verdict" verify-fixture --device cuda "$fx" 2>&1 |
		grep -v ALSA | tee -a "$OUT/fixtures.txt" | tail -3 | tee -a "$log"
done

# The catalog decoder's gates on the GPU (every way of decoding a request
# gives its result alone, bit for bit; GATES shuffled batches).
if want gates; then
say "== catalog gates --device cuda (${GATES:-2000} shuffled batches)"
timeout 300 "$bin/verdict" catalog --device cuda --model builtin --catalog engine/catalog/tools.json \
	--batch testdata/catalog-gate-requests.jsonl --gates "${GATES:-2000}" 2>&1 | grep -v ALSA | tee -a "$log"
# The recorded decodes of catalog-tiny.json on the GPU, and the CPU
# decoder's names against the GPU's on every case.
say "== catalog fixture --device cuda (catalog-tiny.json)"
timeout 300 "$bin/verdict" catalog --device cuda --fixture testdata/catalog-tiny.json 2>&1 | grep -v ALSA | tee -a "$log"
say "exit ${PIPESTATUS[0]}"
fi

# Recorded passes (graphs) against direct ones: the same tokens.
if want graphs; then
gen=(generate --device cuda --model synthetic-e2b --raw --prompt "one two three four five six" --max-tokens 48)
tmp=$(mktemp -d)
for g in 1 0; do
	VERDICT_GRAPHS=$g "$bin/verdict" "${gen[@]}" --temperature 0 >"$tmp/greedy-$g" 2>/dev/null
	VERDICT_GRAPHS=$g "$bin/verdict" "${gen[@]}" --temperature 0.8 --seed 5 >"$tmp/sample-$g" 2>/dev/null
done
for k in greedy sample; do
	if [ -s "$tmp/$k-1" ] && cmp -s "$tmp/$k-1" "$tmp/$k-0"; then
		say "generate $k: the same text with and without graphs"
	else
		say "generate $k: DIFFERENT with and without graphs"
	fi
done
# A prompt of 40 tokens: its decode steps take the one launch with
# VERDICT_ATTN_ONE=1 (the same bits, so the same text).
long=$(printf 'word%d ' $(seq 1 40))
for t in 0 1; do
	VERDICT_ATTN_ONE=$t "$bin/verdict" generate --device cuda --model synthetic-e2b --raw --prompt "$long" \
		--max-tokens 32 --temperature 0 >"$tmp/one-$t" 2>/dev/null
done
if [ -s "$tmp/one-1" ] && cmp -s "$tmp/one-1" "$tmp/one-0"; then
	say "generate greedy, a 40-word prompt: the same text with and without the attention's one launch"
else
	say "generate greedy, a 40-word prompt: DIFFERENT with and without the attention's one launch"
fi
fi

want bench && for dev in ${BENCH_DEVICES:-cuda cpu}; do
	models=${BENCH_MODELS:-synthetic-e2b,synthetic-e4b}
	[ "$dev" = cpu ] && models=${BENCH_CPU_MODELS:-$models}
	say "== bench --device $dev --model $models --json"
	t0=$(date +%s)
	timeout "${BENCH_TIMEOUT:-300}" "$bin/verdict" bench --device "$dev" --model "$models" \
		--towers="${BENCH_TOWERS:-true}" --tower-runs "${BENCH_TOWER_RUNS:-3}" --json >"$OUT/bench-$dev.json" 2>"$OUT/bench-$dev.err"
	say "exit $? in $(($(date +%s) - t0)) s"
	python3 - "$OUT/bench-$dev.json" <<'PY' | tee -a "$log"
import json, sys
r = json.load(open(sys.argv[1]))
if r.get("device_limits"):
    print("device", json.dumps(r.get("device_info")), json.dumps(r["device_limits"]))
for m in r.get("models") or []:
    print("%s: prefill %.1f tok/s, decode %.1f tok/s (%.0f GB/s), scorer %.4f s (prefix %.4f s; the first request %.4f s)" % (
        m["model"], m["prefill"]["tokens_per_second"], m["decode"]["tokens_per_second"], m["decode"]["gb_per_s"],
        m["scorer"].get("seconds", 0), m["scorer"].get("prefix_prefill_seconds", 0), m["scorer"].get("cold_seconds", 0)))
t = r.get("towers") or {}
if not t:
    print("towers: not in the report")
for k in ("vision", "audio"):
    x = t.get(k)
    if not x:
        if t:
            print("%s tower: skipped (%s)" % (k, t.get(k + "_skipped", "?")))
        continue
    what = "an image (%s)" % x["image"] if k == "vision" else "for %g s of audio" % x["audio_seconds"]
    print("%s tower (%s, shared by E2B and E4B): %.1f ms %s on %s (asked %s; median of %d, best %.1f ms)" % (
        k, x["tower"], 1000 * x["seconds"], what, x["backend"], x["requested_backend"], t["runs"], 1000 * x["min_seconds"]))
PY
done

# The catalog decoder's benchmark (verdict bench catalog): per token
# (sparse head, dense head + mask, unconstrained), the end-to-end sweep of
# CATALOG_SWEEP requests of 1-5 entries (default 500) at batch 1, 8, 32 and
# 64, and 10 prompts prefilled one by one against in one batch, with
# --device cuda for both shapes; the same sweep with --device cpu for E2B
# with fewer requests (CATALOG_CPU_SWEEP, default 16; the CPU decoder is
# slow) and no prefill comparison. CATALOG_BENCH=0 skips both.
if [ "${CATALOG_BENCH:-1}" != 0 ] && want catbench; then
	for dev in ${BENCH_DEVICES:-cuda cpu}; do
		if [ "$dev" = cuda ]; then
			models=${CATALOG_MODELS:-synthetic-e2b,synthetic-e4b} n=${CATALOG_SWEEP:-500} batches=${CATALOG_BATCHES:-1,8,32,64}
			extra=(--requests 8 --prefill-requests 10) to=${CATALOG_TIMEOUT:-540} note=""
		else
			models=${CATALOG_CPU_MODELS:-synthetic-e2b} n=${CATALOG_CPU_SWEEP:-16} batches=${CATALOG_CPU_BATCHES:-1,8}
			extra=(--requests 2 --prefill-requests 0) to=${CATALOG_CPU_TIMEOUT:-300}
			note=" - fewer requests than on cuda: the CPU decoder is slow; 2 per-token requests, no prefill comparison"
		fi
		say "== bench catalog --device $dev --model $models: a sweep of $n requests at batch $batches$note"
		t0=$(date +%s)
		timeout "$to" "$bin/verdict" bench catalog --device "$dev" --model "$models" --weights "${CATALOG_WEIGHTS:-q4}" \
			--sweep-requests "$n" --batches "$batches" "${extra[@]}" --json \
			>"$OUT/bench-catalog-$dev.json" 2>"$OUT/bench-catalog-$dev.err"
		say "exit $? in $(($(date +%s) - t0)) s"
		python3 - "$OUT/bench-catalog-$dev.json" <<'PY' 2>&1 | tee -a "$log"
import json, sys
for r in json.load(open(sys.argv[1])):
    print("%s %s (%s): per token sparse %.3f ms, dense+mask %.3f ms, unconstrained %.3f ms (constrained/unconstrained %.3f)" % (
        r["model"], r.get("device", ""), r["weights"], r["sparse_ms_per_token"], r["dense_mask_ms_per_token"],
        r["unconstrained_ms_per_token"], r["sparse_ms_per_token"] / r["unconstrained_ms_per_token"]))
    for b in r["batches"]:
        print("  batch %2d: %d requests in %.2f s = %.2f requests/s, %.3f ms a token (wall / %d tokens), %.2f ms a token a sequence, %d waited, %s" % (
            b["batch"], b["requests"], b["seconds"], b["requests_per_second"], b["ms_per_token"], b["tokens"],
            b["seq_ms_per_token"], b["waited"], "same names as batch 1" if b["same_as_batch_1"] else "NAMES DIFFER FROM BATCH 1"))
    p = r.get("prefill")
    if p:
        print("  prefill of %d prompts (%d tokens): one by one %.2f ms, one batch %.2f ms (%.2fx), shared prefix %d once + suffixes %.2f ms (%.2fx), %s" % (
            p["prompts"], p["tokens"], 1e3 * p["serial_seconds"], 1e3 * p["batched_seconds"], p["serial_seconds"] / p["batched_seconds"],
            p["shared_prefix_tokens"], 1e3 * p["shared_seconds"], p["serial_seconds"] / p["shared_seconds"],
            "same states" if p["same_states"] else "STATES DIFFER"))
PY
		grep -v ALSA "$OUT/bench-catalog-$dev.err" | tail -3 | tee -a "$log"
	done
fi

# transformers' anchor for the catalog decoder on the same card:
# peer_catalog_hf.py (with make_fixtures.py and make_catalog_fixture.py, in
# the folder PEER_CATALOG_DIR), E2B shape, bf16, PEER_CATALOG_N requests
# (default 30: about a minute), the rule applied on the host every step.
if want catpeer && [ -n "${PEER_CATALOG_DIR:-}" ] && [ -f "$PEER_CATALOG_DIR/peer_catalog_hf.py" ]; then
	n=${PEER_CATALOG_N:-30}
	say "== transformers E2B bf16, catalog rule on the host (peer_catalog_hf.py, $n requests)"
	t0=$(date +%s)
	(cd "$PEER_CATALOG_DIR" && CARRY=/tmp DT=bf16 V=e2b N=$n timeout "${PEER_CATALOG_TIMEOUT:-240}" python3 peer_catalog_hf.py) \
		>"$OUT/peer-catalog.json" 2>"$OUT/peer-catalog.err"
	say "exit $? in $(($(date +%s) - t0)) s"
	python3 - "$OUT/peer-catalog.json" "$OUT/bench-catalog-cuda.json" <<'PY' 2>&1 | tee -a "$log"
import json, sys
p = json.load(open(sys.argv[1]))
rps = p["requests_per_s"]
print("transformers: %d requests in %.1f s = %.3f requests/s, %.1f ms a token (wall / %d tokens, prefill included); "
      "one request of %d tokens: constrained %.1f ms, unconstrained %.1f ms" % (
    p["requests"], p["constrained_wall_s"], rps, 1e3 * p["constrained_wall_s"] / p["constrained_tokens"], p["constrained_tokens"],
    p["per_request_tokens"], p["constrained_request_ms_median"], p["free_same_tokens_ms_median"]))
try:
    ours = json.load(open(sys.argv[2]))
except (OSError, ValueError):
    sys.exit()
for r in ours:
    if r["model"] == "synthetic-e2b":
        print("verdict (%s weights, %d requests) / transformers (bf16, %d requests), requests/s, E2B shape: " % (
            r["weights"], r["batches"][0]["requests"], p["requests"]) + ", ".join(
            "batch %d %.0fx" % (b["batch"], b["requests_per_second"] / rps) for b in r["batches"]))
PY
	grep -iE "error|Traceback" "$OUT/peer-catalog.err" | tail -3 | tee -a "$log"
fi

# The peer: Hugging Face transformers on the same card (PEER_HF: the
# script, ../shared/tools/peer_bench_hf.py, carried), bf16 and f32.
if want peer && [ -n "${PEER_HF:-}" ] && [ -f "$PEER_HF" ]; then
	for dt in ${PEER_DTYPES:-bf16 f32}; do
		say "== transformers E2B $dt (sdpa)"
		DT=$dt REPS=${PEER_REPS:-3} timeout 300 python3 "$PEER_HF" 2>/dev/null | grep RESULT | tee -a "$log"
	done
fi
if want harness; then
	echo "---- ops_check ----"
	cat "$OUT/ops_check.txt"
	echo "---- catalog_check ----"
	cat "$OUT/catalog_check.txt"
	echo "---- tower_check ----"
	cat "$OUT/tower_check.txt"
fi
echo "---- summary ----"
cat "$log"
