package catalog_test

import (
	"context"
	"testing"

	"verdict/engine/catalog"
	"verdict/engine/fixture/testmodel"
	"verdict/engine/generate"
	"verdict/engine/model"
)

// BenchmarkDecode times one request of the tool catalog on the tiny model
// three ways, the same prompt and token count: trie-constrained with the
// sparse head, with the dense head and a mask, and unconstrained greedy.
// ns/token is the time per decoded token after the first.
func BenchmarkDecode(b *testing.B) {
	tok := testmodel.Tokenizer(b)
	m := testmodel.Tiny(b)
	cat, err := catalog.Compile(catalog.Tools(), tok, grammar(tok))
	if err != nil {
		b.Fatal(err)
	}
	q := catalog.ToolRequests[3]
	ids, err := catalog.Prompt(cat.Entries, q.K, q.Text, gemmaChat).Encode(tok, model.Special{})
	if err != nil {
		b.Fatal(err)
	}
	req := catalog.Request{Prompt: ids, K: q.K}
	ref, err := catalog.Decode(context.Background(), m, cat, req, catalog.Options{})
	if err != nil {
		b.Fatal(err)
	}
	n := len(ref.Tokens)
	for _, c := range []struct {
		name string
		run  func() (decode float64, err error)
	}{
		{"sparse", func() (float64, error) {
			r, err := catalog.Decode(context.Background(), m, cat, req, catalog.Options{Head: catalog.SparseHead})
			return float64(r.Decode.Nanoseconds()), err
		}},
		{"dense+mask", func() (float64, error) {
			r, err := catalog.Decode(context.Background(), m, cat, req, catalog.Options{Head: catalog.DenseHead})
			return float64(r.Decode.Nanoseconds()), err
		}},
		{"unconstrained", func() (float64, error) {
			r, err := generate.Run(context.Background(), m, ids, generate.Options{MaxTokens: n}, nil)
			return float64(r.Decode.Nanoseconds()), err
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var ns float64
			for i := 0; i < b.N; i++ {
				d, err := c.run()
				if err != nil {
					b.Fatal(err)
				}
				ns += d
			}
			b.ReportMetric(ns/float64(b.N*(n-1)), "ns/token")
		})
	}
}
