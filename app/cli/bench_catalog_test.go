package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
)

// TestBenchCatalogCommand: verdict bench catalog, made tiny by its flags,
// prints a JSON report per model with the sweep at each batch size and the
// prefill comparison; bad sizes are usage errors.
func TestBenchCatalogCommand(t *testing.T) {
	testmodel.Tokenizer(t)
	code, out, errOut := run("bench", "catalog", "--model", "builtin", "--requests", "1", "--sweep-requests", "5",
		"--batches", "1,2", "--prefill-requests", "2", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var reps []struct {
		Model   string `json:"model"`
		Device  string `json:"device"`
		Batches []struct {
			Batch     int     `json:"batch"`
			Requests  int     `json:"requests"`
			PerSecond float64 `json:"requests_per_second"`
			MS        float64 `json:"ms_per_token"`
			Same      bool    `json:"same_as_batch_1"`
		} `json:"batches"`
		Prefill *struct {
			Prompts int  `json:"prompts"`
			Same    bool `json:"same_states"`
		} `json:"prefill"`
	}
	if err := json.Unmarshal([]byte(out), &reps); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(reps) != 1 || reps[0].Model != "builtin" || reps[0].Device != "cpu" || len(reps[0].Batches) != 2 {
		t.Fatalf("%s", out)
	}
	for i, b := range reps[0].Batches {
		if b.Batch != []int{1, 2}[i] || b.Requests != 5 || b.PerSecond <= 0 || b.MS <= 0 || !b.Same {
			t.Errorf("batch %d: %+v", i, b)
		}
	}
	if p := reps[0].Prefill; p == nil || p.Prompts != 2 || !p.Same {
		t.Errorf("prefill: %+v", p)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--sweep-requests", "0"}, "--sweep-requests 0"},
		{[]string{"--sweep-requests", "3", "--prefill-requests", "4"}, "--prefill-requests 4"},
		{[]string{"--batches", ","}, "no batch sizes"},
		{[]string{"--batches", "1,300"}, `"300" is not a batch size`},
		{[]string{"--requests", "9"}, "--requests 9"},
	} {
		code, _, errOut := run(append([]string{"bench", "catalog", "--model", "builtin"}, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}
