package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/gemma3n"
	"verdict/engine/gemma3n/gguf"
	"verdict/engine/weights"
	"verdict/engine/weights/ggufwrite"
)

// verify-gguf: the checkpoint -write-checkpoint makes opens as the
// reference, an F32 GGUF of it passes at tolerance 0, a Q4_0 one is
// measured and fails a tolerance below its error.
func TestVerifyGGUF(t *testing.T) {
	tiny := testmodel.Dir(t, "gemma3n-synthetic-tiny.tar.gz")
	ck := filepath.Join(t.TempDir(), "ck")
	code, out, errOut := run("verify-gguf", "-write-checkpoint", ck, "-from", tiny)
	if code != 0 || !strings.Contains(out, "wrote ") {
		t.Fatalf("write-checkpoint: exit %d %q %q", code, out, errOut)
	}
	st, err := weights.Open(ck)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	js, _ := os.ReadFile(filepath.Join(ck, "config.json"))
	cfg, _, err := gemma3n.ParseConfig(js)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := st.Info("model.language_model.rotary_emb.full_attention_inv_freq"); ok {
		t.Error("the checkpoint holds a buffer")
	}
	files := map[weights.GGMLType]string{}
	for _, typ := range []weights.GGMLType{weights.GGMLF32, weights.GGMLQ4_0} {
		kvs, ts, err := gguf.Layout(st, "model.language_model.", cfg, gguf.LayoutOptions{Type: typ, PadPLE: true})
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), typ.String()+".gguf")
		f, _ := os.Create(p)
		if err := ggufwrite.Write(f, ggufwrite.Options{}, kvs, ts); err != nil {
			t.Fatal(err)
		}
		f.Close()
		files[typ] = p
	}
	code, out, errOut = run("verify-gguf", "-ref", ck, files[weights.GGMLF32], files[weights.GGMLQ4_0])
	if code != 0 || strings.Count(out, "PASS") != 2 || !strings.Contains(out, "F32.gguf") || !strings.Contains(out, "max_err=0 ") {
		t.Errorf("exit %d\n%s%s", code, out, errOut)
	}
	t.Log("\n" + out)
	code, out, _ = run("verify-gguf", "-ref", ck, "-tol", "1e-3", files[weights.GGMLQ4_0])
	if code != 1 || !strings.Contains(out, "FAIL") {
		t.Errorf("Q4_0 at tolerance 1e-3: exit %d\n%s", code, out)
	}
	// -weights: every tensor against the checkpoint's; a file whose
	// tensor holds other values fails, one that cannot be read is reported
	// and the others still checked.
	code, out, errOut = run("verify-gguf", "-weights", "-ref", ck, files[weights.GGMLF32], files[weights.GGMLQ4_0])
	if code != 0 || strings.Count(out, "weights PASS") != 2 || !strings.Contains(out, "F32 ×") || !strings.Contains(out, "Q4_0 ") {
		t.Errorf("-weights: exit %d\n%s%s", code, out, errOut)
	}
	kvs, ts, err := gguf.Layout(st, "model.language_model.", cfg, gguf.LayoutOptions{Type: weights.GGMLQ4_0, PadPLE: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range ts {
		if ts[i].Name == "blk.1.ffn_down.weight" {
			other, err := ggufwrite.Encode(weights.GGMLQ4_0, make([]float32, len(ts[i].Data)/18*32))
			if err != nil {
				t.Fatal(err)
			}
			ts[i].Data = other // zeros
		}
	}
	zeroed := filepath.Join(t.TempDir(), "zeroed.gguf")
	f, _ := os.Create(zeroed)
	if err := ggufwrite.Write(f, ggufwrite.Options{}, kvs, ts); err != nil {
		t.Fatal(err)
	}
	f.Close()
	notGGUF := filepath.Join(t.TempDir(), "not.gguf")
	os.WriteFile(notGGUF, []byte("not a GGUF file"), 0o644)
	code, out, _ = run("verify-gguf", "-weights", "-ref", ck, zeroed, notGGUF, files[weights.GGMLF32])
	if code != 1 || !strings.Contains(out, "weights FAIL") || !strings.Contains(out, "layers.1.mlp.down_proj.weight (Q4_0: RMS error") ||
		!strings.Contains(out, "not.gguf") || !strings.Contains(out, "ERROR") || strings.Count(out, "weights PASS") != 1 {
		t.Errorf("a zeroed tensor, a file that is not GGUF, a good file: exit %d\n%s", code, out)
	}
	t.Log("\n" + out)
	if code, _, _ = run("verify-gguf", "-ref", ck); code != 2 {
		t.Errorf("no files: exit %d, want 2", code)
	}
}
