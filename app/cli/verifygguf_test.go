package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
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
	files := map[string]string{}
	for _, typ := range []string{"F32", "Q4_0"} {
		files[typ] = filepath.Join(t.TempDir(), typ+".gguf")
		testmodel.WriteGGUF(t, ck, files[typ], typ)
	}
	code, out, errOut = run("verify-gguf", "-ref", ck, files["F32"], files["Q4_0"])
	if code != 0 || strings.Count(out, "PASS") != 2 || !strings.Contains(out, "F32.gguf") || !strings.Contains(out, "max_err=0 ") {
		t.Errorf("exit %d\n%s%s", code, out, errOut)
	}
	t.Log("\n" + out)
	code, out, _ = run("verify-gguf", "-ref", ck, "-tol", "1e-3", files["Q4_0"])
	if code != 1 || !strings.Contains(out, "FAIL") {
		t.Errorf("Q4_0 at tolerance 1e-3: exit %d\n%s", code, out)
	}
	// -weights: every tensor against the checkpoint's; a file whose
	// tensor holds other values fails, one that cannot be read is reported
	// and the others still checked.
	code, out, errOut = run("verify-gguf", "-weights", "-ref", ck, files["F32"], files["Q4_0"])
	if code != 0 || strings.Count(out, "weights PASS") != 2 || !strings.Contains(out, "F32 ×") || !strings.Contains(out, "Q4_0 ") {
		t.Errorf("-weights: exit %d\n%s%s", code, out, errOut)
	}
	zeroed := filepath.Join(t.TempDir(), "zeroed.gguf")
	testmodel.WriteGGUF(t, ck, zeroed, "Q4_0", "blk.1.ffn_down.weight")
	notGGUF := filepath.Join(t.TempDir(), "not.gguf")
	os.WriteFile(notGGUF, []byte("not a GGUF file"), 0o644)
	code, out, _ = run("verify-gguf", "-weights", "-ref", ck, zeroed, notGGUF, files["F32"])
	if code != 1 || !strings.Contains(out, "weights FAIL") || !strings.Contains(out, "layers.1.mlp.down_proj.weight (Q4_0: RMS error") ||
		!strings.Contains(out, "not.gguf") || !strings.Contains(out, "ERROR") || strings.Count(out, "weights PASS") != 1 {
		t.Errorf("a zeroed tensor, a file that is not GGUF, a good file: exit %d\n%s", code, out)
	}
	t.Log("\n" + out)
	if code, _, _ = run("verify-gguf", "-ref", ck); code != 2 {
		t.Errorf("no files: exit %d, want 2", code)
	}
}
