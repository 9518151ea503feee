package gemma4

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The full-size fixtures (make_gemma4_fixtures.py's e2b mode) differ from the
// tiny ones in two ways these tests pin on the tiny fixtures: the weights are
// recipe.json alone (no model.safetensors), and the logits are stored at a
// few positions (logits_at, meta.json logits_positions) instead of all.

// fixtureCopy copies the extracted fixture name into a fresh folder, leaving
// out the files in drop.
func fixtureCopy(t *testing.T, name string, drop ...string) string {
	t.Helper()
	src := fixtureDir(t, name)
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		skip := false
		for _, d := range drop {
			skip = skip || e.Name() == d
		}
		if skip {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// checksByName runs VerifyFixture on dir.
func checksByName(t *testing.T, dir string) map[string]Check {
	t.Helper()
	cs, err := VerifyFixture(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Check{}
	for _, c := range cs {
		out[c.Name] = c
	}
	return out
}

// TestRecipeOnlyFixture: a fixture without model.safetensors is read from
// its recipe, and every check gives the same error as with the stored
// weights (the recipe regenerates them bit for bit).
func TestRecipeOnlyFixture(t *testing.T) {
	for _, name := range fixtures {
		t.Run(name, func(t *testing.T) {
			want := checksByName(t, fixtureDir(t, name))
			got := checksByName(t, fixtureCopy(t, name, "model.safetensors"))
			if len(got) != len(want) {
				t.Fatalf("%d checks from the recipe, %d from model.safetensors", len(got), len(want))
			}
			for n, w := range want {
				g, ok := got[n]
				if !ok {
					t.Errorf("check %s did not run from the recipe", n)
					continue
				}
				if g.MaxErr != w.MaxErr || !g.OK() {
					t.Errorf("%s: from the recipe %.6g (ok %v), from model.safetensors %.6g", n, g.MaxErr, g.OK(), w.MaxErr)
				}
			}
			t.Logf("%d checks, the same errors from recipe.json alone", len(got))
		})
	}
	t.Run("no weights", func(t *testing.T) {
		_, err := OpenFixture(fixtureCopy(t, "gemma4-synthetic-tiny", "model.safetensors", "recipe.json"))
		if err == nil || !strings.Contains(err.Error(), "model.safetensors") || !strings.Contains(err.Error(), "recipe.json") {
			t.Fatalf("got %v, want an error naming model.safetensors and recipe.json", err)
		}
	})
}

// readSafetensors reads an F32/I32 safetensors file back into tensors
// (the test's own reader, independent of readExpected).
type stTensor struct {
	dtype string
	shape []int
	data  []byte
}

func readST(t *testing.T, file string) map[string]stTensor {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	hn := binary.LittleEndian.Uint64(b)
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+hn], &hdr); err != nil {
		t.Fatal(err)
	}
	out := map[string]stTensor{}
	for n, raw := range hdr {
		if n == "__metadata__" {
			continue
		}
		var e struct {
			DType   string `json:"dtype"`
			Shape   []int  `json:"shape"`
			Offsets [2]int `json:"data_offsets"`
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatal(err)
		}
		out[n] = stTensor{e.DType, e.Shape, b[8+int(hn)+e.Offsets[0] : 8+int(hn)+e.Offsets[1]]}
	}
	return out
}

func writeST(t *testing.T, file string, ts map[string]stTensor) {
	t.Helper()
	names := make([]string, 0, len(ts))
	for n := range ts {
		names = append(names, n)
	}
	sort.Strings(names)
	hdr := map[string]any{}
	var data []byte
	for _, n := range names {
		x := ts[n]
		hdr[n] = map[string]any{"dtype": x.dtype, "shape": x.shape, "data_offsets": []int{len(data), len(data) + len(x.data)}}
		data = append(data, x.data...)
	}
	h, err := json.Marshal(hdr)
	if err != nil {
		t.Fatal(err)
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	out = append(append(out, h...), data...)
	if err := os.WriteFile(file, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// editMeta rewrites dir's meta.json through edit.
func editMeta(t *testing.T, dir string, edit func(m map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, "meta.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// fullSizeLayout turns a copy of the tiny fixture into the full-size layout:
// recipe only, logits_at at pos (meta.json logits_positions) instead of
// every position's logits.
func fullSizeLayout(t *testing.T, name string, pos []int) string {
	t.Helper()
	dir := fixtureCopy(t, name, "model.safetensors")
	p := filepath.Join(dir, "expected.safetensors")
	ts := readST(t, p)
	lg := ts["logits"]
	V := lg.shape[1]
	var at []byte
	for _, q := range pos {
		at = append(at, lg.data[4*q*V:4*(q+1)*V]...)
	}
	delete(ts, "logits")
	ts["logits_at"] = stTensor{"F32", []int{len(pos), V}, at}
	writeST(t, p, ts)
	editMeta(t, dir, func(m map[string]any) { m["logits_positions"] = pos })
	return dir
}

// TestLogitsAtFixture: a fixture holding logits at a few positions is
// checked there (the prefill and the cached decode), at most the full
// check's error; the wrong positions fail; bad positions are refused.
func TestLogitsAtFixture(t *testing.T) {
	name := "gemma4-synthetic-tiny"
	full := checksByName(t, fixtureDir(t, name))
	n := len(loadFixture(t, name).Meta.IDs)
	pos := []int{0, n / 2, n - 2, n - 1}
	dir := fullSizeLayout(t, name, pos)
	got := checksByName(t, dir)
	// The same layout through the engine's interface (verify-fixture's
	// second half): every decoder check runs and passes.
	dec, err := VerifyDecoder(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range dec {
		if !c.OK() {
			t.Errorf("decoder %s: %.3g > %.3g", c.Name, c.MaxErr, c.Tol)
		}
	}
	t.Logf("decoder on the CPU backend: %d checks pass on the recipe-only, logits_at layout", len(dec))
	// Each check at pos, against the same check over every position.
	for c, whole := range map[string]string{"logits_at": "logits", "logits_decode": "logits_decode"} {
		g, ok := got[c]
		if !ok {
			t.Fatalf("check %s did not run", c)
		}
		if !g.OK() || g.MaxErr > full[whole].MaxErr {
			t.Errorf("%s: %.3g (ok %v), the full fixture's %s %.3g", c, g.MaxErr, g.OK(), whole, full[whole].MaxErr)
		}
		t.Logf("%s at %v: %.3g (tolerance %.3g; every position: %.3g)", c, pos, g.MaxErr, g.Tol, full[whole].MaxErr)
	}
	if _, ok := got["logits"]; ok {
		t.Error(`a logits_at fixture ran the "logits" check`)
	}
	if g, w := got["hidden_states"].MaxErr, full["hidden_states"].MaxErr; g != w {
		t.Errorf("hidden_states: %.6g, the full fixture's %.6g", g, w)
	}

	// The rows stored for pos but read as other positions: both logit
	// checks fail.
	shifted := fullSizeLayout(t, name, pos)
	editMeta(t, shifted, func(m map[string]any) { m["logits_positions"] = []int{1, n/2 + 1, n - 3, n - 2} })
	bad := checksByName(t, shifted)
	for _, c := range []string{"logits_at", "logits_decode"} {
		if bad[c].OK() {
			t.Errorf("%s passes with the positions shifted (%.3g)", c, bad[c].MaxErr)
		} else {
			t.Logf("positions shifted: %s fails, %.3g > %.3g", c, bad[c].MaxErr, bad[c].Tol)
		}
	}

	for _, c := range []struct {
		what string
		pos  any
		want string
	}{
		{"a position past the prompt", []int{0, 1, 2, n}, "outside the prompt"},
		{"a negative position", []int{-1, 1, 2, 3}, "outside the prompt"},
		{"a position twice", []int{0, 1, 1, 3}, "twice"},
		{"fewer positions than rows", []int{0, 1, 2}, "shape"},
		{"no positions", nil, "no logits_positions"},
	} {
		dir := fullSizeLayout(t, name, pos)
		editMeta(t, dir, func(m map[string]any) { m["logits_positions"] = c.pos })
		if _, err := OpenFixture(dir); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.what, err, c.want)
		}
	}
	// Both layouts at once is ambiguous.
	both := fullSizeLayout(t, name, pos)
	ts := readST(t, filepath.Join(both, "expected.safetensors"))
	ts["logits"] = readST(t, filepath.Join(fixtureDir(t, name), "expected.safetensors"))["logits"]
	writeST(t, filepath.Join(both, "expected.safetensors"), ts)
	if _, err := OpenFixture(both); err == nil || !strings.Contains(err.Error(), "both") {
		t.Errorf("logits and logits_at: got %v, want an error", err)
	}
}

// TestGreedyTolerance: greedy_8 is exact unless meta.json names a
// tolerance for it (the full-size fixtures, for the steps after a near tie).
func TestGreedyTolerance(t *testing.T) {
	name := "gemma4-synthetic-tiny"
	wrongLast := func(m map[string]any) {
		g := m["greedy_8"].([]any)
		g[len(g)-1] = math.Mod(g[len(g)-1].(float64)+1, 512)
	}
	dir := fixtureCopy(t, name)
	editMeta(t, dir, wrongLast)
	if c := checksByName(t, dir)["greedy_8"]; c.OK() || c.MaxErr != 1 {
		t.Errorf("one wrong token, no tolerance: %.3g mismatches, ok %v; want 1, failing", c.MaxErr, c.OK())
	}
	dir = fixtureCopy(t, name)
	editMeta(t, dir, func(m map[string]any) {
		wrongLast(m)
		tol, _ := m["tolerances"].(map[string]any)
		if tol == nil {
			tol = map[string]any{}
		}
		tol["greedy_8"] = 1.0
		m["tolerances"] = tol
	})
	c := checksByName(t, dir)["greedy_8"]
	if !c.OK() || c.Tol != 1 || !strings.Contains(c.Note, "meta.json") {
		t.Errorf("one wrong token, tolerance 1: %+v; want a pass noting meta.json", c)
	}
}
