package audio

// HannWindow exposes the feature extractor's window to the tests.
func HannWindow() []float32 { return tables().window[:] }

// MelFilters exposes the mel filter bank as a dense [513, 128] matrix.
func MelFilters() []float64 {
	t := tables()
	out := make([]float64, numBins*NumMelBins)
	for i := 0; i < NumMelBins; i++ {
		for j, v := range t.w[i] {
			out[(t.lo[i]+j)*NumMelBins+i] = v
		}
	}
	return out
}

// QScale is the attention's query scale of layer i.
func (t *Tower) QScale(i int) float32 { return t.layers[i].qScale }

// InvTimescales exposes the relative position embedding's frequencies.
func InvTimescales(n int) []float32 { return invTimescales(n) }
