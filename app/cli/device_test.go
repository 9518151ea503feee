package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
)

// --device picks the backend; without a CUDA library, cuda is an error
// naming the missing library and auto runs on the CPU and says why.
func TestDeviceFlag(t *testing.T) {
	testmodel.Tokenizer(t)
	t.Setenv("VERDICT_CUDA_LIB", filepath.Join(t.TempDir(), "libverdict_cuda.so"))
	fix := filepath.Join("..", "..", "testdata", "gemma3n-micro-bf16.tar.gz")
	for _, tc := range []struct {
		device      string
		code        int
		out, stderr string
	}{
		{"cpu", 0, "1 passed, 0 failed", ""},
		{"auto", 0, "1 passed, 0 failed", "using the CPU: cuda: no usable libverdict_cuda.so"},
		{"cuda", 2, "", "no usable libverdict_cuda.so"},
		{"tpu", 2, "", "unknown device"},
	} {
		code, out, errOut := run("verify-fixture", "--device", tc.device, fix)
		if code != tc.code || !strings.Contains(out, tc.out) || !strings.Contains(errOut, tc.stderr) {
			t.Errorf("--device %s: exit %d, stdout %q, stderr %q", tc.device, code, out, errOut)
		}
	}
}

// Every command that runs a model takes --device (catalog and verify-gguf
// had none).
func TestEveryModelCommandTakesDevice(t *testing.T) {
	for _, c := range []string{"verify-fixture", "verify-gguf", "score", "score-file", "calibrate", "train-head",
		"generate", "catalog", "bench"} {
		_, out, errOut := run(c, "--help")
		if !strings.Contains(out+errOut, "-device") {
			t.Errorf("%s --help lists no --device", c)
		}
	}
}
