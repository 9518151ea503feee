package head

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"verdict/engine/scorer"
)

// TestGradient: the analytic gradient of a decision's NLL matches central
// differences for every parameter, with 2, 3 and 5 candidates.
func TestGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const Dq, Dc, r = 5, 4, 3
	vec := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	var train []Decision
	for _, n := range []int{2, 3, 5} {
		d := Decision{Name: "d", Q: vec(Dq), Label: n - 2}
		for range n {
			d.C = append(d.C, vec(Dc))
			d.LL = append(d.LL, -3*rng.Float64())
		}
		train = append(train, d)
	}
	h := newHead(Meta{Dq: Dq, Dc: Dc, Rank: r}, nil, train, rng)
	w := h.params()
	for i := range w.all {
		w.all[i] = rng.NormFloat64()
	}
	h.Alpha = w.all[w.alph[0]]
	loss := func(d Decision) float64 {
		return -math.Log(scorer.Softmax(h.Scores(d), 1)[d.Label])
	}
	for _, d := range train {
		g := make([]float64, len(w.all))
		h.gradient(d, g, w)
		for i := range w.all {
			old := w.all[i]
			const eps = 1e-6
			w.all[i] = old + eps
			h.Alpha = w.all[w.alph[0]]
			up := loss(d)
			w.all[i] = old - eps
			h.Alpha = w.all[w.alph[0]]
			down := loss(d)
			w.all[i] = old
			h.Alpha = w.all[w.alph[0]]
			if num := (up - down) / (2 * eps); math.Abs(num-g[i]) > 1e-5*(1+math.Abs(num)) {
				t.Errorf("%d candidates, parameter %d: gradient %.8g, numerically %.8g", len(d.C), i, g[i], num)
			}
		}
	}
}

// TestMetrics: accuracy, NLL and ECE of known distributions.
func TestMetrics(t *testing.T) {
	p := func(v ...float64) []float64 { return v }
	for _, c := range []struct {
		name          string
		probs         [][]float64
		labels        []int
		acc, nll, ece float64
	}{
		{"sure and right", [][]float64{p(1, 0)}, []int{0}, 1, 0, 0},
		{"coin flips", [][]float64{p(0.5, 0.5), p(0.5, 0.5)}, []int{0, 1}, 0.5, math.Ln2, 0},
		// Top 0.8 twice (bin 8), right once: |1 - 1.6| / 2 = 0.3.
		{"overconfident", [][]float64{p(0.8, 0.2), p(0.2, 0.8)}, []int{0, 0}, 0.5, -(math.Log(0.8) + math.Log(0.2)) / 2, 0.3},
		// Two bins: 0.9 right (gap 0.1), 0.6 wrong (gap 0.6): (0.1 + 0.6) / 2.
		{"two bins", [][]float64{p(0.9, 0.1), p(0.4, 0.6)}, []int{0, 0}, 0.5, -(math.Log(0.9) + math.Log(0.4)) / 2, 0.35},
	} {
		ds := make([]Decision, len(c.probs))
		for i := range ds {
			ds[i] = Decision{Label: c.labels[i], LL: make([]float64, len(c.probs[i]))}
			for j, v := range c.probs[i] {
				ds[i].LL[j] = math.Log(math.Max(v, 1e-300))
			}
		}
		m := EvaluateJSON(ds)
		if math.Abs(m.Accuracy-c.acc) > 1e-9 || math.Abs(m.NLL-c.nll) > 1e-9 || math.Abs(m.ECE-c.ece) > 1e-9 || m.Decisions != len(ds) {
			t.Errorf("%s: got %+v, want accuracy %v, NLL %v, ECE %v", c.name, m, c.acc, c.nll, c.ece)
		}
	}
}

// TestParseRefuses: a head file whose header, tensors or sizes are wrong is
// refused with the reason.
func TestParseRefuses(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	d := Decision{Q: []float32{1, 2}, C: [][]float32{{1, 0}, {0, 1}}, LL: []float64{-1, -2}, Label: 0}
	h := newHead(Meta{Dq: 2, Dc: 2, Rank: 2}, make([]float32, 4*2), []Decision{d}, rng)
	path := t.TempDir() + "/h.safetensors"
	if err := h.Save(path); err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(path)
	if _, err := parse(good); err != nil {
		t.Fatalf("a saved head: %v", err)
	}
	n := int(binary.LittleEndian.Uint64(good))
	header := string(good[8 : 8+n])
	edit := func(from, to string) []byte {
		hd := strings.Replace(header, from, to, 1)
		for len(hd) < n {
			hd += " "
		}
		out := binary.LittleEndian.AppendUint64(nil, uint64(len(hd)))
		return append(append(out, hd...), good[8+n:]...)
	}
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"short", good[:5], "not a safetensors file"},
		{"header past the end", binary.LittleEndian.AppendUint64(nil, 1<<40), "not a safetensors file, or truncated"},
		{"other format", edit(Format, "something-else/1"), "not a decision head"},
		{"wrong shape", edit(`"shape":[2,2]`, `"shape":[2,3]`), "want F32"},
		{"bad dims", edit(`\"rank\":2`, `\"rank\":0`), "out of range"},
		{"no tensor", edit(`"alpha"`, `"alpha2"`), "tensor alpha: missing"},
	} {
		if _, err := parse(c.b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.want)
		}
	}
}
