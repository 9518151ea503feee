package models

import (
	"encoding/json"
	"fmt"

	"verdict/engine/gemma4"
	"verdict/engine/model"
	"verdict/engine/tokenizer"
	"verdict/engine/weights"
)

// modelType is config.json's model_type ("" when it has none or is not
// JSON: the Gemma 3n parser then says what is wrong).
func modelType(cfgJSON []byte) string {
	var c struct {
		ModelType string `json:"model_type"`
	}
	if json.Unmarshal(cfgJSON, &c) != nil {
		return ""
	}
	return c.ModelType
}

// isGemma4 reports whether config.json is a Gemma 4 model's.
func isGemma4(cfgJSON []byte) bool {
	t := modelType(cfgJSON)
	return t == "gemma4" || t == "gemma4_text"
}

// openGemma4 loads a Gemma 4 decoder (engine/gemma4) from st on opt's
// backend, with opt's weights (q4 packed at load, or f32) and group size.
// A gemma4 config (Gemma4ForConditionalGeneration) gives the decoder its
// media token ids (SetMediaTokens: its Chat then names them; each run's
// soft-token count is per item, prompt.Prompt.Sized) and the model its
// towers (gemma4Media: each loaded on its first input); a gemma4_text
// config is text only. q4 weights are packed into opt.CacheDir's
// packed-weights cache (engine/packcache) under the checkpoint's key, as
// Gemma 3n's, and mapped from it on later loads; packing stops with
// OpenContext's context and reports StagePacking.
func openGemma4(st weights.Store, cfgJSON []byte, opt Options, spec string, m *Model) (model.Model, error) {
	if err := gemma4.CheckWeights(opt.Weights, opt.Group); err != nil {
		return nil, err
	}
	cfg, err := gemma4.ParseConfig(cfgJSON)
	if err != nil {
		return nil, err
	}
	var media *gemma4.MediaTokens
	if modelType(cfgJSON) == "gemma4" {
		t, err := gemma4.ParseMediaTokens(cfgJSON)
		if err != nil {
			return nil, err
		}
		media = &t
	}
	o := gemma4.Options{Backend: opt.Backend, Weights: opt.Weights, Group: opt.Group, Context: opt.ctx, Log: opt.Log}
	if opt.Weights == model.WeightsQ4 && opt.CacheDir != "" {
		o.CacheDir, o.CacheName = opt.CacheDir, cacheName(spec, m)
		if o.CacheKey, err = cacheKey(spec, m, cfgJSON); err != nil {
			return nil, err
		}
	}
	if f := opt.Progress; f != nil {
		o.Progress = func(done, total int64) { f(StagePacking, done, total) }
	}
	d, err := gemma4.Open(cfg, st, o) // st stays open with the model: the per-layer rows are read from it
	if err != nil {
		return nil, err
	}
	if media != nil {
		if err := d.SetMediaTokens(*media); err != nil {
			d.Close()
			return nil, err
		}
	}
	return d, nil
}

// checkVocab refuses a tokenizer whose ids reach past the model's
// vocabulary of vocab (one made for another model).
func checkVocab(tok *tokenizer.Tokenizer, vocab int) error {
	if n := tok.VocabSize(); n > vocab {
		return fmt.Errorf("the tokenizer found has %d tokens, more than the model's vocabulary of %d: it is not this model's (put its tokenizer.json in the model folder)", n, vocab)
	}
	return nil
}
