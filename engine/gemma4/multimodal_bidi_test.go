package gemma4

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"verdict/engine/model"
)

// TestBlockLimits: each position's last key on the sliding layers under
// use_bidirectional_attention "vision": an image placeholder's block is
// its run of consecutive placeholders (begin/end tokens and audio are
// text), every other position sees itself.
func TestBlockLimits(t *testing.T) {
	const I, A, B, E = 9, 8, 7, 6 // image, audio, boi, eoi
	bidi := &MediaTokens{Image: I, Audio: A, BOI: B, EOI: E, VisionBidirectional: true}
	causal := &MediaTokens{Image: I, Audio: A, BOI: B, EOI: E}
	for _, tc := range []struct {
		name string
		ids  []int
		t    *MediaTokens
		pos0 int
		want []int
	}{
		{"one block", []int{1, B, I, I, I, E, 2}, bidi, 0, []int{0, 1, 4, 4, 4, 5, 6}},
		{"after a cache of 10", []int{B, I, I, E}, bidi, 10, []int{10, 12, 12, 13}},
		{"two blocks apart", []int{B, I, I, E, B, I, I, I, E}, bidi, 0, []int{0, 2, 2, 3, 4, 7, 7, 7, 8}},
		{"two blocks back to back are one", []int{I, I, I, I}, bidi, 0, []int{3, 3, 3, 3}},
		{"a block of one", []int{B, I, E}, bidi, 0, []int{0, 1, 2}},
		{"a block at the end", []int{1, I, I}, bidi, 5, []int{5, 7, 7}},
		{"audio is text", []int{A, A, A}, bidi, 0, nil},
		{"no image", []int{1, 2, 3}, bidi, 0, nil},
		{"not bidirectional", []int{B, I, I, E}, causal, 0, nil},
		{"no media tokens", []int{B, I, I, E}, nil, 0, nil},
	} {
		if got := blockLimits(tc.ids, tc.t, tc.pos0); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestMultimodalBidirectional runs the multimodal fixture with
// use_bidirectional_attention "vision" (its 64-placeholder image block is
// longer than its sliding window of 16): the Decoder against the reference
// within the fixture's reference tolerance; the mask matters (the image's
// rows and the text after it move from the causal logits, the rows before
// it keep their bits); chunked prefill keeps a block whole or refuses; a
// text-only or audio-only prompt gives the causal bits.
func TestMultimodalBidirectional(t *testing.T) {
	fx := loadMMFixture(t)
	V, D := fx.m.Cfg.Vocab, fx.m.Cfg.Hidden
	ids := ids32(fx.meta.IDs)
	n := len(ids)
	md := model.Media{Image: fx.image, Audio: fx.audio}
	bidi := fx.tok
	bidi.VisionBidirectional = true
	first := slices.Index(fx.meta.IDs, fx.tok.Image)
	last := first + fx.images[0] - 1
	if first < 1 || fx.meta.IDs[last] != fx.tok.Image || fx.meta.IDs[last+1] == fx.tok.Image || fx.images[0] <= fx.m.Cfg.SlidingWindow {
		t.Fatalf("the fixture's prompt is not one image block longer than the window (%d..%d, window %d)", first, last, fx.m.Cfg.SlidingWindow)
	}

	ref, err := fx.m.ForwardMedia(fx.meta.IDs, bidi, fx.image, fx.audio, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	causal, err := fx.m.ForwardMedia(fx.meta.IDs, fx.tok, fx.image, fx.audio, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rowDiff := func(a, b []float32, lo, hi int) float64 { return must(maxAbs(a[lo*V:hi*V], b[lo*V:hi*V])) }
	before, image, after := rowDiff(ref, causal, 0, first), rowDiff(ref, causal, first, last+1), rowDiff(ref, causal, last+1, n)
	t.Logf("reference, bidirectional against causal: rows before the image %.3g, the image %.3g, after it %.3g", before, image, after)
	if before != 0 {
		t.Errorf("the rows before the image moved by %.3g (want the causal bits)", before)
	}
	// The logits are soft-capped at 1; a mask that changes nothing moves
	// them by 0, a float32 reordering by ~1e-6.
	if image < 1e-3 || after < 1e-3 {
		t.Errorf("the mask changes the image's rows by %.3g and the text after it by %.3g: want both over 1e-3", image, after)
	}

	newDecoder := func(t *testing.T, tok MediaTokens, rows int) (*Decoder, *Exec) {
		d, err := NewDecoder(fx.m, Options{KVPositions: 1024, BatchRows: rows})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		if err := d.SetMediaTokens(tok); err != nil {
			t.Fatal(err)
		}
		x, err := d.acquire()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(x.Release)
		return d, x
	}
	run := func(t *testing.T, d *Decoder, x *Exec, ids []int32, md model.Media) []float32 {
		t.Helper()
		c := d.NewCache()
		defer c.Free()
		var b model.Batch
		if err := d.AddMultimodal(&b, c, ids, md, len(ids)); err != nil {
			t.Fatal(err)
		}
		h, err := x.Prefill(&b)
		if err != nil {
			t.Fatal(err)
		}
		lg, err := d.Logits(h, len(h)/D)
		if err != nil {
			t.Fatal(err)
		}
		return lg
	}

	d, x := newDecoder(t, bidi, 0)
	logits := run(t, d, x, ids, md)
	e := must(maxAbs(logits, ref))
	t.Logf("Decoder against the reference, bidirectional: %.3g (tolerance 1e-5)", e)
	if e > 1e-5 {
		t.Errorf("the Decoder's logits differ from the reference's by %.3g (tolerance 1e-5)", e)
	}
	if e := must(maxAbs(logits, causal)); e < 1e-3 {
		t.Errorf("the Decoder's bidirectional logits are within %.3g of the causal ones", e)
	}
	dc, xc := newDecoder(t, fx.tok, 0)
	dcl := run(t, dc, xc, ids, md)
	before, image, after = rowDiff(logits, dcl, 0, first), rowDiff(logits, dcl, first, last+1), rowDiff(logits, dcl, last+1, n)
	t.Logf("Decoder, bidirectional against causal: rows before the image %.3g, the image %.3g, after it %.3g", before, image, after)
	if before != 0 || image < 1e-3 || after < 1e-3 {
		t.Errorf("the Decoder's mask moves the rows before the image by %.3g (want 0), the image's by %.3g and the text after by %.3g (want over 1e-3)", before, image, after)
	}

	t.Run("chunks", func(t *testing.T) {
		// 66 rows a chunk would cut the block at row 66: Prefill ends the
		// first chunk before the block instead (the block and the row
		// after it are 65 rows), and gives the same bits. A block that
		// with the row after it cannot fit one Forward is refused, and so
		// is a Forward whose batch ends inside a block.
		d66, x66 := newDecoder(t, bidi, 66)
		if e := must(maxAbs(run(t, d66, x66, ids, md), logits)); e != 0 {
			t.Errorf("in chunks of 66 rows: the logits differ by %.3g (want the same bits)", e)
		}
		d40, x40 := newDecoder(t, bidi, 40)
		c := d40.NewCache()
		defer c.Free()
		var b model.Batch
		if err := d40.AddMultimodal(&b, c, ids, md, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := x40.Prefill(&b); err == nil || !strings.Contains(err.Error(), "longer than the 40 rows") {
			t.Errorf("a block of %d rows in chunks of 40: err %v", fx.images[0], err)
		}
		cut := model.Batch{Rows: b.Rows[:first+10], Embeds: b.Embeds}
		if _, err := x40.Forward(&cut); err == nil || !strings.Contains(err.Error(), "reaches the end of the batch") {
			t.Errorf("a Forward cut inside the block: err %v", err)
		}
		if c.Len() != 0 {
			t.Errorf("the refused passes left %d positions in the cache", c.Len())
		}
	})

	t.Run("after the prompt", func(t *testing.T) {
		// A token decoded after the prompt, against the reference's cache.
		c := d.NewCache()
		defer c.Free()
		var b model.Batch
		if err := d.AddMultimodal(&b, c, ids, md, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := x.Prefill(&b); err != nil {
			t.Fatal(err)
		}
		next := int32(argmax(logits[(n-1)*V:]))
		b = model.Batch{}
		if err := d.AddMultimodal(&b, c, []int32{next}, model.Media{}, 1); err != nil {
			t.Fatal(err)
		}
		h, err := x.Prefill(&b)
		if err != nil {
			t.Fatal(err)
		}
		lg, err := d.Logits(h, 1)
		if err != nil {
			t.Fatal(err)
		}
		rc := fx.m.NewCache()
		if _, err := fx.m.ForwardMedia(fx.meta.IDs, bidi, fx.image, fx.audio, rc, nil); err != nil {
			t.Fatal(err)
		}
		want, err := fx.m.Forward([]int{int(next)}, rc, nil)
		if err != nil {
			t.Fatal(err)
		}
		if e := must(maxAbs(lg, want)); e > 1e-5 {
			t.Errorf("the token after the prompt: logits differ from the reference's by %.3g (tolerance 1e-5)", e)
		}
	})

	t.Run("text and audio alone", func(t *testing.T) {
		// No image: the flag changes nothing, bit for bit, on both sides.
		var text, audio []int32
		for _, id := range ids[:first-1] {
			text = append(text, id)
		}
		audio = slices.Clone(ids[last+2:])
		text = append(text, ids[last+2:last+4]...)
		text = slices.DeleteFunc(text, func(id int32) bool { return int(id) == fx.tok.Audio })
		for _, p := range []struct {
			name string
			ids  []int32
			md   model.Media
		}{{"text", text, model.Media{}}, {"audio", audio, model.Media{Audio: fx.audio}}} {
			a := run(t, d, x, p.ids, p.md)
			b := run(t, dc, xc, p.ids, p.md)
			if e := must(maxAbs(a, b)); e != 0 {
				t.Errorf("%s: the flag moves the Decoder's logits by %.3g (want the same bits)", p.name, e)
			}
			wide := make([]int, len(p.ids))
			for i, id := range p.ids {
				wide[i] = int(id)
			}
			ra, err := fx.m.ForwardMedia(wide, bidi, nil, p.md.Audio, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			rb, err := fx.m.ForwardMedia(wide, fx.tok, nil, p.md.Audio, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if e := must(maxAbs(ra, rb)); e != 0 {
				t.Errorf("%s: the flag moves the reference's logits by %.3g (want the same bits)", p.name, e)
			}
		}
	})
}

// TestMultimodalBidirectionalFixture holds the reference and the Decoder to
// transformers' answer for the bidirectional case, and the masks it built to
// the ones blockLimits implies, once the GPU machine has made
// testdata/gemma4-synthetic-multimodal-bidi.tar.gz
// (build/fixtures/make_gemma4_mm_fixtures.py). Until then it is skipped.
func TestMultimodalBidirectionalFixture(t *testing.T) {
	const name = "gemma4-synthetic-multimodal-bidi"
	if _, err := os.Stat(filepath.Join("..", "..", "testdata", name+".tar.gz")); err != nil {
		t.Skipf("testdata/%s.tar.gz is not made yet (make_gemma4_mm_fixtures.py on the GPU machine)", name)
	}
	fx := loadMMFixture(t) // the same model and inputs
	dir := fixtureDir(t, name)
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ParseMediaTokens(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !tok.VisionBidirectional {
		t.Fatal("the fixture's config.json is not use_bidirectional_attention \"vision\"")
	}
	var meta struct {
		Tolerances map[string]float64 `json:"tolerances"`
		IDs        []int              `json:"input_ids"`
	}
	mj, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(mj, &meta); err != nil {
		t.Fatal(err)
	}
	exp, err := readExpected(filepath.Join(dir, "expected.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	n, W := len(meta.IDs), fx.m.Cfg.SlidingWindow
	lim := blockLimits(meta.IDs, &tok, 0)
	for kind, sliding := range map[string]bool{"mask_full_attention": false, "mask_sliding_attention": true} {
		m := exp[kind]
		if len(m.i) != n*n {
			t.Fatalf("expected.safetensors: %s has %d values, want %d", kind, len(m.i), n*n)
		}
		bad := 0
		for q := range n {
			for k := range n {
				want := k <= q
				if sliding {
					want = k > q-W && k <= lim[q]
				}
				if (m.i[q*n+k] != 0) != want {
					bad++
				}
			}
		}
		if bad > 0 {
			t.Errorf("%s: transformers' mask differs from blockLimits' in %d places", kind, bad)
		}
	}
	tol := max(1e-5, meta.Tolerances["bidi_logits"])
	want := exp["logits"].f
	ref, err := fx.m.ForwardMedia(meta.IDs, tok, fx.image, fx.audio, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDecoder(fx.m, Options{KVPositions: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.SetMediaTokens(tok); err != nil {
		t.Fatal(err)
	}
	x, err := d.acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	c := d.NewCache()
	defer c.Free()
	var b model.Batch
	if err := d.AddMultimodal(&b, c, ids32(meta.IDs), model.Media{Image: fx.image, Audio: fx.audio}, n); err != nil {
		t.Fatal(err)
	}
	h, err := x.Prefill(&b)
	if err != nil {
		t.Fatal(err)
	}
	lg, err := d.Logits(h, n)
	if err != nil {
		t.Fatal(err)
	}
	for _, ck := range []towerCheck{
		{"reference logits", must(maxAbs(ref, want)), tol},
		{"Decoder logits", must(maxAbs(lg, want)), tol},
	} {
		t.Logf("%-18s max err %.3g (tolerance %.3g)", ck.name, ck.err, ck.tol)
		if !ck.ok() {
			t.Errorf("%s: error %.3g over the tolerance %.3g", ck.name, ck.err, ck.tol)
		}
	}
}
