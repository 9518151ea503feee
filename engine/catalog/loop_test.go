package catalog_test

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"verdict/engine/catalog"
	"verdict/engine/fixture/testmodel"
)

// TestLoopMatchesDecode: the loop decoder, driven from the host and (where
// the backend records loops, else its fallback) from the device, gives
// every request the entries and tokens of decoding it alone with the
// host's step, and the last step's legal set and logits bit for bit, in
// batches of every size from 1 to all the fixture's cases.
func TestLoopMatchesDecode(t *testing.T) {
	f := loadFixture(t)
	tok := testmodel.Tokenizer(t)
	m := testmodel.Tiny(t)
	c, err := catalog.Compile(f.Catalog, tok, grammar(tok))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var reqs []catalog.Request
	var ref []catalog.Result
	for _, fc := range f.Cases {
		r := catalog.Request{Prompt: fc.PromptIDs, K: fc.K}
		res, err := catalog.Decode(ctx, m, c, r, catalog.Options{Step: catalog.HostStep})
		if err != nil {
			t.Fatal(err)
		}
		reqs, ref = append(reqs, r), append(ref, res)
	}
	for _, mode := range []catalog.LoopMode{catalog.HostLoop, catalog.DeviceLoop} {
		for _, size := range []int{1, 2, 3, len(reqs)} {
			for lo := 0; lo < len(reqs); lo += size {
				hi := min(lo+size, len(reqs))
				out, st, err := catalog.DecodeLoop(ctx, m, c, reqs[lo:hi], mode)
				if err != nil {
					t.Fatalf("mode %d, batch %d..%d: %v", mode, lo, hi, err)
				}
				if st.Device {
					t.Errorf("mode %d: the CPU ran a device loop", mode)
				}
				for j, r := range out {
					want := ref[lo+j]
					last := want.Steps[len(want.Steps)-1]
					got := r.Steps[0]
					same := slices.Equal(r.Entries, want.Entries) && slices.Equal(r.Tokens, want.Tokens) &&
						slices.Equal(got.Legal, last.Legal) && got.Chosen == last.Chosen && len(got.Logits) == len(last.Logits)
					for k := 0; same && k < len(got.Logits); k++ {
						same = math.Float32bits(got.Logits[k]) == math.Float32bits(last.Logits[k])
					}
					if !same {
						t.Errorf("mode %d, request %d in a batch of %d: entries %v tokens %v last %v/%v, want %v %v %v/%v",
							mode, lo+j, hi-lo, r.Entries, r.Tokens, got.Legal, got.Logits, want.Entries, want.Tokens, last.Legal, last.Logits)
					}
				}
				if st.Steps < 1 {
					t.Errorf("mode %d: %d loop steps", mode, st.Steps)
				}
			}
		}
	}
}

// TestLoopRefuses: bad loop requests are refused by name.
func TestLoopRefuses(t *testing.T) {
	f := loadFixture(t)
	tok := testmodel.Tokenizer(t)
	m := testmodel.Tiny(t)
	c, err := catalog.Compile(f.Catalog, tok, grammar(tok))
	if err != nil {
		t.Fatal(err)
	}
	ok := catalog.Request{Prompt: f.Cases[0].PromptIDs, K: 1}
	many := make([]catalog.Request, catalog.MaxLoopBatch+1)
	for i := range many {
		many[i] = ok
	}
	for _, tc := range []struct {
		name string
		reqs []catalog.Request
		want string
	}{
		{"none", nil, "1 to 64 requests, not 0"},
		{"too many", many, "not 65"},
		{"k 0", []catalog.Request{{Prompt: ok.Prompt, K: 0}}, "k = 0"},
		{"empty prompt", []catalog.Request{{K: 1}}, "empty prompt"},
		{"bad token", []catalog.Request{{Prompt: []int32{2, -5}, K: 1}}, "token id -5"},
	} {
		_, _, err := catalog.DecodeLoop(context.Background(), m, c, tc.reqs, catalog.HostLoop)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}
