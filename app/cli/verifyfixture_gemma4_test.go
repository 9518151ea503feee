package cli

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestVerifyFixtureGemma4: verify-fixture runs the Gemma 4 fixtures' checks
// (meta.json family "gemma4"): the reference decoder's (15, and 17 with the
// router's outputs), then the decoder's through the model interface on the
// CPU (14: all but the per-layer inputs and router outputs); one PASS line
// a check and the count, exit 0.
func TestVerifyFixtureGemma4(t *testing.T) {
	for _, tc := range []struct {
		file   string
		checks int
	}{
		{"gemma4-synthetic-tiny.tar.gz", 15 + 14},
		{"gemma4-synthetic-tiny-moe.tar.gz", 17 + 14},
		{"gemma4-synthetic-tiny-f64.tar.gz", 15 + 14},
	} {
		code, out, errOut := run("verify-fixture", filepath.Join("..", "..", "testdata", tc.file))
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if code != 0 || len(lines) != tc.checks+1 || lines[tc.checks] != fmt.Sprintf("%d passed, 0 failed", tc.checks) {
			t.Errorf("%s: exit %d\n%s%s", tc.file, code, out, errOut)
			continue
		}
		for _, l := range lines[:tc.checks] {
			if !strings.Contains(l, " PASS") {
				t.Errorf("%s: %s", tc.file, l)
			}
		}
	}
}
