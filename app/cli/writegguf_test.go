package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"verdict/engine/convert"
)

// writeGGUFFile runs verify-gguf -write-gguf and returns the file's path.
func writeGGUFFile(t *testing.T, from, typ string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), from+"-"+typ+".gguf")
	code, out, errOut := run("verify-gguf", "-write-gguf", p, "-from", from, "-type", typ)
	if code != 0 || !strings.Contains(out, "wrote ") {
		t.Fatalf("-write-gguf %s %s: exit %d %q %q", from, typ, code, out, errOut)
	}
	return p
}

// -write-gguf of the small presets in every type reads back through our
// GGUF reader as the preset's own values: F32 bit for bit, F16 and BF16
// within their rounding, each quantisation within its rounding bound (the
// -weights check), and the per-layer table's padding rows zero; the F32
// file's logits equal the checkpoint's exactly.
func TestWriteGGUFReadsBack(t *testing.T) {
	for _, from := range []string{"synthetic-micro", "synthetic-small"} {
		ck := filepath.Join(t.TempDir(), "ck")
		if code, out, errOut := run("verify-gguf", "-write-checkpoint", ck, "-from", from); code != 0 {
			t.Fatalf("%s: write-checkpoint: exit %d %q %q", from, code, out, errOut)
		}
		ref, err := convert.OpenReference(ck)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			typ   string
			types []string // the types the file must hold
		}{
			{"f32", []string{"F32"}},
			{"f16", []string{"F16", "F32"}},
			{"bf16", []string{"BF16", "F32"}},
			{"q8_0", []string{"Q8_0", "F32"}},
			{"q4_0", []string{"Q4_0", "Q6_K", "F16", "F32"}},
			{"q4_k", []string{"Q4_K", "F16", "F32"}},
		} {
			p := writeGGUFFile(t, from, tc.typ)
			line, ok, err := ref.Compare(p)
			if err != nil || !ok {
				t.Errorf("%s %s: %v %s", from, tc.typ, err, line)
			}
			counts, _, err := convert.GGUFTypes(p)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range tc.types {
				if !strings.Contains(counts, want+"×") {
					t.Errorf("%s %s: types %s, want %s among them", from, tc.typ, counts, want)
				}
			}
			if tc.typ == "f32" {
				code, out, errOut := run("verify-gguf", "-ref", ck, "-ids", "2,105,200,107,45,255,1,17", p)
				if code != 0 || !strings.Contains(out, "max_err=0 ") {
					t.Errorf("%s f32 logits: exit %d\n%s%s", from, code, out, errOut)
				}
			}
			t.Logf("%s %s: %s [%s]", from, tc.typ, line, counts)
		}
		ref.Close()
	}
}

// -write-gguf refuses what it cannot write, naming the problem.
func TestWriteGGUFErrors(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x.gguf")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-write-gguf", out}, 2, "-write-gguf needs -from"},
		{[]string{"-write-gguf", out, "-from", "synthetic-micro", "-type", "q5_k"}, 2, `-type "q5_k"`},
		{[]string{"-write-gguf", out, "-from", "no-such-model"}, 1, "not a preset"},
		{[]string{"-write-gguf", out, "-from", "synthetic-wide", "-tokenizer", filepath.Join(t.TempDir(), "none.json")}, 1, "needs Gemma's tokenizer.json"},
	} {
		code, stdout, stderr := run(append([]string{"verify-gguf"}, tc.args...)...)
		if code != tc.code || !strings.Contains(stdout+stderr, tc.want) {
			t.Errorf("%v: exit %d %q %q, want %d and %q", tc.args, code, stdout, stderr, tc.code, tc.want)
		}
	}
}
