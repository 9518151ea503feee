package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"verdict/engine/convert"
)

// writeGGUF writes the text decoder of from (a -from preset, a synthetic
// full-size shape or a model folder) as the gemma3n GGUF llama.cpp's
// converter (f32, f16, bf16, q8_0) or quantiser (q4_0, q4_k) would make of
// it, streamed to out (see convert.WriteGGUF), and says what it wrote.
func writeGGUF(from, out, typ, tokPath string, stdout io.Writer) error {
	if types := convert.FileTypes(); !slices.Contains(types, typ) {
		return usageErr("-type %q: want one of %s", typ, strings.Join(types, ", "))
	}
	w, err := convert.WriteGGUF(from, out, typ, tokPath)
	if err != nil {
		return err
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(w.Types)) {
		parts = append(parts, fmt.Sprintf("%s×%d", k, w.Types[k]))
	}
	fmt.Fprintf(stdout, "wrote %s: %d tensors [%s], %d bytes in %.1fs (%.0f MB/s)\n", out, w.Tensors, strings.Join(parts, ", "), w.Bytes, w.Seconds, float64(w.Bytes)/1e6/max(w.Seconds, 1e-9))
	for _, d := range w.Differences {
		fmt.Fprintf(stdout, "note: llama.cpp will not run this model as written: %s\n", d)
	}
	return nil
}

// writeCheckpoint writes the text decoder of the model folder from as the
// checkpoint llama.cpp's converter takes, in dir (see
// convert.WriteCheckpoint), and says what it wrote.
func writeCheckpoint(from, dir, dtype string, stdout io.Writer) error {
	if dtype != "f32" && dtype != "bf16" {
		return usageErr("-dtype %q: want f32 or bf16", dtype)
	}
	n, size, err := convert.WriteCheckpoint(from, dir, dtype)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %d tensors, %d bytes of %s\n", dir, n, size, dtype)
	return nil
}
