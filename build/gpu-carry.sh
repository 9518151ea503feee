#!/usr/bin/env bash
# Sourced by the GPU scripts (gpu-check, gpu-compare, gpu-perf, gpu-serve):
#
#   carry_bin LIB   puts the carried binary (CARRY/verdict.xz) and LIB's
#                   libverdict_cuda.so into bin=/tmp/verdict-bin, with the
#                   shared libraries CARRY holds (plain or xz-compressed,
#                   name.so.N.xz), and exports VERDICT_TOKENIZER (from
#                   CARRY/tokenizer.json.xz), LD_LIBRARY_PATH (bin, then
#                   CARRY) and VERDICT_PACKED_CACHE.
carry_bin() {
	bin=/tmp/verdict-bin
	mkdir -p "$bin"
	xz -dc "$CARRY/verdict.xz" >"$bin/verdict" && chmod +x "$bin/verdict"
	cp "$1/libverdict_cuda.so" "$bin/"
	local z
	for z in "$CARRY"/*.so*; do
		case $z in
		*.xz) xz -dc "$z" >"$bin/$(basename "${z%.xz}")" ;;
		*) [ -f "$z" ] && cp "$z" "$bin/" ;;
		esac
	done
	xz -dc "$CARRY/tokenizer.json.xz" >/tmp/tokenizer.json
	export VERDICT_TOKENIZER=/tmp/tokenizer.json
	export LD_LIBRARY_PATH=$bin:$CARRY${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	export VERDICT_PACKED_CACHE=/tmp/verdict-packed
}
