#!/usr/bin/env bash
# llamacpp-peer.sh: llama.cpp's CUDA build as the peer of verdict's GPU
# benchmark, on the synthetic Gemma 3n models of E2B's and E4B's shape that
# `verdict bench --model synthetic-e2b` runs, written as GGUF by
# `verdict verify-gguf -write-gguf`.
#
#   LLAMA_SRC=llama.cpp.tar.xz OUT=DIR bash build/llamacpp-peer.sh build
#   VERDICT_BIN=./verdict TOKENIZER=tokenizer.json OUT=DIR bash build/llamacpp-peer.sh bench
#
# Steps (each fits one call of 600 s on an H200 machine of 16 cores):
#   build  unpack LLAMA_SRC (a .tar.xz of llama.cpp's source, one top folder)
#          and build llama-bench and llama-batched-bench with CUDA (Release,
#          CUDA_ARCH, default 90) into .llama-build/ in the repository (git
#          ignored), so that a later call on the same machine finds them;
#          prints the seconds it took (262 s on the H200 machine's 16 cores,
#          CUDA 13.0, with the 3.3 MB tarball of llama.cpp b85833e9). A second
#          call with the same tarball only rebuilds what changed.
#   bench  for each of MODELS (default "e2b e4b") and TYPES (default
#          "f16 q4_0"; also q4_k, q8_0, bf16, f32): write the GGUF into
#          .llama-build/gguf/ (not OUT), llama-bench -ngl 99 -p 512 -n 128
#          -r 3 with flash attention off and on (pp512 and tg128 are separate
#          tests), llama-batched-bench -npp 512 -ntg 128 -npl 1,8 with flash
#          attention off and on; then delete the GGUF (KEEP_GGUF=1 keeps it).
#          Results (six files): $OUT/llamacpp/bench.jsonl (llama-bench's
#          JSON lines, with model and type), batched.jsonl (batched-bench's,
#          with model, type and fa), bench.txt (both as text), write.txt,
#          gpu.txt and summary.md, one table of all. The build step leaves
#          build.txt (its log) and build-info.txt.
#   all    build, then bench.
#   pack   (on any machine; no CUDA) repack LLAMA_SRC without what the two
#          benchmarks never build (the multimodal tools and their vendored
#          audio and image code, the server, the UI, the CLI, TTS, and
#          backends for other hardware) into PACKED, a .tar.xz the build
#          step takes as it is: 1.6 MB against 3.6 for llama.cpp d32676d,
#          so that it fits the GPU machine's 64 MB upload beside the tree.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
work=${LLAMA_WORK:-$root/.llama-build}
CUDA_ARCH=${CUDA_ARCH:-90}
MODELS=${MODELS:-e2b e4b}
TYPES=${TYPES:-f16 q4_0}
LLAMA_FA=${LLAMA_FA:-0,1}      # llama-bench's flash attention settings
LLAMA_REPS=${LLAMA_REPS:-3}    # llama-bench's repetitions
BATCHED_FA=${BATCHED_FA:-off on} # llama-batched-bench's

die() {
	echo "llamacpp-peer: $*" >&2
	exit 2
}

need_var() { # name, what it is
	[ -n "${!1:-}" ] || die "$1 is not set: $2"
}

need_file() { # name, what it is
	need_var "$1" "$2"
	[ -f "${!1}" ] || die "$1=${!1}: no such file ($2)"
}

need_tool() {
	command -v "$1" >/dev/null 2>&1 || die "$1 is not on PATH ($2)"
}

out_dir() {
	need_var OUT "the folder results are written to"
	mkdir -p "$OUT/llamacpp"
	res=$(cd "$OUT/llamacpp" && pwd)
}

