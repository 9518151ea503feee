package gemma4

import (
	"math"
	"slices"
	"strings"
	"testing"

	"verdict/engine/model"
	"verdict/native"
)

// decoder loads a fixture's weights behind the model interface, keeping
// the reference Model (Ref) for the checks against it.
func (fx *fixtureData) decoder(t testing.TB, opt Options) *Decoder {
	t.Helper()
	if opt.KVPositions == 0 {
		opt.KVPositions = 2048
	}
	opt.Reference = true
	d, err := NewDecoder(fx.model(t), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// run forwards ids on c through x in one batch (every row wanted) and
// returns their logits.
func run(t testing.TB, x model.Exec, c model.Cache, ids []int32, V int) []float32 {
	t.Helper()
	var b model.Batch
	b.Add(c, ids, len(ids))
	h, err := x.Forward(&b)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(ids)*V)
	if err := x.Logits(out, h); err != nil {
		t.Fatal(err)
	}
	return out
}

// greedy prefills ids on a new cache and decodes k tokens greedily through
// Greedy and DecodeGreedy.
func greedy(t testing.TB, d *Decoder, x model.Exec, ids []int32, k int) []int {
	t.Helper()
	c := d.NewCache()
	defer c.Free()
	var b model.Batch
	b.Add(c, ids, 1)
	h, err := x.Forward(&b)
	if err != nil {
		t.Fatal(err)
	}
	first := []int32{0}
	if err := x.Greedy(first, h); err != nil {
		t.Fatal(err)
	}
	rest, err := x.DecodeGreedy([]model.Cache{c}, first, k-1, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, v := range append(first, rest[0]...) {
		out = append(out, int(v))
	}
	if c.Len() != len(ids)+k-1 {
		t.Errorf("the cache holds %d positions after decoding, want %d", c.Len(), len(ids)+k-1)
	}
	return out
}

func argmaxRows(lg []float32, V int) []int {
	out := make([]int, len(lg)/V)
	for i := range out {
		out[i] = argmax(lg[i*V : (i+1)*V])
	}
	return out
}

// TestDecoderFixtures runs each fixture's checks through the model
// interface (Acquire, Forward over a Batch, the heads): the logits of
// every position, their argmax, the hidden states of every layer (a
// Hook), a cached decode (against the references, and bit for bit against
// the prefill), greedy_8 (Greedy, DecodeGreedy), both extra prompts and
// scoring_ids.json's log-likelihood sums (SelectLogprobs), each within the
// fixture's tolerance; the tokens exact.
func TestDecoderFixtures(t *testing.T) {
	for _, name := range fixtures {
		t.Run(name, func(t *testing.T) {
			fx := loadFixture(t, name)
			d := fx.decoder(t, Options{})
			c := d.cfg
			V, D, L := c.Vocab, c.Hidden, c.Layers
			x, err := d.Acquire()
			if err != nil {
				t.Fatal(err)
			}
			defer x.Release()
			check := func(what, key string, got []float32, ref []float32, scale bool) {
				t.Helper()
				e, err := maxAbs(got, ref)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if scale {
					e /= math.Max(1, maxMag(ref))
				}
				tol, _ := fx.Tolerance(key)
				if !(e <= tol) {
					t.Errorf("%s: max error %.3g > tolerance %.3g", what, e, tol)
				}
				t.Logf("%-24s max error %-9.3g tolerance %.3g", what, e, tol)
			}
			exact := func(what string, got, want []int) {
				t.Helper()
				if !slices.Equal(got, want) {
					t.Errorf("%s: %v, want %v", what, got, want)
				}
			}
			ids := ids32(fx.Meta.IDs)
			n := len(ids)
			wantLogits, err := fx.refF32("logits")
			if err != nil {
				t.Fatal(err)
			}

			// The prompt in one batch, every layer hooked.
			cache := d.NewCache()
			var hidden [][]float32
			var b model.Batch
			b.Add(cache, ids, n)
			b.Hook = func(layer int, h []float32) {
				if layer != len(hidden)-1 {
					t.Errorf("hook: layer %d after %d", layer, len(hidden)-1)
				}
				hidden = append(hidden, slices.Clone(h))
			}
			h, err := x.Forward(&b)
			if err != nil {
				t.Fatal(err)
			}
			logits := make([]float32, n*V)
			if err := x.Logits(logits, h); err != nil {
				t.Fatal(err)
			}
			cache.Free()
			check("logits", "logits", logits, wantLogits, false)
			exact("argmax_all", argmaxRows(logits, V), fx.exp["argmax_all"].i)
			hs, err := fx.refF32("hidden_states")
			if err != nil {
				t.Fatal(err)
			}
			if len(hidden) != L+1 {
				t.Fatalf("the hook saw %d states, want %d", len(hidden), L+1)
			}
			for k := range hidden {
				check("hidden_states["+string(rune('0'+k))+"]", "hidden_states", hidden[k], hs[k*n*D:(k+1)*n*D], true)
			}
			// The reference decoder over the same weights, for the record.
			refLogits, err := d.Ref.Forward(fx.Meta.IDs, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			e, _ := maxAbs(logits, refLogits)
			t.Logf("against the plain-Go decoder: max logit difference %.3g", e)

			// A cached decode: the prompt but 8, then a token a pass.
			cache = d.NewCache()
			split := max(n-8, 1)
			dec := run(t, x, cache, ids[:split], V)
			for i := split; i < n; i++ {
				dec = append(dec, run(t, x, cache, ids[i:i+1], V)...)
			}
			cache.Free()
			check("logits (cached decode)", "logits", dec, wantLogits, false)
			if e, _ := maxAbs(dec, logits); e != 0 {
				t.Errorf("the cached decode differs from the prefill by %.3g (want the same bits)", e)
			}

			if g := fx.Meta.Greedy8; len(g) > 0 {
				exact("greedy_8", greedy(t, d, x, ids, len(g)), g)
			}
			for _, xp := range fx.Meta.ExtraPrompts {
				want, err := fx.refF32(xp.Logits)
				if err != nil {
					t.Fatal(err)
				}
				c := d.NewCache()
				var b model.Batch
				b.Add(c, ids32(xp.IDs), len(xp.IDs))
				out, err := x.Prefill(&b)
				if err != nil {
					t.Fatal(err)
				}
				c.Free()
				lg := make([]float32, len(xp.IDs)*V)
				for r := 0; r < len(xp.IDs); r += x.Rows() {
					e := min(r+x.Rows(), len(xp.IDs))
					ht, err := x.Upload(out[r*D : e*D])
					if err != nil {
						t.Fatal(err)
					}
					if err := x.Logits(lg[r*V:e*V], ht); err != nil {
						t.Fatal(err)
					}
				}
				check(xp.Logits, xp.Logits, lg, want, false)
				if len(xp.Greedy8) > 0 {
					exact(xp.Name+"_greedy_8", greedy(t, d, x, ids32(xp.IDs), len(xp.Greedy8)), xp.Greedy8)
				}
			}

			// scoring_ids.json through the scorer's head: each candidate's
			// rows after the prefix and the field.
			s := fx.scoring
			tol, _ := fx.Tolerance("scoring_ids.logprob_sums")
			for _, f := range s.Fields {
				worst := 0.0
				for ci, cand := range f.Candidates {
					seq := ids32(append(append(append([]int(nil), s.Prefix...), f.FieldIDs...), cand...))
					start := len(seq) - len(cand)
					c := d.NewCache()
					var b model.Batch
					b.Add(c, seq, len(cand)) // the rows predicting the candidate's tokens
					b.Rows[len(seq)-1].Out = false
					b.Rows[start-1].Out = true
					h, err := x.Forward(&b)
					if err != nil {
						t.Fatal(err)
					}
					row, col := make([]int32, len(cand)), make([]int32, len(cand))
					for k, tok := range cand {
						row[k], col[k] = int32(k), int32(tok)
					}
					sel, lse := make([]float32, len(cand)), make([]float32, h.Rows())
					if err := x.SelectLogprobs(sel, lse, h, row, col); err != nil {
						t.Fatal(err)
					}
					c.Free()
					var sum float64
					for k := range cand {
						sum += float64(sel[k]) - float64(lse[k])
					}
					worst = math.Max(worst, math.Abs(sum-f.LogprobSums[ci]))
				}
				if !(worst <= tol) {
					t.Errorf("scoring_ids.%s: max error %.3g > tolerance %.3g", f.Name, worst, tol)
				}
				t.Logf("%-24s max error %-9.3g tolerance %.3g", "scoring_ids."+f.Name, worst, tol)
			}
		})
	}
}

// TestDecoderRagged: rows of two sequences interleaved in one batch, then
// one's decode step between the other's prompt rows (past its sliding
// window), give each row the bits it has alone (the MoE fixture's experts
// run on rows of both sequences at once).
func TestDecoderRagged(t *testing.T) {
	for _, name := range fixtures[:2] {
		t.Run(name, func(t *testing.T) {
			fx := loadFixture(t, name)
			d := fx.decoder(t, Options{})
			V := d.cfg.Vocab
			x, err := d.Acquire()
			if err != nil {
				t.Fatal(err)
			}
			defer x.Release()
			a, b := ids32(fx.Meta.IDs), ids32(fx.Meta.ExtraPrompts[1].IDs) // b: past the window
			ca, cb := d.NewCache(), d.NewCache()
			aloneA, aloneB := run(t, x, ca, a, V), run(t, x, cb, b[:5], V)
			aloneB = append(aloneB, run(t, x, cb, b[5:], V)...)
			next := int32(argmax(aloneA[len(aloneA)-V:]))
			aloneA = append(aloneA, run(t, x, ca, []int32{next}, V)...)
			ca.Free()
			cb.Free()

			// a's rows and b's first 5 interleaved, then a decode step of
			// b beside a's next rows.
			ca, cb = d.NewCache(), d.NewCache()
			var bt model.Batch
			for i := range max(len(a), 5) {
				if i < len(a) {
					bt.Add(ca, a[i:i+1], 1)
				}
				if i < 5 {
					bt.Add(cb, b[i:i+1], 1)
				}
			}
			h, err := x.Forward(&bt)
			if err != nil {
				t.Fatal(err)
			}
			mixed := make([]float32, h.Rows()*V)
			if err := x.Logits(mixed, h); err != nil {
				t.Fatal(err)
			}
			var gotA, gotB []float32
			for r, row := range bt.Rows {
				if row.Cache == ca {
					gotA = append(gotA, mixed[r*V:(r+1)*V]...)
				} else {
					gotB = append(gotB, mixed[r*V:(r+1)*V]...)
				}
			}
			// b's other rows beside a's decode step.
			bt.Reset()
			bt.Add(cb, b[5:9], 4)
			bt.Add(ca, []int32{next}, 1)
			bt.Add(cb, b[9:], len(b)-9)
			if h, err = x.Forward(&bt); err != nil {
				t.Fatal(err)
			}
			mixed = make([]float32, h.Rows()*V)
			if err := x.Logits(mixed, h); err != nil {
				t.Fatal(err)
			}
			gotB = append(gotB, mixed[:4*V]...)
			gotA = append(gotA, mixed[4*V:5*V]...)
			gotB = append(gotB, mixed[5*V:]...)
			if e, _ := maxAbs(gotA, aloneA); e != 0 || len(gotA) != len(aloneA) {
				t.Errorf("sequence a in a mixed batch differs from alone by %.3g", e)
			}
			if e, _ := maxAbs(gotB, aloneB); e != 0 || len(gotB) != len(aloneB) {
				t.Errorf("sequence b in a mixed batch differs from alone by %.3g", e)
			}
			if ca.Len() != len(a)+1 || cb.Len() != len(b) {
				t.Errorf("the caches hold %d and %d positions, want %d and %d", ca.Len(), cb.Len(), len(a)+1, len(b))
			}
		})
	}
}

// TestDecoderLoop: a Loop driven from the host with the greedy step the
// device loops use (Argmax, LoopEmit) decodes greedy_8, and its caches keep
// the fed tokens only.
func TestDecoderLoop(t *testing.T) {
	fx := loadFixture(t, "gemma4-synthetic-tiny-moe")
	d := fx.decoder(t, Options{})
	x, err := d.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	ids := ids32(fx.Meta.IDs)
	want := fx.Meta.Greedy8
	c := d.NewCache()
	var b model.Batch
	b.Add(c, ids, 1)
	h, err := x.Forward(&b)
	if err != nil {
		t.Fatal(err)
	}
	first := []int32{0}
	if err := x.Greedy(first, h); err != nil {
		t.Fatal(err)
	}
	steps := len(want) - 1
	l, err := x.NewLoop([]model.Cache{c}, steps, nil)
	if err != nil {
		t.Fatal(err)
	}
	be := d.Backend()
	ar, err := be.NewArena(native.ArenaBytes(steps, 1, 1, model.MaxStops))
	if err != nil {
		t.Fatal(err)
	}
	defer ar.Free()
	out, done, cond, stop := ar.Take(native.I32, 1, steps), ar.Take(native.I32, 1, 1), ar.Take(native.I32, 1, 1), ar.Take(native.I32, 1, model.MaxStops)
	st, w, sc := x.CatalogHead()
	stops := make([]int32, model.MaxStops)
	for i := range stops {
		stops[i] = -1
	}
	end := 3 // the loop ends after token end, the first of its value from there on
	for slices.Contains(want[:end], want[end]) {
		end++
	}
	stops[0] = int32(want[end])
	st.UploadI32(l.IDs(), first)
	st.UploadI32(stop, stops)
	st.UploadI32(done, []int32{0})
	st.UploadI32(cond, []int32{1})
	lg := x.(*Exec).LogitsBuf.Slice(0, 1)
	ran, err := l.RunHost(func(h native.Tensor) {
		st.Linear(lg, h, w)
		st.Softcap(lg, lg, sc)
		st.Argmax(l.IDs().View(1, 1), lg)
		st.LoopEmit(&native.LoopEmit{N: 1, Steps: steps, Iter: l.Iter(), IDs: l.IDs(), Stop: stop, Out: out, Done: done, Cond: cond})
	}, cond)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]int32, steps)
	st.DownloadI32(got, out)
	if err := st.Sync(); err != nil {
		t.Fatal(err)
	}
	got = append(first, got[:ran]...)
	var gi []int
	for _, v := range got {
		gi = append(gi, int(v))
	}
	if !slices.Equal(gi, want[:end+1]) {
		t.Errorf("the loop decoded %v, want %v (greedy_8 to its stop token)", gi, want[:end+1])
	}
	if err := l.Close([]int{ran}); err != nil {
		t.Fatal(err)
	}
	if c.Len() != len(ids)+ran {
		t.Errorf("after the loop the cache holds %d positions, want %d", c.Len(), len(ids)+ran)
	}
	// The cache goes on as if the tokens had been fed a pass at a time.
	next := run(t, x, c, []int32{int32(want[end])}, d.cfg.Vocab)
	if g := argmax(next); g != want[end+1] {
		t.Errorf("after the loop the next token is %d, want %d", g, want[end+1])
	}
}

// TestDecoderInterface: the interface's answers against the config: the
// limits, the pool's kinds with their own widths, admission, and a view
// with a pool of its own.
func TestDecoderInterface(t *testing.T) {
	fx := loadFixture(t, "gemma4-synthetic-tiny")
	d := fx.decoder(t, Options{KVPositions: 256})
	c := d.cfg
	if got := d.Config(); got != (model.Config{Vocab: c.Vocab, Hidden: c.Hidden, Layers: c.Layers, MaxPositions: 4096}) {
		t.Errorf("Config %+v", got)
	}
	if ch := d.Chat(); ch.TurnStart != TurnStartToken || ch.System != "system" || ch.Answer != "" || ch.Media != (model.Special{}) {
		t.Errorf("Chat %+v: want the small template's (the fixture has per-layer inputs), no media", ch)
	}
	l := d.KVLayout()
	// The fixture: layers s s F s | s F shared (2), sliding 1×32, full 1×64.
	want := model.KVLayout{Width: 64, BytesPerPosition: (3*32 + 64) * 2 * 4}
	want.Kinds[model.KVGlobal] = model.KVKind{Layers: []int{2}, Width: 64}
	want.Kinds[model.KVSliding] = model.KVKind{Window: 16, Layers: []int{0, 1, 3}, Width: 32}
	if l.Width != want.Width || l.BytesPerPosition != want.BytesPerPosition ||
		!slices.Equal(l.Kinds[0].Layers, want.Kinds[0].Layers) || !slices.Equal(l.Kinds[1].Layers, want.Kinds[1].Layers) ||
		l.Kinds[0].Width != 64 || l.Kinds[1].Width != 32 || l.Kinds[1].Window != 16 || l.Kinds[0].Window != 0 {
		t.Errorf("KVLayout %+v, want %+v", l, want)
	}
	pos, bytes := d.KVPool()
	if pos != 256 || bytes != 256*want.BytesPerPosition {
		t.Errorf("KVPool %d positions %d bytes, want 256 and %d", pos, bytes, 256*want.BytesPerPosition)
	}
	if err := d.KVFits(300); err == nil {
		t.Error("KVFits(300) of a 256-position pool: no error")
	}
	need := d.Need(100)
	tk, err := d.Admit(need)
	if err != nil {
		t.Fatal(err)
	}
	if free := d.KVFree(); free[0] != 16-need[0] || free[1] != 16-need[1] {
		t.Errorf("KVFree %v after admitting %v of 16 blocks each", free, need)
	}
	tk.Release()
	if _, err := d.Admit([2]int{17, 0}); err == nil || !strings.Contains(err.Error(), "global") {
		t.Errorf("Admit past the pool: %v", err)
	}
	v, err := d.WithKVPositions(64)
	if err != nil {
		t.Fatal(err)
	}
	defer v.CloseView()
	if p, _ := v.KVPool(); p != 64 {
		t.Errorf("a view of 64 positions reports %d", p)
	}
	// A view's caches are not the model's.
	x, err := d.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	var b model.Batch
	b.Add(v.NewCache(), []int32{1, 2}, 1)
	if _, err := x.Forward(&b); err == nil || !strings.Contains(err.Error(), "no cache of this model") {
		t.Errorf("a view's cache in the model's Exec: %v", err)
	}
	if got, err := v.Forward(nil, []int32{5, 6, 7}, nil); err != nil || len(got) != 3*c.Hidden {
		t.Errorf("the view's Forward: %d values, %v", len(got), err)
	}
}

// TestDecoderRefuses: bad input gets an error naming the problem, and the
// cache is unchanged.
func TestDecoderRefuses(t *testing.T) {
	fx := loadFixture(t, "gemma4-synthetic-tiny")
	d := fx.decoder(t, Options{BatchRows: 8, KVPositions: 64})
	x, err := d.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	c, c2 := d.NewCache(), d.NewCache()
	hook := func(int, []float32) {}
	for _, tc := range []struct {
		name string
		b    model.Batch
		want string
	}{
		{"token", model.Batch{Rows: []model.Row{{Cache: c, Token: 512, Embed: -1}}}, "outside the vocabulary"},
		{"negative token", model.Batch{Rows: []model.Row{{Cache: c, Token: -1, Embed: -1}}}, "outside the vocabulary"},
		{"no cache", model.Batch{Rows: []model.Row{{Token: 1, Embed: -1}}}, "no cache of this model"},
		{"embedding", model.Batch{Rows: []model.Row{{Cache: c, Token: 1, Embed: 0}}}, "takes embedding 0"},
		{"rows", model.Batch{Rows: make([]model.Row, 9)}, "exceeds the 8"},
		{"hook", model.Batch{Rows: []model.Row{{Cache: c, Embed: -1}, {Cache: c2, Embed: -1}}, Hook: hook}, "one sequence"},
		{"empty", model.Batch{}, "empty batch"},
	} {
		if _, err := x.Forward(&tc.b); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	if c.Len() != 0 || c.Blocks() != 0 || c2.Blocks() != 0 {
		t.Errorf("a refused batch left %d positions, %d blocks", c.Len(), c.Blocks())
	}
	var b model.Batch
	if err := d.AddMultimodal(&b, c, []int32{1}, model.Media{Image: make([]float32, 64)}, 1); err == nil || !strings.Contains(err.Error(), "images and audio") {
		t.Errorf("AddMultimodal with an image: %v", err)
	}
	// A pool of 64 positions: the 65th is refused with a KVError.
	b.Reset()
	b.Add(c, make([]int32, 8), 1)
	for range 8 {
		if _, err := x.Forward(&b); err != nil {
			t.Fatal(err)
		}
	}
	b.Reset()
	b.Add(c, []int32{1}, 1)
	_, err = x.Forward(&b)
	if _, ok := err.(*model.KVError); !ok {
		t.Errorf("past the pool: %v, want a *model.KVError", err)
	}
	if c.Len() != 64 {
		t.Errorf("the refused row changed the cache: %d positions", c.Len())
	}
	if _, err := x.DecodeGreedy([]model.Cache{c, c}, []int32{1, 1}, 2, nil); err == nil || !strings.Contains(err.Error(), "repeats") {
		t.Errorf("DecodeGreedy of one cache twice: %v", err)
	}
}
