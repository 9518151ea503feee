package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"verdict/engine/catalog"
	"verdict/engine/gemma3n"
	"verdict/engine/generate"
)

// CatalogReport is verdict bench catalog's measurement of one model: the
// time per decoded token of trie-constrained decoding with the sparse head,
// with the dense head and a mask, and of unconstrained greedy decoding (as
// many tokens, same prompts, same session), then requests per second at
// several batch sizes.
type CatalogReport struct {
	Model    string `json:"model"`
	Weights  string `json:"weights"`
	Requests int    `json:"requests"`      // intents decoded per mode
	Tokens   int    `json:"tokens"`        // tokens decoded per mode
	Prompt   int    `json:"prompt_tokens"` // mean prompt length

	SparseMSPerToken        float64 `json:"sparse_ms_per_token"`
	DenseMaskMSPerToken     float64 `json:"dense_mask_ms_per_token"`
	UnconstrainedMSPerToken float64 `json:"unconstrained_ms_per_token"`
	SparseHeadMSPerToken    float64 `json:"sparse_head_ms_per_token"`
	DenseHeadMSPerToken     float64 `json:"dense_head_ms_per_token"`
	MaxLegalRows            int     `json:"max_legal_rows"`

	// Per-token weight bytes: all of them (at the prompt's depth), the
	// dense head's share, and the sparse head's at its widest step.
	BytesPerToken     int64   `json:"bytes_per_token"`
	DenseHeadBytes    int64   `json:"dense_head_bytes"`
	DenseHeadShare    float64 `json:"dense_head_share"`
	SparseHeadBytes   int64   `json:"sparse_head_bytes"`
	SparseBytesSaving float64 `json:"sparse_bytes_saving"` // of all per-token bytes

	Batches []CatalogBatch `json:"batches"`
	// Unshared is batch 1 with every prompt computed whole (no shared prefix).
	Unshared CatalogBatch `json:"unshared"`
	// Loops is the loop decoder, host-driven against a device loop.
	Loops []CatalogLoop `json:"loops"`
}

// CatalogBatch is one batch size's throughput.
type CatalogBatch struct {
	Batch     int     `json:"batch"`
	Requests  int     `json:"requests"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"requests_per_second"`
	Steps     int     `json:"steps"`
	// SharedPrefix is the prompt prefix computed once for all the requests.
	SharedPrefix int `json:"shared_prefix_tokens"`
}

func (r CatalogReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s weights), %d requests, %d tokens each mode, prompts of %d tokens on average\n", r.Model, r.Weights, r.Requests, r.Tokens, r.Prompt)
	fmt.Fprintf(&b, "  per token: sparse head %.2f ms, dense head + mask %.2f ms, unconstrained greedy %.2f ms (constrained/unconstrained %.3f)\n",
		r.SparseMSPerToken, r.DenseMaskMSPerToken, r.UnconstrainedMSPerToken, r.SparseMSPerToken/r.UnconstrainedMSPerToken)
	fmt.Fprintf(&b, "  output head: sparse %.3f ms a token (at most %d rows), dense %.3f ms\n", r.SparseHeadMSPerToken, r.MaxLegalRows, r.DenseHeadMSPerToken)
	fmt.Fprintf(&b, "  weight bytes a token: %.1f MB, dense head %.1f MB (%.1f%%), sparse head at most %.2f MB: saves %.1f%%\n",
		float64(r.BytesPerToken)/1e6, float64(r.DenseHeadBytes)/1e6, 100*r.DenseHeadShare, float64(r.SparseHeadBytes)/1e6, 100*r.SparseBytesSaving)
	u := r.Unshared
	fmt.Fprintf(&b, "  batch  1, no shared prefix: %d requests in %.2f s = %.2f requests/s\n", u.Requests, u.Seconds, u.PerSecond)
	for _, x := range r.Batches {
		fmt.Fprintf(&b, "  batch %2d: %d requests in %.2f s = %.2f requests/s (%d steps, a shared prefix of %d tokens)\n", x.Batch, x.Requests, x.Seconds, x.PerSecond, x.Steps, x.SharedPrefix)
	}
	b.WriteString(loopsString(r.Loops))
	return b.String()
}

