package build

// The layering rule (issue 29), held by TestLayering:
//
//  1. The app — the root command (package verdict), app and everything under
//     it (app/cli, app/api, app/mcpserver, app/server, app/inputs,
//     app/desktop) — imports the engine only through its public faces
//     (engineFaces below): engine/session, the engine as the app sees it,
//     and the engine packages that own one job of the app's end to end and
//     hand it the job's own types (the scorer's schemas and results, the
//     catalog, the prompt, the tokenizer, the model catalog and loader, the
//     datasets, the reports, the decision head, the Hub, the benchmarks, the
//     reference fixtures, the GGUF conversion, safe file reads). It never
//     imports native or anything under it, nor a model implementation: the
//     decoder (engine/gemma3n and under it), the towers (engine/vision,
//     engine/audio), the weights readers and writers (engine/weights and
//     under it), generation (engine/generate), the scheduler (engine/sched)
//     or the prefix cache (engine/prefix). What the app needs of those (a
//     backend, a weight format, a scheduler's refusal, a priority, the image
//     processor, a generation on an opened model) engine/session gives under
//     its own names (engine/session/host.go, direct.go). An engine package
//     not listed as a face is internal: a new package starts internal until
//     it is added to engineFaces with what it is. Test files are held to the
//     same rule (their fakes come through engine/session/sessiontest and
//     engine/fixture/testmodel).
//  2. The weights packages (engine/weights and under it) import no model:
//     within Verdict only one another, engine/safefile, engine/tokenizer
//     and native, and nothing they reach (tests included) is a model
//     package. A model's GGUF layout is the model's own
//     (engine/gemma3n/gguf).
//  3. The engine (engine/...) never imports the app (the root package,
//     app/...).
//  4. native (and everything under it) never imports the engine or the app.
//
// Imports are read from every Go file of every package, whatever its build
// constraints (go list names the files; go/parser reads their imports), so a
// file built only on another system or under a tag is held too. A failure
// names the file and the import.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/parser"
	"go/token"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// engineFaces are the engine packages the app may import, with what each is.
var engineFaces = map[string]string{
	"verdict/engine/session":             "the engine as the app sees it: an opened model, its generation, scoring and towers, and the backend, devices and formats the app names",
	"verdict/engine/session/sessiontest": "test support above the session (fake backends)",
	"verdict/engine/scorer":              "the decision scorer: schemas, results, calibration (the types the session's Score takes and gives)",
	"verdict/engine/catalog":             "the catalog decoder's entries, fixtures and gates (the types the session's Select takes and gives)",
	"verdict/engine/prompt":              "Gemma 3n prompt assembly and its media-token checks",
	"verdict/engine/tokenizer":           "the Gemma tokenizer",
	"verdict/engine/models":              "the model catalog and loader: specs, discovery, options, identities, tokenizer files",
	"verdict/engine/dataset":             "bulk scoring of files of inputs",
	"verdict/engine/report":              "the calibration report",
	"verdict/engine/head":                "the decision head: training and reading it",
	"verdict/engine/hub":                 "downloads from the Hugging Face Hub",
	"verdict/engine/hub/hubtest":         "a fake Hub for tests",
	"verdict/engine/bench":               "the engine's benchmarks (verdict bench)",
	"verdict/engine/fixture":             "the reference fixtures' checks (verdict verify)",
	"verdict/engine/fixture/testmodel":   "the reference models and tokenizer for tests",
	"verdict/engine/convert":             "GGUF and checkpoint writing and checking (verdict verify-gguf)",
	"verdict/engine/safefile":            "safe reads of user-named files",
}

// internals say what the internal packages are, for the failure message (an
// engine package that is not a face is internal whether it is named here or
// not). A path names the package and those under it.
var internals = []struct{ path, what string }{
	{"verdict/native", "the compute core: kernels and backends"},
	{"verdict/engine/gemma3n", "the Gemma 3n decoder"},
	{"verdict/engine/weights", "the weights readers and writers"},
	{"verdict/engine/vision", "the vision tower"},
	{"verdict/engine/audio", "the audio tower"},
	{"verdict/engine/generate", "generation on the decoder"},
	{"verdict/engine/sched", "the scheduler"},
	{"verdict/engine/prefix", "the prefix cache"},
}

