#!/usr/bin/env bash
# build/gpu-gemma4.sh: every Gemma 4 reference not yet in testdata/, made and
# checked in one call of the GPU machine (nvcc, PyTorch, transformers 5.17;
# no Go), as gpu-check.sh runs Gemma 3n's checks:
#
#   run(command="CARRY=carry-cuda bash build/gpu-gemma4.sh", carry=["carry-cuda"], timeout_s=600)
#
# CARRY (default carry-cuda) holds what gpu-check.sh's does: verdict.xz,
# this checkout's binary (`go build -ldflags='-s -w' -o /tmp/verdict . &&
# xz -c /tmp/verdict >carry-cuda/verdict.xz`), libasound.so.2 (the binary
# links it; the GPU machine may not have it) and, if there,
# tokenizer.json.xz. Everything comes back under $OUT (default
# /tmp/gpu-gemma4), at most 8 files (the tool's limit):
#
#   summary.txt                         one line a step, then what was not run
#   log.txt                             every step's full output, in order
#   gemma4-synthetic-e2b.tar.gz         make_gemma4_e2b_fixtures.py (float32), ~7 MB
#   gemma4-synthetic-e2b-f64.tar.gz     the float64 answer, with meta.json tolerances, ~7 MB
#   gemma4-e2b-stats.json               its distances, margins, tolerances, timings
#   gemma4-preprocess.tar.gz            make_gemma4_preprocess_fixtures.py -> testdata/
#   gemma4-catalog.tar.gz               catalog-gemma4-synthetic-tiny{,-moe}.json, from
#                                       make_gemma4_catalog_fixture.py -> engine/gemma4/testdata/
#   gemma4-synthetic-multimodal-bidi.tar.gz
#                                       make_gemma4_mm_fixtures.py's bidirectional case (its other three
#                                       tarballs are in testdata/ already) -> testdata/
#
# The order, so that running out of time loses the least: the CUDA library
# builds in the background (CUDA_ARCH=90), and so do the small references
# (a minute at most, mostly transformers' import), while Python makes the
# E2B pair (1-3 minutes); each is copied to $OUT as soon as it is there.
# The E2B checks take longest: verify-fixture runs engine/gemma4's plain-Go
# reference first (single-threaded: 37 token passes of 2.28 G multiply-adds
# for the 10-token prompt, ~3 minutes at the 2.1 ns a multiply-add measured
# on a development machine), then the Decoder on the device. So the four
# E2B runs (cpu and cuda, float32 and float64) run side by side, each as
# soon as it can (the cpu ones do not wait for the library), under
# GOMEMLIMIT (each holds the 18.5 GB float32 model) and a timeout that ends
# them before BUDGET; the tiny fixtures' runs (seconds) and tower_check go
# in meanwhile.
# BUDGET (default 540 s) is when everything must have ended; STAGES (default
# "small e2b build tiny tower e2bcheck") picks the parts; E2B_DEVICES (default
# "cpu cuda") the devices of the E2B checks, E2B_MEMLIMIT (default 24GiB)
# each one's GOMEMLIMIT (four at once take ~80-100 GB of the 128).
#
# What cannot run there (no Go), for this machine afterwards: the goldens'
# Go tests (TestPreprocessGoldens, TestAudioFeatureGoldens once
# gemma4-preprocess.tar.gz is in testdata/; TestCatalogOnGemma4 once the
# catalog files are in engine/gemma4/testdata/). summary.txt lists them.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
OUT=${OUT:-/tmp/gpu-gemma4}
CARRY=$(cd "${CARRY:-carry-cuda}" && pwd)
BUDGET=${BUDGET:-540}
STAGES=${STAGES:-small e2b build tiny tower e2bcheck}
PY=${PY:-python3}
CUDA_BUILD=${CUDA_BUILD:-build/cuda.sh}
E2B_MEMLIMIT=${E2B_MEMLIMIT:-24GiB}
E2B_DEVICES=${E2B_DEVICES:-cpu cuda}
want() { [[ " $STAGES " == *" $1 "* ]]; }
t0=$(date +%s)
now() { echo $(($(date +%s) - t0)); }
left() { echo $((BUDGET - $(now))); }
mkdir -p "$OUT"
work=$(mktemp -d /tmp/gpu-gemma4.XXXXXX)
last=$work/last.txt
sum=$OUT/summary.txt
log=$OUT/log.txt
: >"$sum"
: >"$log"
say() { echo "$*" | tee -a "$sum"; }
# step NAME TIMEOUT CMD...: runs CMD, its output in $last and appended to
# log.txt under a header; returns its exit status (124 on timeout).
step() {
	local name=$1 to=$2 rc
	shift 2
	[ "$to" -gt "$(left)" ] && to=$(left)
	[ "$to" -lt 5 ] && to=5
	printf '\n==== %s (at %d s, timeout %d s)\n' "$name" "$(now)" "$to" >>"$log"
	timeout --kill-after=10 "$to" "$@" >"$last" 2>&1
	rc=$?
	grep -v ALSA "$last" >>"$log"
	return $rc
}
# copy FILE...: the results that come back, each as soon as it exists.
copy() {
	local f
	for f in "$@"; do
		if [ -f "$f" ]; then cp "$f" "$OUT/" && say "  -> $(basename "$f") ($(stat -c %s "$f") bytes)"; else say "  missing $(basename "$f")"; fi
	done
}
export PYTHONUNBUFFERED=1
say "gpu-gemma4.sh at $(date -u +%FT%TZ), budget ${BUDGET} s, stages: $STAGES"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2 | tee -a "$sum"
"$PY" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' 2>&1 | tail -1 | tee -a "$sum"
echo "cores $(nproc), memory $(free -g | awk '/Mem:/{print $2}') GB" | tee -a "$sum"