// Catalog measures catalog decoding of the tool catalog's example requests
// on m. batches lists the batch sizes of the throughput sweep; each runs
// max(batch, len(requests)) requests.
func Catalog(ctx context.Context, name string, m *gemma3n.Model, cat *catalog.Catalog, prompts []catalog.Request, batches []int) (CatalogReport, error) {
	r := CatalogReport{Model: name, Weights: string(m.Weights()), Requests: len(prompts)}
	if len(prompts) == 0 {
		return r, fmt.Errorf("bench: no requests")
	}
	// Warm up threads and weight pages.
	if _, err := m.Forward(nil, prompts[0].Prompt, nil); err != nil {
		return r, err
	}
	var sparse, dense, free time.Duration
	var sparseHead, denseHead time.Duration
	for _, p := range prompts {
		r.Prompt += len(p.Prompt)
		s, err := catalog.Decode(ctx, m, cat, p, catalog.Options{Head: catalog.SparseHead})
		if err != nil {
			return r, err
		}
		d, err := catalog.Decode(ctx, m, cat, p, catalog.Options{Head: catalog.DenseHead})
		if err != nil {
			return r, err
		}
		if len(s.Tokens) < 2 {
			continue
		}
		g, err := generate.Run(ctx, m, p.Prompt, generate.Options{MaxTokens: len(s.Tokens)}, nil)
		if err != nil {
			return r, err
		}
		r.Tokens += len(s.Tokens) - 1
		sparse += s.Decode
		dense += d.Decode
		free += g.Decode
		sparseHead += s.Head
		denseHead += d.Head
		for _, st := range s.Steps {
			r.MaxLegalRows = max(r.MaxLegalRows, len(st.Legal))
		}
	}
	r.Prompt /= len(prompts)
	if r.Tokens == 0 {
		return r, fmt.Errorf("bench: every request decoded a single token")
	}
	ms := func(d time.Duration, n int) float64 { return d.Seconds() * 1000 / float64(n) }
	r.SparseMSPerToken, r.DenseMaskMSPerToken, r.UnconstrainedMSPerToken = ms(sparse, r.Tokens), ms(dense, r.Tokens), ms(free, r.Tokens)
	n := r.Tokens + len(prompts) // the head runs for every chosen token
	r.SparseHeadMSPerToken, r.DenseHeadMSPerToken = ms(sparseHead, n), ms(denseHead, n)
	r.BytesPerToken = m.DecodeBytes(r.Prompt)
	r.DenseHeadBytes, r.SparseHeadBytes = m.HeadBytes(r.MaxLegalRows)
	r.DenseHeadShare = float64(r.DenseHeadBytes) / float64(r.BytesPerToken)
	r.SparseBytesSaving = float64(r.DenseHeadBytes-r.SparseHeadBytes) / float64(r.BytesPerToken)
	_, st, err := catalog.DecodeBatch(ctx, m, cat, prompts, catalog.Options{MaxBatch: 1, NoSharedPrefix: true})
	if err != nil {
		return r, err
	}
	r.Unshared = CatalogBatch{Batch: 1, Requests: len(prompts), Seconds: st.Total.Seconds(), PerSecond: float64(len(prompts)) / st.Total.Seconds(), Steps: st.Steps}
	for _, b := range batches {
		reqs := make([]catalog.Request, max(b, len(prompts)))
		for i := range reqs {
			reqs[i] = prompts[i%len(prompts)]
		}
		_, st, err := catalog.DecodeBatch(ctx, m, cat, reqs, catalog.Options{MaxBatch: b})
		if err != nil {
			return r, err
		}
		r.Batches = append(r.Batches, CatalogBatch{Batch: b, Requests: len(reqs), Seconds: st.Total.Seconds(),
			PerSecond: float64(len(reqs)) / st.Total.Seconds(), Steps: st.Steps, SharedPrefix: st.SharedPrefix})
	}
	var err2 error
	if r.Loops, err2 = CatalogLoops(ctx, m, cat, prompts, append([]int{1}, batches...)); err2 != nil {
		return r, err2
	}
	return r, nil
}