// weightsMayImport are the Verdict packages the weights packages may import
// besides their own (a path names the package and those under it).
var weightsMayImport = []string{"verdict/engine/weights", "verdict/engine/safefile", "verdict/engine/tokenizer", "verdict/native"}

// under reports whether pkg is path or a package under it.
func under(pkg, path string) bool { return pkg == path || strings.HasPrefix(pkg, path+"/") }

func underAny(pkg string, paths []string) bool {
	return slices.ContainsFunc(paths, func(p string) bool { return under(pkg, p) })
}

// listed is a package as go list gives it.
type listed struct {
	ImportPath, Dir                                              string
	GoFiles, CgoFiles, TestGoFiles, XTestGoFiles, IgnoredGoFiles []string
	Deps                                                         []string
}

// goList runs go list -e -json args in the module's root.
func goList(t *testing.T, args ...string) []listed {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the layering test reads imports with go list: %v", err)
	}
	cmd := exec.Command(gobin, append([]string{"list", "-e", "-json"}, args...)...)
	cmd.Dir = ".."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, stderr.String())
	}
	var pkgs []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// edge is one import of one file.
type edge struct{ pkg, file, imp string } // file: relative to the module's root

// imports reads the imports of every Go file of the module's packages.
func imports(t *testing.T, pkgs []listed) []edge {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var es []edge
	for _, p := range pkgs {
		var files []string
		for _, fs := range [][]string{p.GoFiles, p.CgoFiles, p.TestGoFiles, p.XTestGoFiles, p.IgnoredGoFiles} {
			files = append(files, fs...)
		}
		for _, name := range files {
			if !strings.HasSuffix(name, ".go") {
				continue
			}
			path := filepath.Join(p.Dir, name)
			f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			rel, _ := filepath.Rel(root, path)
			for _, im := range f.Imports {
				imp, _ := strconv.Unquote(im.Path.Value)
				es = append(es, edge{pkg: p.ImportPath, file: filepath.ToSlash(rel), imp: imp})
			}
		}
	}
	return es
}

// appForbids says why the app may not import imp ("" when it may).
func appForbids(imp string) string {
	if !under(imp, "verdict/native") && !under(imp, "verdict/engine") {
		return ""
	}
	if _, ok := engineFaces[imp]; ok {
		return ""
	}
	what := "an engine package that is not one of the app's faces (build/layering_test.go's engineFaces)"
	for _, in := range internals {
		if under(imp, in.path) {
			what = "a model internal: " + in.what
		}
	}
	return what
}

func isApp(pkg string) bool { return pkg == "verdict" || under(pkg, "verdict/app") }

// layering checks the rules on the module's file imports and the weights
// packages' dependencies; it returns a line per broken rule.
func layering(es []edge, weightsDeps map[string][]string) []string {
	var bad []string
	for _, e := range es {
		if e.imp != "verdict" && !strings.HasPrefix(e.imp, "verdict/") {
			continue
		}
		switch {
		case isApp(e.pkg):
			if why := appForbids(e.imp); why != "" {
				bad = append(bad, fmt.Sprintf("%s imports %s, %s: the app reaches the model through engine/session (add what it needs there, or to the engine package that owns the job)", e.file, e.imp, why))
			}
		case under(e.pkg, "verdict/engine/weights"):
			if !underAny(e.imp, weightsMayImport) {
				bad = append(bad, fmt.Sprintf("%s imports %s: the weights packages import no model (within Verdict only %s); a model's own layout belongs to the model", e.file, e.imp, strings.Join(weightsMayImport, ", ")))
			}
		}
		switch {
		case under(e.pkg, "verdict/engine") && isApp(e.imp):
			bad = append(bad, fmt.Sprintf("%s imports %s: the engine never imports the app", e.file, e.imp))
		case under(e.pkg, "verdict/native") && (under(e.imp, "verdict/engine") || isApp(e.imp)):
			bad = append(bad, fmt.Sprintf("%s imports %s: native never imports the engine or the app", e.file, e.imp))
		}
	}
	// A model among the weights packages' dependencies: one line each,
	// naming the first package (or test) that reaches it.
	reach := map[string][]string{}
	for _, pkg := range slices.Sorted(maps.Keys(weightsDeps)) {
		for _, d := range weightsDeps[pkg] {
			if under(d, "verdict/engine") && !underAny(d, weightsMayImport) && !slices.Contains(reach[d], pkg) {
				reach[d] = append(reach[d], pkg)
			}
		}
	}
	for _, d := range slices.Sorted(maps.Keys(reach)) {
		bad = append(bad, fmt.Sprintf("%s depends on %s (go list -deps -test; %d weights packages and tests do): the weights packages reach no model", reach[d][0], d, len(reach[d])))
	}
	return bad
}

