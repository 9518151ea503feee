package ggufwrite

import (
	"fmt"
	"math"
	"strings"
)

// FileTypes are the file types of llama.cpp's tools, which a model's
// layout (engine/gemma3n/gguf.LlamaCpp) makes: F32, F16, BF16 and Q8_0 as
// convert_hf_to_gguf.py's --outtype writes them; Q4_0 and Q4_K as
// llama-quantize makes them from the converter's F16 file (the tensors it
// quantises in that type, the token embeddings in Q6_K as for tied
// embeddings, the others kept as the F16 file has them; Q4_K without the
// Q5_K and Q6_K promotions of llama-quantize's Q4_K_S and Q4_K_M mixes).
// The value is llama.cpp's general.file_type.
var FileTypes = map[string]uint32{"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7, "q4_0": 2, "q4_k": 14}

// Token types of tokenizer.ggml.token_type (SentencePiece's, as gguf-py numbers them).
const (
	TokenNormal      = 1
	TokenUnknown     = 2
	TokenControl     = 3
	TokenUserDefined = 4
	TokenUnused      = 5
	TokenByte        = 6
)

// Vocab is the tokenizer metadata of a llama.cpp "llama" (SentencePiece)
// vocabulary: one entry per id of the model's vocabulary, all texts distinct.
type Vocab struct {
	Tokens []string
	Scores []float32
	Types  []int32
	// UNK is written as tokenizer.ggml.unknown_token_id when >= 0.
	UNK int
	// AddBOS and AddEOS, when set, are written as add_bos_token and add_eos_token.
	AddBOS, AddEOS *bool
}

// SizeLabel is gguf-py's general.size_label of a parameter count: "541K",
// "5.4B" (two significant digits at least).
func SizeLabel(n int64) string {
	x, suffix := float64(n)*1e-3, "K"
	switch {
	case float64(n) > 1e12:
		x, suffix = float64(n)*1e-12, "T"
	case float64(n) > 1e9:
		x, suffix = float64(n)*1e-9, "B"
	case float64(n) > 1e6:
		x, suffix = float64(n)*1e-6, "M"
	}
	digits := len(strings.TrimLeft(fmt.Sprint(int64(math.RoundToEven(x))), "0"))
	return fmt.Sprintf("%.*f%s", max(2-digits, 0), x, suffix)
}
