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

// openGemma4 loads a Gemma 4 text decoder (engine/gemma4) from st: float32
// weights only, on opt's backend.
func openGemma4(st weights.Store, cfgJSON []byte, opt Options) (model.Model, error) {
	if opt.Weights != model.WeightsF32 {
		return nil, fmt.Errorf("gemma4: %s weights are not supported yet: open it with f32 weights (--weights f32)", opt.Weights)
	}
	cfg, err := gemma4.ParseConfig(cfgJSON)
	if err != nil {
		return nil, err
	}
	ref, err := gemma4.Load(cfg, st)
	if err != nil {
		return nil, err
	}
	return gemma4.NewDecoder(ref, gemma4.Options{Backend: opt.Backend})
}

// checkVocab refuses a tokenizer whose ids reach past the model's
// vocabulary of vocab (one made for another model).
func checkVocab(tok *tokenizer.Tokenizer, vocab int) error {
	if n := tok.VocabSize(); n > vocab {
		return fmt.Errorf("the tokenizer found has %d tokens, more than the model's vocabulary of %d: it is not this model's (put its tokenizer.json in the model folder)", n, vocab)
	}
	return nil
}
