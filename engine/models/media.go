package models

import (
	"fmt"
	"image"
	"sync"

	"verdict/engine/audio"
	"verdict/engine/gemma3n"
	"verdict/engine/vision"
)

// towers loads the vision and audio towers on first use: a text-only
// request never pays for them.
type towers struct {
	visionOnce, audioOnce sync.Once
	vision                *vision.Tower
	audio                 *audio.Tower
	visionErr, audioErr   error
}

// VisionTower returns the model's vision tower, loading it on first use.
func (m *Model) VisionTower() (*vision.Tower, error) {
	m.towers.visionOnce.Do(func() {
		m.towers.vision, m.towers.visionErr = vision.LoadTower(m.store, m.configJSON)
		if m.towers.visionErr != nil {
			m.towers.visionErr = fmt.Errorf("%s has no usable vision tower: %w", m.Name, m.towers.visionErr)
		}
	})
	return m.towers.vision, m.towers.visionErr
}

// AudioTower returns the model's audio tower, loading it on first use.
func (m *Model) AudioTower() (*audio.Tower, error) {
	m.towers.audioOnce.Do(func() {
		m.towers.audio, m.towers.audioErr = audio.LoadTower(m.store, m.configJSON)
		if m.towers.audioErr != nil {
			m.towers.audioErr = fmt.Errorf("%s has no usable audio tower: %w", m.Name, m.towers.audioErr)
		}
	})
	return m.towers.audio, m.towers.audioErr
}

// Inputs reports what the model accepts besides text, from what its
// checkpoint holds.
func (m *Model) Inputs() (images, audio bool) {
	_, _, images = m.store.Info("model.vision_tower.timm_model.conv_stem.conv.weight")
	_, _, audio = m.store.Info("model.audio_tower.subsample_conv_projection.conv_0.conv.weight")
	return images, audio
}

// Media runs the towers: every image through the image processor and the
// vision tower, the audio clip (16 kHz mono, nil for none) through the
// feature extractor and the audio tower. The result is what the decoder
// merges at the prompt's placeholders.
func (m *Model) Media(images []image.Image, pcm []float32) (*gemma3n.Media, error) {
	md := &gemma3n.Media{}
	var vt *vision.Tower
	var at *audio.Tower
	var err error
	if len(images) > 0 {
		if vt, err = m.VisionTower(); err != nil {
			return nil, err
		}
		for i, img := range images {
			soft, err := vt.SoftTokens(vision.Preprocess(img))
			if err != nil {
				return nil, fmt.Errorf("image %d: %w", i+1, err)
			}
			md.Image = append(md.Image, soft...)
		}
	}
	if pcm != nil {
		if at, err = m.AudioTower(); err != nil {
			return nil, err
		}
		if md.Audio, err = at.SoftTokens(pcm); err != nil {
			return nil, fmt.Errorf("audio: %w", err)
		}
	}
	audioFirst := int32(m.Special.EOA) // the audio vocabulary starts at <end_of_audio>
	md.Hard = func(id int32) ([]float32, error) {
		if id >= audioFirst && audioFirst > 0 {
			t, err := m.AudioTower()
			if err != nil {
				return nil, err
			}
			return t.HardEmbed(id)
		}
		t, err := m.VisionTower()
		if err != nil {
			return nil, err
		}
		return t.HardEmbed(id), nil
	}
	return md, nil
}
