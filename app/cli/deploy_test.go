package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
)

// foldedArgs returns the shell scripts of the manifest's containers: each
// `args: - >-` block folded into one line.
func foldedArgs(yaml string) []string {
	var out []string
	lines := strings.Split(yaml, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "- >-" {
			continue
		}
		indent := len(lines[i]) - len(strings.TrimLeft(lines[i], " "))
		var parts []string
		for i++; i < len(lines) && len(lines[i])-len(strings.TrimLeft(lines[i], " ")) > indent; i++ {
			parts = append(parts, strings.TrimSpace(lines[i]))
		}
		out = append(out, strings.Join(parts, " "))
		i--
	}
	return out
}

// TestScoreJobManifest runs the commands of deploy/k8s/score-job.yaml here,
// on the built-in model: every index of the Indexed Job, then the merge
// Job, whose output must equal one run over the whole file.
func TestScoreJobManifest(t *testing.T) {
	testmodel.Tokenizer(t)
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "k8s", "score-job.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	yaml := string(b)
	for _, want := range []string{"completionMode: Indexed", "backoffLimitPerIndex:", "readOnly: true", "--resume"} {
		if !strings.Contains(yaml, want) {
			t.Errorf("the manifest lacks %q", want)
		}
	}
	n := regexp.MustCompile(`(?m)^  completions: (\d+)$`).FindStringSubmatch(yaml)
	par := regexp.MustCompile(`(?m)^  parallelism: (\d+)$`).FindStringSubmatch(yaml)
	shards := regexp.MustCompile(`name: SHARDS\s+value: "(\d+)"`).FindStringSubmatch(yaml)
	wait := regexp.MustCompile(`-eq (\d+)`).FindStringSubmatch(yaml)
	if n == nil || par == nil || shards == nil || wait == nil || n[1] != par[1] || n[1] != shards[1] || n[1] != wait[1] {
		t.Fatalf("completions %v, parallelism %v, SHARDS %v and the merge's count %v must be one number", n, par, shards, wait)
	}
	scripts := foldedArgs(yaml)
	if len(scripts) != 2 {
		t.Fatalf("want the score and the merge scripts, got %q", scripts)
	}

	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	os.MkdirAll(data, 0o755)
	in := writeInput(t, data)
	schema, _ := os.ReadFile(ticketSchema)
	os.WriteFile(filepath.Join(data, "schema.json"), schema, 0o644)
	local := func(s string) string {
		s = strings.ReplaceAll(s, "/models/gemma-3n-E2B-it", "builtin")
		return strings.ReplaceAll(s, "/data", data)
	}
	// exec runs one script's commands up to its first ||: mkdir, test and
	// verdict (globs expanded as the shell would).
	exec := func(script string) {
		t.Helper()
		script, _, _ = strings.Cut(script, "||")
		for _, cmd := range strings.Split(script, "&&") {
			f := strings.Fields(cmd)
			if len(f) > 0 && f[0] == "exec" {
				f = f[1:]
			}
			switch {
			case len(f) == 0:
				t.Fatalf("an empty command in %q", script)
			case f[0] == "mkdir":
				os.MkdirAll(f[len(f)-1], 0o755)
			case f[0] == "test": // the merge's wait for every log: checked below
			case f[0] == "verdict":
				var args []string
				for _, a := range f[1:] {
					if strings.Contains(a, "*") {
						m, _ := filepath.Glob(a)
						args = append(args, m...)
					} else {
						args = append(args, a)
					}
				}
				if code, out, errOut := run(args...); code != 0 {
					t.Fatalf("verdict %v: exit %d\n%s%s", args, code, out, errOut)
				}
			default:
				t.Fatalf("the manifest runs %q, which this test does not know", f[0])
			}
		}
	}
	count, _ := strconv.Atoi(n[1])
	for i := 0; i < count; i++ {
		s := strings.ReplaceAll(scripts[0], "${JOB_COMPLETION_INDEX}", strconv.Itoa(i))
		exec(local(strings.ReplaceAll(s, "${SHARDS}", shards[1])))
	}
	logs, _ := filepath.Glob(filepath.Join(data, "out", "out-*.jsonl"))
	if len(logs) != count {
		t.Fatalf("%d logs for %d shards", len(logs), count)
	}
	exec(local(scripts[1]))

	single := filepath.Join(dir, "single.jsonl")
	if code, _, errOut := run("score-file", "--model", "builtin", "--schema", ticketSchema, "--input", in, "--output", single); code != 0 {
		t.Fatal(errOut)
	}
	if got, want := stable(t, filepath.Join(data, "all.jsonl")), stable(t, single); got != want {
		t.Errorf("the Job's merged output:\n%s\nwant (one run)\n%s", got, want)
	}
	if csv, err := os.ReadFile(filepath.Join(data, "all.csv")); err != nil || strings.Count(string(csv), "\n") != 12 {
		t.Errorf("all.csv: %v, %d lines", err, strings.Count(string(csv), "\n"))
	}
}
