package models

import "context"

// AudioFeatureTokens runs a Gemma 4 model's audio tower on log-mel features
// given directly (the tests' way in until the feature extractor lands):
// the clip's kept soft tokens.
func (m *Model) AudioFeatureTokens(feats []float32, mask []bool) ([]float32, bool, error) {
	return m.g4.encodeFeatures(context.Background(), feats, mask, nil)
}
