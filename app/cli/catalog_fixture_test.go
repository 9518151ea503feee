package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
)

// TestCatalogFixtureCommand: verdict catalog --fixture checks the decoder
// against catalog-tiny.json (every gate with cases, none failed, a JSON
// line each with --json); a fixture changed in one recorded token fails
// (exit 1); other request flags and q4 weights are usage errors.
func TestCatalogFixtureCommand(t *testing.T) {
	testmodel.Tokenizer(t)
	path := testmodel.Testdata("catalog-tiny.json")
	code, out, errOut := run("catalog", "--fixture", path, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 {
		t.Fatalf("%d gate lines, want 6:\n%s", len(lines), out)
	}
	for _, l := range lines {
		var g struct {
			Gate           string `json:"gate"`
			Passed, Failed int
		}
		if err := json.Unmarshal([]byte(l), &g); err != nil || g.Passed == 0 || g.Failed != 0 {
			t.Errorf("gate line %q (%v)", l, err)
		}
	}
	if !strings.Contains(out, "the CPU decoder's names = the device's on every case of catalog-tiny.json") {
		t.Errorf("no CPU = device gate in\n%s", out)
	}

	var f map[string]any
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	cases := f["cases"].([]any)
	c := cases[4].(map[string]any)
	c["expected_tokens"].([]any)[0] = 3.0
	f["cases"], f["prefix_catalog"].(map[string]any)["cases"] = []any{c}, []any{}
	bad := filepath.Join(t.TempDir(), "bad.json")
	b, _ := json.Marshal(f)
	if err := os.WriteFile(bad, b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = run("catalog", "--fixture", bad)
	if code != 1 || !strings.Contains(errOut, "catalog fixture:") || !strings.Contains(out, "first: catalog case 0: tokens") {
		t.Errorf("a changed fixture: exit %d\n%s\n%s", code, out, errOut)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--fixture", path, "--k", "2"}, "--fixture takes only"},
		{[]string{"--fixture", path, "--catalog", path}, "--fixture takes only"},
		{[]string{"--fixture", path, "--weights", "q4"}, "--weights q4 cannot match"},
		{[]string{"--fixture", path, "extra"}, "--fixture takes only"},
	} {
		code, _, errOut := run(append([]string{"catalog"}, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}
