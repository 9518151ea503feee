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

// openGemma4 loads a Gemma 4 text decoder (engine/gemma4) from st on
// opt's backend, with opt's weights (q4 packed at load, or f32) and group
// size. Packed weights are not cached (opt.CacheDir is not used); packing
// stops with OpenContext's context and reports StagePacking.
func openGemma4(st weights.Store, cfgJSON []byte, opt Options) (model.Model, error) {
	if err := gemma4.CheckWeights(opt.Weights, opt.Group); err != nil {
		return nil, err
	}
	cfg, err := gemma4.ParseConfig(cfgJSON)
	if err != nil {
		return nil, err
	}
	ref, err := gemma4.Load(cfg, st)
	if err != nil {
		return nil, err
	}
	o := gemma4.Options{Backend: opt.Backend, Weights: opt.Weights, Group: opt.Group, Context: opt.ctx}
	if f := opt.Progress; f != nil {
		o.Progress = func(done, total int64) { f(StagePacking, done, total) }
	}
	return gemma4.NewDecoder(ref, o)
}

// checkVocab refuses a tokenizer whose ids reach past the model's
// vocabulary of vocab (one made for another model).
func checkVocab(tok *tokenizer.Tokenizer, vocab int) error {
	if n := tok.VocabSize(); n > vocab {
		return fmt.Errorf("the tokenizer found has %d tokens, more than the model's vocabulary of %d: it is not this model's (put its tokenizer.json in the model folder)", n, vocab)
	}
	return nil
}
