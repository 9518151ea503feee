package model

import "fmt"

// Weights is how a model keeps its large matrices.
type Weights string

const (
	// WeightsF32 keeps the matrices as the checkpoint stores them (float32,
	// or bfloat16 widened on the fly), computing in float32: the exact path
	// the reference fixtures are checked with.
	WeightsF32 Weights = "f32"
	// WeightsQ4 packs every large matrix to 4 bits at load: groups of
	// columns share a float32 scale and offset. Activations and small
	// parameters stay float32.
	WeightsQ4 Weights = "q4"
)

// ParseWeights reads a --weights value: "f32" or "q4".
func ParseWeights(s string) (Weights, error) {
	switch Weights(s) {
	case WeightsF32, WeightsQ4:
		return Weights(s), nil
	}
	return "", fmt.Errorf("weights %q: want f32 or q4", s)
}
