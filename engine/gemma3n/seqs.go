package gemma3n

import "fmt"

// Seq is one sequence's part of a batched forward pass (ForwardSeqs): its
// own cache, the tokens that extend it and how many of its last positions
// need their final hidden state.
type Seq struct {
	Cache  *Cache
	IDs    []int32
	Embeds []float32 // the input embeddings [len(IDs), D]; nil: the tokens' own
	Keep   int       // outputs wanted: the last Keep positions (0..len(IDs))
}

// ForwardSeqs runs several sequences, each over its own cache, as one batch:
// every matrix product takes all their rows at once (decode steps and prefill
// chunks mixed), attention reads each sequence's own keys. It returns, per
// sequence, the final hidden states of its last Keep positions [Keep, D],
// bit-identical to ForwardLast (or ForwardEmbedsLast) on that sequence alone.
func (m *Model) ForwardSeqs(seqs []Seq) ([][]float32, error) {
	seen := make(map[*Cache]bool, len(seqs))
	for s, q := range seqs {
		if q.Cache == nil || seen[q.Cache] {
			return nil, fmt.Errorf("gemma3n: sequence %d has no cache of its own", s)
		}
		seen[q.Cache] = true
		if q.Embeds != nil {
			continue
		}
		for _, id := range q.IDs {
			if id < 0 || int(id) >= m.Cfg.VocabSize {
				return nil, fmt.Errorf("gemma3n: sequence %d: token id %d outside the vocabulary of %d", s, id, m.Cfg.VocabSize)
			}
		}
		e, err := m.Embed(q.IDs)
		if err != nil {
			return nil, err
		}
		seqs[s].Embeds = e
	}
	return m.forwardSeqs(seqs, nil)
}

// forwardSeqs is the decoder over a batch of sequences; a hook (one sequence
// only) sees every layer's states of every position.
func (m *Model) forwardSeqs(seqs []Seq, hook Hook) ([][]float32, error) {
	cfg := m.Cfg
	D, P := cfg.HiddenSize, cfg.PerLayerSize
	if len(seqs) == 0 {
		return nil, fmt.Errorf("gemma3n: empty batch")
	}
	if hook != nil && len(seqs) != 1 {
		return nil, fmt.Errorf("gemma3n: a hook needs a batch of one sequence")
	}
	n := 0
	keep := make([]int, len(seqs))
	for s, q := range seqs {
		ns := len(q.IDs)
		if ns == 0 {
			return nil, fmt.Errorf("gemma3n: empty input")
		}
		if len(q.Embeds) != ns*D {
			return nil, fmt.Errorf("gemma3n: %d embedding values for %d tokens of width %d", len(q.Embeds), ns, D)
		}
		if err := m.checkPositions(q.Cache.n + ns); err != nil {
			return nil, err
		}
		keep[s] = min(max(q.Keep, 0), ns)
		if hook != nil {
			keep[s] = ns
		}
		n += ns
	}
	ids, e := seqs[0].IDs, seqs[0].Embeds
	if len(seqs) > 1 {
		ids, e = make([]int32, 0, n), make([]float32, 0, n*D)
		for _, q := range seqs {
			ids, e = append(ids, q.IDs...), append(e, q.Embeds...)
		}
	}
	ple, err := m.perLayerInputs(ids, e)
	if err != nil {
		return nil, err
	}
	// off[s], cnt[s]: sequence s's rows among those running; nk[s]: the
	// keys it attends once this batch's are cached.
	off, cnt, nk := make([]int, len(seqs)), make([]int, len(seqs)), make([]int, len(seqs))
	pos := make([]int32, 0, n)
	gather := false
	for s, q := range seqs {
		off[s], cnt[s], nk[s] = len(pos), len(q.IDs), q.Cache.n+len(q.IDs)
		for t := range q.IDs {
			pos = append(pos, int32(q.Cache.n+t))
		}
		gather = gather || keep[s] < cnt[s]
	}
	if hook != nil {
		hook(-1, e)
	}

	H := m.streams(e, n)
	w := newWork(m, n)
	first := cfg.NumLayers - cfg.NumKVSharedLayers
	cur := n // rows running
	for i := range m.layers {
		if i == first && gather && cfg.NumKVSharedLayers > 0 {
			// Keep each sequence's last keep positions: the layers from
			// here on read the source layers' keys and values, all cached.
			sel := make([]int, 0, n)
			for s := range seqs {
				for k := cnt[s] - keep[s]; k < cnt[s]; k++ {
					sel = append(sel, off[s]+k)
				}
				off[s], cnt[s] = len(sel)-keep[s], keep[s]
			}
			H = gatherRows(H, sel, 4, n, D)
			ple = gatherLayers(ple, sel, first, cfg.NumLayers, n, P)
			pos = gather32(pos, sel)
			cur = len(sel)
			if cur == 0 {
				break
			}
			w = newWork(m, cur)
		}
		m.layer(i, H, ple[i*cur*P:(i+1)*cur*P], cur, w, func(y *layer) {
			for s, q := range seqs {
				if cnt[s] > 0 {
					m.cacheAttention(i, y, q.Cache, pos[off[s]:off[s]+cnt[s]], nk[s], w, off[s])
				}
			}
		})
		if hook != nil {
			hook(i, H[:cur*D])
		}
		for s, q := range seqs {
			if q.Cache.progress != nil && cnt[s] > 0 {
				runs := len(m.layers) // the layers this sequence runs
				if keep[s] == 0 && cfg.NumKVSharedLayers > 0 {
					runs = first
				}
				q.Cache.progress(i+1, runs)
			}
		}
	}
	for _, q := range seqs {
		q.Cache.n += len(q.IDs)
	}
	out := make([][]float32, len(seqs))
	if cur == 0 {
		for s := range out {
			out[s] = []float32{}
		}
		return out, nil
	}
	h := m.unmix(H, cur, w)
	for s := range seqs {
		out[s] = h[off[s]*D : (off[s]+cnt[s])*D : (off[s]+cnt[s])*D]
	}
	return out, nil
}