// TestLayering holds the layering rule above on the module as it is.
func TestLayering(t *testing.T) {
	pkgs := goList(t, "./...")
	es := imports(t, pkgs)
	if len(es) == 0 {
		t.Fatal("no imports read")
	}
	t.Logf("%d imports read in %d packages", len(es), len(pkgs))
	// The weights packages, their test variants and test mains, each with
	// all it depends on ("p [q.test]": p as built for q's test; p_test: p's
	// external tests).
	deps := map[string][]string{}
	for _, p := range goList(t, "-test", "./engine/weights/...") {
		for _, d := range p.Deps {
			d, _, _ = strings.Cut(d, " ")
			d = strings.TrimSuffix(d, "_test") // an external test package
			deps[p.ImportPath] = append(deps[p.ImportPath], d)
		}
	}
	if len(deps) == 0 {
		t.Fatal("go list found no weights packages")
	}
	t.Logf("%d weights packages and tests with their dependencies", len(deps))
	for _, line := range layering(es, deps) {
		t.Error(line)
	}
}

// The rule fails on each kind of edge past it, naming the file and the
// import; the faces, the app's other imports and the weights packages'
// leaves pass.
func TestLayeringFails(t *testing.T) {
	es := []edge{
		{pkg: "verdict/app/cli", file: "app/cli/a.go", imp: "verdict/native"},
		{pkg: "verdict/app/api", file: "app/api/b_test.go", imp: "verdict/engine/sched"},
		{pkg: "verdict/app", file: "app/c.go", imp: "verdict/engine/gemma3n/gguf"},
		{pkg: "verdict", file: "main.go", imp: "verdict/engine/newthing"},
		{pkg: "verdict/engine/weights/ggufwrite", file: "engine/weights/ggufwrite/d.go", imp: "verdict/engine/gemma3n"},
		{pkg: "verdict/engine/scorer", file: "engine/scorer/e.go", imp: "verdict/app"},
		{pkg: "verdict/native/nativetest", file: "native/nativetest/f.go", imp: "verdict/engine/session"},
		// allowed
		{pkg: "verdict/app/cli", file: "app/cli/ok.go", imp: "verdict/engine/session"},
		{pkg: "verdict/app/cli", file: "app/cli/ok.go", imp: "verdict/media/decode"},
		{pkg: "verdict/app/cli", file: "app/cli/ok.go", imp: "verdict/app/api"},
		{pkg: "verdict/engine/weights/load", file: "engine/weights/load/ok.go", imp: "verdict/native"},
		{pkg: "verdict/engine/session", file: "engine/session/ok.go", imp: "verdict/native"},
	}
	deps := map[string][]string{"verdict/engine/weights": {"verdict/engine/safefile", "verdict/engine/vision"}}
	bad := layering(es, deps)
	for _, want := range []string{
		"app/cli/a.go imports verdict/native, a model internal: the compute core",
		"app/api/b_test.go imports verdict/engine/sched, a model internal: the scheduler",
		"app/c.go imports verdict/engine/gemma3n/gguf, a model internal: the Gemma 3n decoder",
		"main.go imports verdict/engine/newthing, an engine package that is not one of the app's faces",
		"engine/weights/ggufwrite/d.go imports verdict/engine/gemma3n: the weights packages import no model",
		"engine/scorer/e.go imports verdict/app: the engine never imports the app",
		"native/nativetest/f.go imports verdict/engine/session: native never imports the engine",
		"verdict/engine/weights depends on verdict/engine/vision",
	} {
		if !slices.ContainsFunc(bad, func(l string) bool { return strings.HasPrefix(l, want) }) {
			t.Errorf("no failure %q among:\n%s", want, strings.Join(bad, "\n"))
		}
	}
	if len(bad) != 8 {
		t.Errorf("%d failures, want 8:\n%s", len(bad), strings.Join(bad, "\n"))
	}
}
