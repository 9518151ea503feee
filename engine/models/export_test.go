package models

import (
	"context"
	"image"

	"verdict/engine/gemma4"
	"verdict/engine/weights"
	"verdict/native"
)

// AudioFeatureTokens runs a Gemma 4 model's audio tower on log-mel features
// given directly (the tests' way in until the feature extractor lands):
// the clip's kept soft tokens.
func (m *Model) AudioFeatureTokens(feats []float32, mask []bool) ([]float32, bool, error) {
	return m.g4.encodeFeatures(context.Background(), feats, mask, nil)
}

// G4Towers is a Gemma 4 checkpoint's towers alone (gemma4Media) on a
// backend, with a tower cache of their own: the fallback tests'.
type G4Towers struct{ g *gemma4Media }

// NewG4Towers makes the towers of the checkpoint in st (folder dir, config
// cfg, decoder width hidden) on be.
func NewG4Towers(dir string, st weights.Store, cfg []byte, hidden int, be *native.Backend) (*G4Towers, error) {
	out := newOutputCache(DefaultTowerCacheBytes)
	g, err := newGemma4Media("fixture", dir, st, cfg, hidden, be, func() *outputCache { return out })
	return &G4Towers{g}, err
}

func (t *G4Towers) Image(img image.Image) ([]float32, error) {
	s, _, err := t.g.image(context.Background(), img, nil)
	return s, err
}

func (t *G4Towers) Audio(pcm []float32) ([]float32, error) {
	s, _, err := t.g.audioClip(context.Background(), pcm, nil)
	return s, err
}

// On reports the backend each loaded tower runs on and how many encoders
// it retired.
func (t *G4Towers) On() (vision, audio *native.Backend, retired int) {
	if v := t.g.vision.v; v != nil {
		vision, retired = v.get().Backend(), len(v.retired)
	}
	if a := t.g.audio.v; a != nil {
		audio, retired = a.get().Backend(), retired+len(a.retired)
	}
	return vision, audio, retired
}

func (t *G4Towers) Close() { t.g.close() }

// BindVisionTower is bindTower for a vision tower: the backend it bound
// on, and the binding's close.
func BindVisionTower(be *native.Backend, bind func(*native.Backend) (*gemma4.VisionOps, error)) (*native.Backend, func(), error) {
	b, err := bindTower(be, bind)
	if err != nil {
		return nil, nil, err
	}
	return b.get().Backend(), b.close, nil
}