# The binary (no Go there): verify-fixture for every fixture below.
bin=$work/bin
mkdir -p "$bin"
if ! xz -dc "$CARRY/verdict.xz" >"$bin/verdict" 2>>"$log"; then
	say "NO BINARY: $CARRY/verdict.xz missing or unreadable; the checks are skipped"
	STAGES=${STAGES//tiny/}
	STAGES=${STAGES//e2bcheck/}
fi
chmod +x "$bin/verdict" 2>/dev/null
if [ -f "$CARRY/tokenizer.json.xz" ]; then
	xz -dc "$CARRY/tokenizer.json.xz" >"$work/tokenizer.json" && export VERDICT_TOKENIZER=$work/tokenizer.json
fi
if [ -f "$CARRY/libasound.so.2" ]; then export LD_LIBRARY_PATH=$CARRY${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}; fi
if [ -x "$bin/verdict" ] && ! "$bin/verdict" verify-fixture --help >"$last" 2>&1; then
	say "THE BINARY DOES NOT START: $(head -c 300 "$last"); the checks are skipped"
	STAGES=${STAGES//tiny/}
	STAGES=${STAGES//e2bcheck/}
fi

# 1. The CUDA library and harnesses, in the background.
lib=$work/cuda
build_pid=
if want build; then
	printf '\n==== build (background, at %d s)\n' "$(now)" >>"$log"
	(CUDA_ARCH=${CUDA_ARCH:-90} timeout "$(left)" bash "$CUDA_BUILD" "$lib" >"$work/build.log" 2>&1; echo $? >"$work/build.rc") &
	build_pid=$!
fi
build_wait() { # the build's status: 0 when the library is there
	[ -n "$build_pid" ] || return 1
	wait "$build_pid" 2>/dev/null
	build_pid=
	local rc
	rc=$(cat "$work/build.rc" 2>/dev/null || echo 1)
	cat "$work/build.log" >>"$log"
	if [ "$rc" = 0 ] && [ -f "$lib/libverdict_cuda.so" ]; then
		cp "$lib/libverdict_cuda.so" "$bin/"
		say "build: ok at $(now) s"
		built=1
	else
		say "build: FAILED (exit $rc)"
		grep -E "error|warning" "$work/build.log" | head -20 | tee -a "$sum"
		built=0
	fi
}
built=0

# 2. The small references (seconds each, most of it transformers' import),
# in the background beside the E2B pair; each step's output in its own file.
fx=$work/fixtures
mkdir -p "$fx"
small_pid=
if want small; then
	(
		timeout --kill-after=10 180 "$PY" build/fixtures/make_gemma4_preprocess_fixtures.py "$fx" >"$work/small-preprocess.txt" 2>&1
		echo "$? $(now)" >"$work/small-preprocess.rc"
		timeout --kill-after=10 240 "$PY" build/fixtures/make_gemma4_catalog_fixture.py "$fx" tiny moe >"$work/small-catalog.txt" 2>&1
		echo "$? $(now)" >"$work/small-catalog.rc"
		timeout --kill-after=10 240 "$PY" build/fixtures/make_gemma4_mm_fixtures.py "$fx/mm" >"$work/small-mm.txt" 2>&1
		echo "$? $(now)" >"$work/small-mm.rc"
	) &
	small_pid=$!
fi
small_wait() {
	[ -n "$small_pid" ] || return
	wait "$small_pid" 2>/dev/null
	small_pid=
	local k rc at
	for k in preprocess catalog mm; do
		printf '\n==== %s\n' "$k" >>"$log"
		cat "$work/small-$k.txt" >>"$log" 2>/dev/null
		read -r rc at <"$work/small-$k.rc" 2>/dev/null || { rc=killed; at=$(now); }
		say "$k: exit $rc at $at s"
		grep -E "Error|error|FAIL|WARNING" "$work/small-$k.txt" 2>/dev/null | tail -3 | cut -c1-200 | tee -a "$sum"
	done
	if [ -f "$fx/catalog-gemma4-synthetic-tiny.json" ] || [ -f "$fx/catalog-gemma4-synthetic-tiny-moe.json" ]; then
		(cd "$fx" && tar -czf gemma4-catalog.tar.gz catalog-gemma4-synthetic-tiny*.json)
	fi
	copy "$fx/gemma4-preprocess.tar.gz" "$fx/gemma4-catalog.tar.gz" "$fx/mm/gemma4-synthetic-multimodal-bidi.tar.gz"
}

# 3. The E2B pair (GPU).
if want e2b; then
	step e2b "$(($(left) - 30))" "$PY" build/fixtures/make_gemma4_e2b_fixtures.py "$fx"
	rc=$?
	say "e2b references: exit $rc at $(now) s"
	grep -E "^\[|tolerances|float32 vs float64|WARNING|FAIL|Error|error" "$last" | tail -14 | cut -c1-400 | tee -a "$sum"
	copy "$fx/gemma4-synthetic-e2b-f64.tar.gz" "$fx/gemma4-synthetic-e2b.tar.gz" "$fx/gemma4-e2b-stats.json"
fi

# 4. The E2B checks, side by side, each as soon as it can run.
e2b_pids=()
e2b_run() { # DEVICE FIXTURE: in the background, output to its own file
	local dev=$1 f=$2 name
	name=$(basename "$f" .tar.gz)
	[ -f "$f" ] || { say "verify-fixture --device $dev $name: no fixture, skipped"; return; }
	local to=$(($(left) - 15))
	[ "$to" -lt 5 ] && { say "verify-fixture --device $dev $name: no time left, skipped"; return; }
	(
		s=$(date +%s)
		GOMEMLIMIT=$E2B_MEMLIMIT timeout --kill-after=10 "$to" "$bin/verdict" verify-fixture --device "$dev" "$f" \
			>"$work/verify-$dev-$name.txt" 2>&1
		echo "$? $(($(date +%s) - s))" >"$work/verify-$dev-$name.rc"
	) &
	e2b_pids+=($!)
	echo "started verify-fixture --device $dev $name at $(now) s" >>"$log"
}
e2b_fx=("$fx/gemma4-synthetic-e2b-f64.tar.gz" "$fx/gemma4-synthetic-e2b.tar.gz")
if want e2bcheck && [[ " $E2B_DEVICES " == *" cpu "* ]]; then
	for f in "${e2b_fx[@]}"; do e2b_run cpu "$f"; done
fi
want build && build_wait
if want e2bcheck && [[ " $E2B_DEVICES " == *" cuda "* ]] && [ "$built" = 1 ]; then
	for f in "${e2b_fx[@]}"; do e2b_run cuda "$f"; done
fi

small_wait

# 5. Meanwhile: the CUDA harness of the towers, and the tiny fixtures (seconds each).
if want tower && [ "$built" = 1 ]; then
	step tower_check 120 "$lib/tower_check"
	say "tower_check: exit $? ($(tail -1 "$last"))"
	grep -E "FAIL|ERROR" "$last" | head -10 | tee -a "$sum"
fi
verdict_line() { # the last "N passed, M failed" of a file, or what it ended with
	local l
	l=$(grep -E "^[0-9]+ passed, [0-9]+ failed" "$1" | tail -1)
	[ -n "$l" ] && echo "$l" || echo "no summary line: $(grep -v ALSA "$1" | tail -1 | cut -c1-160)"
}
if want tiny; then
	# the decoder's, then the towers' (the plain-Go tower, then its "ops." on the device)
	for f in testdata/gemma4-synthetic-tiny.tar.gz testdata/gemma4-synthetic-tiny-moe.tar.gz testdata/gemma4-synthetic-tiny-f64.tar.gz \
		testdata/gemma4-synthetic-vision.tar.gz testdata/gemma4-synthetic-audio.tar.gz; do
		for dev in cpu cuda; do
			[ "$dev" = cuda ] && [ "$built" != 1 ] && { say "verify-fixture --device cuda $(basename "$f"): no library, skipped"; continue; }
			s=$(date +%s)
			step "verify-fixture --device $dev $(basename "$f")" 120 "$bin/verdict" verify-fixture --device "$dev" "$f"
			rc=$?
			say "verify-fixture --device $dev $(basename "$f" .tar.gz): exit $rc in $(($(date +%s) - s)) s: $(verdict_line "$last")"
			grep -E " FAIL" "$last" | head -5 | cut -c1-160 | tee -a "$sum"
		done
	done
fi

# 6. The E2B checks' results.
if [ ${#e2b_pids[@]} -gt 0 ]; then
	wait "${e2b_pids[@]}" 2>/dev/null
	for r in "$work"/verify-*.rc; do
		[ -f "$r" ] || continue
		t=${r%.rc}.txt
		read -r rc secs <"$r"
		printf '\n==== %s (exit %s in %s s)\n' "$(basename "$t" .txt)" "$rc" "$secs" >>"$log"
		grep -v ALSA "$t" >>"$log"
		say "$(basename "$t" .txt | sed 's/^verify-/verify-fixture --device /; s/-gemma4/ gemma4/'): exit $rc in $secs s: $(verdict_line "$t")"
		grep -E " FAIL" "$t" | head -8 | cut -c1-160 | tee -a "$sum"
		grep -E "^(decoder\.)?(logits_at|hidden_states|greedy_8) " "$t" | cut -c1-160 | tee -a "$sum"
	done
fi
[ -n "$build_pid" ] && build_wait

say ""
say "Not run here (no Go), to run where Go is, after copying the files back:"
say "  testdata/gemma4-preprocess.tar.gz -> go test -v -run 'TestPreprocessGoldens|TestAudioFeatureGoldens' ./engine/gemma4/"
say "  gemma4-catalog.tar.gz, unpacked into engine/gemma4/testdata/ -> go test -v -run TestCatalogOnGemma4 ./engine/gemma4/"
say "  testdata/gemma4-synthetic-multimodal-bidi.tar.gz -> go test -v -run TestMultimodalBidirectionalFixture ./engine/gemma4/"
say "  the e2b pair: go test -run 'TestRecipeOnlyFixture|TestLogitsAtFixture' ./engine/gemma4/ covers its layout on the tiny fixtures;"
say "  verify-fixture on it needs ~20 GB of memory and minutes of one core (the plain-Go reference)"
say "total $(now) s"
rm -rf "$work"