step_build() {
	need_file LLAMA_SRC "a .tar.xz of llama.cpp's source"
	need_tool cmake "the CUDA build needs CMake"
	need_tool nvcc "the CUDA build needs the CUDA toolkit"
	out_dir
	local t0 stamp src
	t0=$(date +%s)
	stamp=$(sha256sum "$LLAMA_SRC" | cut -c1-16)
	src=$work/src-$stamp
	if [ ! -f "$src/CMakeLists.txt" ]; then
		rm -rf "$work"/src-*
		mkdir -p "$src"
		tar -xJf "$LLAMA_SRC" -C "$src" --strip-components=1
	fi
	[ -f "$src/CMakeLists.txt" ] || die "LLAMA_SRC=$LLAMA_SRC holds no CMakeLists.txt under its top folder"
	cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
		-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" -DGGML_NATIVE=ON \
		-DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
		-DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF >"$res/build.txt" 2>&1 ||
		{ tail -30 "$res/build.txt"; die "cmake configure failed (whole log: $res/build.txt)"; }
	cmake --build "$work/build" -j"$(nproc)" --target llama-bench llama-batched-bench >>"$res/build.txt" 2>&1 ||
		{ tail -30 "$res/build.txt"; die "the build failed (whole log: $res/build.txt)"; }
	local secs=$(($(date +%s) - t0))
	{
		echo "llama.cpp source: $(basename "$LLAMA_SRC") sha256 $stamp…"
		nvcc --version | tail -2
		cmake --version | head -1
		echo "CUDA_ARCH=$CUDA_ARCH"
		echo "build seconds: $secs"
	} | tee "$res/build-info.txt"
}

step_bench() {
	need_file VERDICT_BIN "the verdict binary that writes the GGUF files"
	[ -x "$VERDICT_BIN" ] || die "VERDICT_BIN=$VERDICT_BIN is not executable"
	need_file TOKENIZER "Gemma's tokenizer.json (the synthetic E2B and E4B have Gemma's vocabulary)"
	out_dir
	local bin=$work/build/bin
	for b in llama-bench llama-batched-bench; do
		[ -x "$bin/$b" ] || die "$bin/$b is missing: run the build step first"
	done
	need_tool python3 "the summary is made with Python"
	local gg=$work/gguf
	mkdir -p "$gg"
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$res/gpu.txt" 2>&1 || true
	: >"$res/bench.jsonl"
	: >"$res/bench.txt"
	: >"$res/batched.jsonl"
	for m in $MODELS; do
		for t in $TYPES; do
			local f=$gg/synthetic-$m-$t.gguf tag="\"model\": \"$m\", \"type\": \"$t\""
			if [ ! -f "$f" ]; then
				# (libraries carried beside the binary, such as libasound.so.2, are found there)
				LD_LIBRARY_PATH="$(dirname "$VERDICT_BIN")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$VERDICT_BIN" verify-gguf -write-gguf "$f" -from "synthetic-$m" -type "$t" -tokenizer "$TOKENIZER" | tee -a "$res/write.txt"
			fi
			echo "== llama-bench $m $t" | tee -a "$res/bench.txt"
			"$bin/llama-bench" -m "$f" -ngl 99 -p 512 -n 128 -fa "$LLAMA_FA" -r "$LLAMA_REPS" -o jsonl -oe md >"$res/bench-run.jsonl" 2>"$res/bench-run.txt" ||
				{ cat "$res/bench-run.txt"; die "llama-bench failed on $f"; }
			sed "s/^{/{$tag, /" "$res/bench-run.jsonl" >>"$res/bench.jsonl"
			tee -a "$res/bench.txt" <"$res/bench-run.txt"
			for fa in $BATCHED_FA; do
				echo "== llama-batched-bench $m $t fa=$fa" | tee -a "$res/bench.txt"
				"$bin/llama-batched-bench" -m "$f" -ngl 99 -fa "$fa" -c 5120 -b 2048 -ub 512 -npp 512 -ntg 128 -npl 1,8 \
					--output-format jsonl >"$res/bench-run.txt" 2>&1 ||
					{ tail -20 "$res/bench-run.txt"; die "llama-batched-bench failed on $f"; }
				grep '^{' "$res/bench-run.txt" | sed "s/^{/{$tag, \"fa\": \"$fa\", /" >>"$res/batched.jsonl" || true
				grep -E 'batched_bench|^\{' "$res/bench-run.txt" | tee -a "$res/bench.txt" || true
			done
			rm -f "$res/bench-run.jsonl" "$res/bench-run.txt"
			[ "${KEEP_GGUF:-0}" = 1 ] || rm -f "$f"
		done
	done
	python3 - "$res" <<'EOF'
import json, os, sys
res = sys.argv[1]
def lines(name):
    for line in open(os.path.join(res, name)):
        try:
            yield json.loads(line)
        except ValueError:
            pass
tests, batched, order = {}, {}, []
for r in lines("bench.jsonl"):
    key = (r["model"], r["type"])
    if key not in order:
        order.append(key)
    kind = "pp" if r.get("n_prompt", 0) > 0 else "tg"
    tests[key + (int(bool(r.get("flash_attn"))), kind)] = r
for r in lines("batched.jsonl"):
    batched[(r["model"], r["type"], 1 if r["fa"] == "on" else 0, r["pl"])] = r
rows = []
for key in order:
    for fa in (0, 1):
        pp, tg = tests.get(key + (fa, "pp")), tests.get(key + (fa, "tg"))
        if not pp and not tg:
            continue
        b1, b8 = batched.get(key + (fa, 1), {}), batched.get(key + (fa, 8), {})
        size = (pp or tg).get("model_size", 0) / 1e9
        rows.append(["synthetic-%s %s" % key, "%.2f" % size, "on" if fa else "off",
                     "%.0f ± %.0f" % (pp["avg_ts"], pp["stddev_ts"]) if pp else "-",
                     "%.1f ± %.1f" % (tg["avg_ts"], tg["stddev_ts"]) if tg else "-",
                     "%.1f" % b1["speed_tg"] if "speed_tg" in b1 else "-",
                     "%.1f" % b8["speed_tg"] if "speed_tg" in b8 else "-",
                     "%.0f" % b8["speed_pp"] if "speed_pp" in b8 else "-"])
head = ["model", "GB", "flash attn", "pp512 t/s", "tg128 t/s", "batched tg t/s (B=1)", "batched tg t/s (B=8, all seqs)", "batched pp t/s (B=8)"]
with open(os.path.join(res, "summary.md"), "w") as f:
    f.write("| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n")
    for r in rows:
        f.write("| " + " | ".join(r) + " |\n")
print(open(os.path.join(res, "summary.md")).read())
EOF
}

