package cli

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"verdict/engine/convert"
)

// verify-gguf checks GGUF files against the checkpoint they were made from
// (the logits of one token sequence, both read as float32), and writes the
// text decoder of a model folder as the safetensors checkpoint llama.cpp's
// converter takes (build/gguf-check.sh runs both).
func verifyGGUFCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("verify-gguf", stderr)
	ref := fs.String("ref", "", "the Hugging Face checkpoint folder the GGUF files were converted from")
	write := fs.String("write-checkpoint", "", "write the text decoder of the -from folder here as model.safetensors and config.json, and stop")
	from := fs.String("from", "", "with -write-checkpoint or -write-gguf: a model folder (checkpoint or synthetic recipe), synthetic-deep (llama.cpp's fixed gemma3n shape, small), synthetic-wide (Gemma's vocabulary, rows of 256), synthetic-small (rows of 256, vocabulary 320) or synthetic-micro (hidden size 64)")
	dtype := fs.String("dtype", "f32", "with -write-checkpoint: f32 or bf16")
	writeGG := fs.String("write-gguf", "", "write the text decoder of -from (also synthetic-e2b or synthetic-e4b) as the gemma3n GGUF file llama.cpp's converter and quantiser make, here, and stop")
	ggType := fs.String("type", "f16", "with -write-gguf: f32, f16, bf16, q8_0 (as convert_hf_to_gguf.py's --outtype), q4_0 or q4_k (as llama-quantize makes them from the F16 file)")
	tokPath := fs.String("tokenizer", "", "with -write-gguf, for a model of Gemma's vocabulary: Gemma's tokenizer.json (default: found as for any model)")
	ids := fs.String("ids", "2,105,2364,107,6190,9999,1,262143", "comma-separated token ids to run")
	tol := fs.Float64("tol", -1, "fail a file whose max |logit error| is above this (default: 0 for all-F32 files, no limit otherwise)")
	device := addDeviceFlag(fs)
	checkWeights := fs.Bool("weights", false, "also compare every tensor with the reference's: F32 bit for bit, F16 and BF16 within their rounding, a quantisation's RMS error within 1.15 times that of rounding to its levels")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: verdict verify-gguf -ref DIR [-tol X] [-weights] FILE.gguf...\n       verdict verify-gguf -write-checkpoint DIR -from MODELDIR [-dtype f32|bf16]\n       verdict verify-gguf -write-gguf FILE.gguf -from MODELDIR [-type f32|f16|bf16|q8_0|q4_0|q4_k] [-tokenizer tokenizer.json]")
		fs.PrintDefaults()
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	if *writeGG != "" {
		if *from == "" || fs.NArg() != 0 || *write != "" {
			return usageErr("-write-gguf needs -from, no -write-checkpoint and no files")
		}
		return writeGGUF(*from, *writeGG, *ggType, *tokPath, stdout)
	}
	if *write != "" {
		if *from == "" || fs.NArg() != 0 {
			return usageErr("-write-checkpoint needs -from and no files")
		}
		return writeCheckpoint(*from, *write, *dtype, stdout)
	}
	if *ref == "" || fs.NArg() == 0 {
		return usageErr("want -ref DIR and at least one GGUF file")
	}
	var seq []int32
	for _, s := range strings.Split(*ids, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32)
		if err != nil {
			return usageErr("-ids: %v", err)
		}
		seq = append(seq, int32(v))
	}
	be, err := openDevice(device, stderr)
	if err != nil {
		return err
	}
	want, _, err := convert.Logits(ctx, *ref, be, seq)
	if err != nil {
		return err
	}
	var refStore *convert.Reference
	if *checkWeights {
		if refStore, err = convert.OpenReference(*ref); err != nil {
			return err
		}
		defer refStore.Close()
	}
	failed := 0
	for _, path := range fs.Args() {
		// A file that cannot be read is reported and the others checked.
		bad := func(err error) {
			fmt.Fprintf(stdout, "%-40s ERROR %v\n", filepath.Base(path), err)
			failed++
		}
		types, allF32, err := convert.GGUFTypes(path)
		if err != nil {
			bad(err)
			continue
		}
		got, vocab, err := convert.Logits(ctx, path, be, seq)
		if err != nil {
			bad(err)
			continue
		}
		if len(got) != len(want) {
			bad(fmt.Errorf("%d logits, the reference has %d (vocabulary %d)", len(got), len(want), vocab))
			continue
		}
		maxErr, maxRef, top := 0.0, 0.0, 0
		V := len(want) / len(seq)
		for i := range want {
			maxErr = max(maxErr, math.Abs(float64(got[i])-float64(want[i])))
			maxRef = max(maxRef, math.Abs(float64(want[i])))
		}
		for p := range seq {
			if argmax(want[p*V:(p+1)*V]) == argmax(got[p*V:(p+1)*V]) {
				top++
			}
		}
		limit := *tol
		if limit < 0 && allF32 {
			limit = 0
		}
		status := "PASS"
		if math.IsNaN(maxErr) || limit >= 0 && maxErr > limit {
			status, failed = "FAIL", failed+1
		}
		tolStr := "none"
		if limit >= 0 {
			tolStr = strconv.FormatFloat(limit, 'g', -1, 64)
		}
		fmt.Fprintf(stdout, "%-40s max_err=%-10.4g max_ref=%-8.4g top1=%d/%d tol=%-8s %s  [%s]\n", filepath.Base(path), maxErr, maxRef, top, len(seq), tolStr, status, types)
		if refStore != nil {
			line, ok, err := refStore.Compare(path)
			if err != nil {
				bad(err)
				continue
			}
			status := "PASS"
			if !ok {
				status, failed = "FAIL", failed+1
			}
			fmt.Fprintf(stdout, "%-40s weights %s  %s\n", "", status, line)
		}
	}
	if failed > 0 {
		return errChecksFailed
	}
	return nil
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
