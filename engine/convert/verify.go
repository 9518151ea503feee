package convert

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"verdict/engine/model"
	"verdict/engine/models"
	"verdict/engine/weights"
	"verdict/native"
)

// Logits opens spec (a checkpoint folder or a GGUF file) with float32
// weights and no packed-weights cache, on be (nil: the CPU), and returns the
// logits of the token sequence ids at every position (len(ids) rows of the
// vocabulary) and the vocabulary's size; the model is closed again.
func Logits(ctx context.Context, spec string, be *native.Backend, ids []int32) (logits []float32, vocab int, err error) {
	m, err := models.OpenContext(ctx, spec, models.Options{Weights: model.WeightsF32, CacheDir: "off", Backend: be})
	if err != nil {
		return nil, 0, err
	}
	defer m.Close()
	logits, err = logitsOf(m, ids)
	return logits, m.Config().Vocab, err
}

func logitsOf(m *models.Model, ids []int32) ([]float32, error) {
	h, err := m.Forward(nil, ids, nil)
	if err != nil {
		return nil, err
	}
	return m.Logits(h, len(ids))
}

// GGUFTypes summarises the tensor types of the GGUF file at path ("F32×12,
// Q4_0×30", as weights.GGUF.TypeCounts) and says whether all are F32.
func GGUFTypes(path string) (counts string, allF32 bool, err error) {
	g, err := weights.OpenGGUFFile(path)
	if err != nil {
		return "", false, err
	}
	defer g.Close()
	allF32 = true
	for _, t := range g.Tensors {
		allF32 = allF32 && t.Type == weights.GGMLF32
	}
	return g.TypeCounts(), allF32, nil
}

// Reference is a checkpoint that GGUF files made from it are compared with,
// tensor by tensor (Compare).
type Reference struct{ st weights.Store }

// OpenReference opens the checkpoint folder dir as a Reference.
func OpenReference(dir string) (*Reference, error) {
	st, err := weights.Open(dir)
	if err != nil {
		return nil, err
	}
	return &Reference{st: st}, nil
}

// Close releases the checkpoint.
func (r *Reference) Close() error { return r.st.Close() }

// quantLevels is the spacing of a ggml type's levels for values of largest
// magnitude amax, as llama.cpp's quantisers lay them out: Q8_0 ±127 steps
// of amax/127, Q4_0 ±8 of amax/8, Q6_K ±32 of amax/32, Q4_K and Q5_K 15
// and 31 steps over a block's range (at most 2·amax). Rounding values spread
// evenly to the nearest level leaves an RMS error of step/√12.
var quantLevels = map[weights.GGMLType]float64{
	weights.GGMLQ8_0: 1.0 / 127, weights.GGMLQ4_0: 1.0 / 8, weights.GGMLQ6_K: 1.0 / 32,
	weights.GGMLQ4_K: 2.0 / 15, weights.GGMLQ5_K: 2.0 / 31,
}

// Compare reads every tensor of the GGUF file at path and the
// reference's tensor of the same name; it summarises, per type, the largest ratio of RMS
// error to the rounding bound (quantisations) or the count of exact tensors
// (F32), and reports whether all are within: F32 bit for bit, F16 and BF16
// within half a unit in the last place, quantisations within 1.15 times the
// bound. Rows past the reference's (the converter's zero padding of the
// per-layer table) must be zero.
func (r *Reference) Compare(path string) (line string, ok bool, err error) {
	ref := r.st
	gs, err := weights.OpenGGUF(path)
	if err != nil {
		return "", false, err
	}
	defer gs.Close()
	worst := map[string]float64{}
	exact := map[string]int{}
	var off []string
	for _, name := range gs.Names() {
		_, dt, _ := gs.Info(name)
		if _, _, ok := ref.Info(name); !ok {
			off = append(off, name+" (not in the reference)")
			continue
		}
		x, err := ref.Float32(name)
		if err != nil {
			return "", false, err
		}
		y, err := gs.Float32(name)
		if err != nil {
			return "", false, err
		}
		if len(y) < len(x) {
			off = append(off, fmt.Sprintf("%s (%d values, the reference %d)", name, len(y), len(x)))
			continue
		}
		for _, v := range y[len(x):] {
			if v != 0 {
				off = append(off, name+" (its rows past the reference's are not zero)")
				break
			}
		}
		y = y[:len(x)]
		var se, amax float64
		elementsOK := true
		for i, w := range x {
			e := math.Abs(float64(y[i]) - float64(w))
			se += e * e
			amax = max(amax, math.Abs(float64(w)))
			switch dt {
			case "F32":
				elementsOK = elementsOK && y[i] == w
			case "F16":
				elementsOK = elementsOK && e <= math.Abs(float64(w))*0x1p-11+0x1p-25
			case "BF16":
				elementsOK = elementsOK && e <= math.Abs(float64(w))*0x1p-8
			}
		}
		if !elementsOK {
			off = append(off, fmt.Sprintf("%s (%s values off by more than its rounding)", name, dt))
			continue
		}
		var typ weights.GGMLType
		for t := range quantLevels {
			if t.String() == dt {
				typ = t
			}
		}
		step, quant := quantLevels[typ]
		if !quant {
			exact[dt]++
			continue
		}
		ratio := 0.0
		if amax > 0 {
			ratio = math.Sqrt(se/float64(len(x))) / (step * amax / math.Sqrt(12))
		}
		worst[dt] = max(worst[dt], ratio)
		if ratio > 1.15 {
			off = append(off, fmt.Sprintf("%s (%s: RMS error %.3g times the rounding bound)", name, dt, ratio))
		}
	}
	var parts []string
	for _, dt := range slices.Sorted(maps.Keys(worst)) {
		parts = append(parts, fmt.Sprintf("%s %.3g", dt, worst[dt]))
	}
	for _, dt := range slices.Sorted(maps.Keys(exact)) {
		how := "within rounding"
		if dt == "F32" {
			how = "exact"
		}
		parts = append(parts, fmt.Sprintf("%s ×%d %s", dt, exact[dt], how))
	}
	line = "largest RMS error / rounding bound: " + strings.Join(parts, ", ")
	if len(off) > 0 {
		line += "; off: " + strings.Join(off, "; ")
	}
	return line, len(off) == 0, nil
}