step_pack() {
	need_file LLAMA_SRC "a .tar.xz of llama.cpp's source"
	need_var PACKED "the .tar.xz to write"
	local tmp top
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' RETURN
	tar -xJf "$LLAMA_SRC" -C "$tmp"
	top=$(find "$tmp" -mindepth 1 -maxdepth 1 -type d | head -1)
	[ -f "$top/CMakeLists.txt" ] || die "LLAMA_SRC=$LLAMA_SRC holds no CMakeLists.txt under its top folder"
	rm -rf "$top"/tools/{mtmd,server,ui,cli,tts} "$top"/vendor/{miniaudio,stb} "$top"/ggml/src/ggml-et \
		"$top"/ggml/src/ggml-cpu/spacemit
	for d in mtmd tts cli server ui; do
		sed -i "s|^\([[:space:]]*\)add_subdirectory($d)|\1# add_subdirectory($d): not packed|" "$top/tools/CMakeLists.txt"
	done
	tar -C "$tmp" -cf - "$(basename "$top")" | xz -9 -T0 >"$PACKED"
	echo "llamacpp-peer: $PACKED: $(stat -c %s "$PACKED") bytes (from $(stat -c %s "$LLAMA_SRC"))"
}

case "${1:-}" in
build) step_build ;;
pack) step_pack ;;
bench) step_bench ;;
all)
	step_build
	step_bench
	;;
*) die "usage: bash build/llamacpp-peer.sh build|bench|all|pack (inputs: LLAMA_SRC, PACKED, VERDICT_BIN, TOKENIZER, OUT; CUDA_ARCH, MODELS, TYPES, LLAMA_FA, LLAMA_REPS, BATCHED_FA, KEEP_GGUF)" ;;
esac
