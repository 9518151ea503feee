package audio

import (
	"fmt"
	"strconv"
	"strings"

	"verdict/engine/weights"
)

// checkCheckpoint holds the config's layer count and sizes to the
// checkpoint's tensor shapes (headers only, nothing read), naming the field
// and both values, before anything is sized by the config.
func checkCheckpoint(store weights.Store, cfg Config) error {
	n := 0
	for _, name := range store.Names() {
		rest, ok := strings.CutPrefix(name, towerPrefix+"conformer.")
		if !ok {
			continue
		}
		num, _, _ := strings.Cut(rest, ".")
		if i, err := strconv.Atoi(num); err == nil && i >= 0 && i+1 > n {
			n = i + 1
		}
	}
	if n != cfg.NumLayers {
		return fmt.Errorf("audio: config conf_num_hidden_layers is %d but the checkpoint has %d conformer layers (%sconformer.N)", cfg.NumLayers, n, towerPrefix)
	}
	dim := func(field string, want int, name string, axis int) error {
		shape, _, ok := store.Info(name)
		if !ok || len(shape) <= axis {
			return nil // the loader reports a missing or malformed tensor by name
		}
		if shape[axis] != want {
			return fmt.Errorf("audio: config %s is %d but the checkpoint's %s has %d in dimension %d", field, want, name, shape[axis], axis)
		}
		return nil
	}
	type dimCheck struct {
		field string
		want  int
		name  string
		axis  int
	}
	checks := []dimCheck{
		{"hidden_size", cfg.HiddenSize, embedPrefix + "hard_embedding_norm.weight", 0},
		{"vocab_size", cfg.VocabSize, embedPrefix + "embedding.weight", 0},
	}
	for i, ch := range cfg.SSCPChannels {
		checks = append(checks, dimCheck{fmt.Sprintf("sscp_conv_channel_size[%d]", i), ch, fmt.Sprintf("%ssubsample_conv_projection.conv_%d.conv.weight", towerPrefix, i), 0})
	}
	if cfg.NumLayers > 0 {
		checks = append(checks, dimCheck{"conf_conv_kernel_size", cfg.ConvKernel, towerPrefix + "conformer.0.lconv1d.depthwise_conv1d.weight", 2})
	}
	for _, ch := range checks {
		if err := dim(ch.field, ch.want, ch.name, ch.axis); err != nil {
			return err
		}
	}
	return nil
}
