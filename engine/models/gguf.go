package models

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"verdict/engine/gemma3n"
	"verdict/engine/gemma4"
	gemma4gguf "verdict/engine/gemma4/gguf"
	"verdict/engine/model"
	"verdict/engine/tokenizer"
	"verdict/engine/weights"
)

// GGUF models: a .gguf file (llama.cpp's gemma3n or gemma4 architecture,
// as Ollama and LM Studio keep models), or a folder holding one and no
// safetensors checkpoint. The weights are read through weights' GGUFStore
// (gemma3n: dequantised, then packed to q4 at load and cached like any
// checkpoint) or engine/gemma4/gguf's Store (gemma4: dequantised, then
// opened as any Gemma 4 checkpoint, openGemma4), the configuration comes
// from the file's metadata. The file's own vocabulary
// is not read: the tokenizer is a tokenizer.json beside it or found as for
// any model (TokenizerPaths).
//
// A gemma4 file's vision and audio towers are in llama.cpp's separate
// mmproj file (mmproj-<model>.gguf, architecture clip): the one such file
// beside the model gives it image and audio input (ggufTowers); with none
// the model takes text only.

// GGUFPath returns the GGUF file spec names: spec itself when it is a GGUF
// file, the folder's one .gguf when spec is a folder without a safetensors
// checkpoint or recipe, else "".
func GGUFPath(spec string) (string, error) {
	fi, err := os.Stat(spec)
	if err != nil {
		return "", nil // the caller reports the path
	}
	if !fi.IsDir() {
		if weights.IsGGUF(spec) {
			return spec, nil
		}
		return "", fmt.Errorf("%s is a file but not a GGUF file: give a model folder or a .gguf file", spec)
	}
	for _, n := range []string{"model.safetensors", "model.safetensors.index.json", "recipe.json"} {
		if _, err := os.Stat(filepath.Join(spec, n)); err == nil {
			return "", nil
		}
	}
	return weights.FindGGUF(spec)
}

// openGGUF opens a GGUF model's store and its config.json: a gemma4 file's
// through engine/gemma4/gguf (its config.json says gemma4_text), any other
// through weights.NewGGUFStore (gemma3n, or an error naming the
// architecture).
func openGGUF(path string) (weights.Store, []byte, error) {
	g, err := weights.OpenGGUFFile(path)
	if err != nil {
		return nil, nil, err
	}
	if g.Arch() == gemma4gguf.Arch {
		s, err := gemma4gguf.New(g)
		if err != nil {
			g.Close()
			return nil, nil, err
		}
		return s, s.ConfigJSON(), nil
	}
	s, err := weights.NewGGUFStore(g)
	if err != nil {
		g.Close()
		return nil, nil, err
	}
	return s, s.ConfigJSON(), nil
}

// ggufTokenizerHint wraps a missing-tokenizer error of a GGUF model.
func ggufTokenizerHint(err error, path string) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w; a GGUF's own vocabulary is not read: put the model's tokenizer.json beside %s", err, filepath.Base(path))
}

// ggufCacheKey identifies a GGUF file for the packed-weights cache: its
// absolute path, size, modification time and content fingerprint.
func ggufCacheKey(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s %d %d\x00", abs, fi.Size(), fi.ModTime().UnixNano())
	if err := fingerprint(h, abs, fi.Size()); err != nil {
		return "", err
	}
	return "gguf:" + hex.EncodeToString(h.Sum(nil)), nil
}

// ggufName is a GGUF model's display name: the file name without .gguf.
func ggufName(path string) string {
	b := filepath.Base(path)
	return strings.TrimSuffix(b, filepath.Ext(b))
}

// checkGGUFTokenizer holds the tokenizer found for a GGUF model m to the
// file's vocabulary (checkGGUFVocab): a Gemma 3n file's below its per-layer
// vocabulary, a Gemma 4 file's below the model's, which a Gemma 4 tokenizer
// may not outgrow (checkVocab).
func checkGGUFTokenizer(st weights.Store, tok *tokenizer.Tokenizer, m model.Model) error {
	if d, ok := m.(*gemma3n.Model); ok {
		return checkGGUFVocab(st, tok, d.Cfg.VocabSizePerLayer)
	}
	if err := checkVocab(tok, m.Config().Vocab); err != nil {
		return err
	}
	return checkGGUFVocab(st, tok, m.Config().Vocab)
}

// checkGGUFVocab holds the tokenizer found for a GGUF model to the file's
// own vocabulary: the first 300 ids and a sample of the rest below both
// vocabularies' ends (and below limit, where the converter's padding
// entries start) must be the same tokens, else the tokenizer belongs to
// another model.
func checkGGUFVocab(st weights.Store, tok *tokenizer.Tokenizer, limit int) error {
	var tokens []string
	var path string
	switch g := st.(type) {
	case *weights.GGUFStore:
		tokens, path = g.Tokens(), g.G.Path
	case *gemma4gguf.Store:
		tokens, path = g.Tokens(), g.Path()
	default:
		return nil
	}
	n := min(len(tokens), tok.VocabSize(), limit)
	for id := 0; id < n; id += max(1, min(id/300, n/509)) { // the first 300 (special and byte tokens), then a sample
		if got := tok.TokenText(int32(id)); got != tokens[id] {
			return fmt.Errorf("the tokenizer.json found does not match %s's vocabulary: token %d is %q there, %q in the GGUF (put the model's own tokenizer.json beside it)", filepath.Base(path), id, got, tokens[id])
		}
	}
	return nil
}

// ggufMediaStrings are the tokens Gemma 4's processor and chat template put
// in a prompt for media (chat.go's constants, and the video placeholder),
// as its tokenizer spells them.
var ggufMediaStrings = []struct{ key, text string }{
	{"boi_token_id", gemma4.BOIToken}, {"eoi_token_id", gemma4.EOIToken}, {"image_token_id", gemma4.ImageToken},
	{"video_token_id", "<|video|>"}, {"boa_token_id", gemma4.BOAToken}, {"eoa_token_id", gemma4.EOAToken},
	{"audio_token_id", gemma4.AudioToken},
}

// ggufTowers gives a gemma4 GGUF model m (its decoder open on st, the text
// config textCfg, its tokenizer read) its towers: those of the one mmproj
// file beside the GGUF (gemma4gguf.FindMMProj; several are refused), whose
// soft tokens must be as wide as the decoder's hidden size, with the
// config rebuilt from its metadata and the processor settings of a
// processor_config.json beside the GGUF (readProcessor; the processor's
// defaults without one, as a GGUF carries none). The media token ids are the ids of their strings
// in the GGUF's own vocabulary (ggufMediaTokens), which a tokenizer.json
// found for the model must share (else it is refused as another model's).
// Without an mmproj file the model takes text only, as before. The mmproj
// file closes with the model.
func ggufTowers(m *Model, st weights.Store, textCfg []byte) (*gemma4Media, error) {
	text := func() (*gemma4Media, error) {
		return newGemma4Media(m.Name, "", st, textCfg, m.Config().Hidden, m.Backend(), m.outputs)
	}
	s, ok := st.(*gemma4gguf.Store)
	d, isDec := m.Model.(*gemma4.Decoder)
	if !ok || !isDec {
		return text()
	}
	mm, err := gemma4gguf.FindMMProj(filepath.Dir(m.gguf))
	if err != nil {
		return nil, err
	}
	if mm == "" {
		return text()
	}
	p, err := gemma4gguf.OpenMMProj(mm)
	if err != nil {
		return nil, err
	}
	g, err := mmprojTowers(m, d, s, p, textCfg)
	if err != nil {
		p.Close()
		return nil, err
	}
	return g, nil
}

// mmprojTowers checks the mmproj p against the model and builds its towers
// (see ggufTowers); the caller closes p on error.
func mmprojTowers(m *Model, d *gemma4.Decoder, s *gemma4gguf.Store, p *gemma4gguf.MMProj, textCfg []byte) (*gemma4Media, error) {
	mm, model := filepath.Base(p.Path()), filepath.Base(m.gguf)
	var c struct {
		Text struct {
			Hidden int `json:"hidden_size"`
		} `json:"text_config"`
	}
	if err := json.Unmarshal(p.ConfigJSON(), &c); err != nil {
		return nil, fmt.Errorf("%s: %w", mm, err)
	}
	hidden := m.Config().Hidden
	if c.Text.Hidden != hidden {
		return nil, fmt.Errorf("%s gives soft tokens of %d (clip.*.projection_dim) but %s's hidden size is %d: the mmproj file belongs to another model (move it away to open this one as text only)", mm, c.Text.Hidden, model, hidden)
	}
	t, err := ggufMediaTokens(s.Tokens(), m.Config().Vocab, textCfg)
	if err != nil {
		return nil, fmt.Errorf("%s with %s: %w (move the mmproj file away to open the model as text only)", model, mm, err)
	}
	if err := d.SetMediaTokens(t); err != nil {
		return nil, fmt.Errorf("%s with %s: %w", model, mm, err)
	}
	if m.Tok != nil {
		for _, f := range []struct {
			id   int
			text string
		}{{t.BOI, gemma4.BOIToken}, {t.EOI, gemma4.EOIToken}, {t.Image, gemma4.ImageToken}, {t.BOA, gemma4.BOAToken}, {t.EOA, gemma4.EOAToken}, {t.Audio, gemma4.AudioToken}} {
			if got := m.Tok.TokenText(int32(f.id)); got != f.text {
				m.Tok, m.TokErr = nil, fmt.Errorf("the tokenizer.json found does not match %s's vocabulary: token %d is %q there, %q in the GGUF (put the model's own tokenizer.json beside it)", model, f.id, got, f.text)
				break
			}
		}
	}
	g, err := newGemma4Media(m.Name, filepath.Dir(m.gguf), p, p.ConfigJSON(), hidden, m.Backend(), m.outputs)
	if err != nil {
		return nil, err
	}
	g.closer, g.mmproj = p, p.Path()
	return g, nil
}

// ggufMediaTokens finds Gemma 4's media tokens (ggufMediaStrings) in a GGUF
// vocabulary, the file's own (tokenizer.ggml.tokens, which llama.cpp's
// converter copies from the model's tokenizer), and checks them as
// gemma4.ParseMediaTokens checks a config's (ids within vocab, placeholders
// distinct); textCfg's use_bidirectional_attention carries over. A string
// missing, or present twice, is refused: the ids would be guesses.
func ggufMediaTokens(tokens []string, vocab int, textCfg []byte) (gemma4.MediaTokens, error) {
	ids := make(map[string]int, len(ggufMediaStrings))
	for _, f := range ggufMediaStrings {
		ids[f.text] = -1
	}
	for id, s := range tokens {
		if prev, ok := ids[s]; ok {
			if prev >= 0 {
				return gemma4.MediaTokens{}, fmt.Errorf("the GGUF's vocabulary holds %q twice (tokens %d and %d)", s, prev, id)
			}
			ids[s] = id
		}
	}
	var t struct {
		Bidirectional *string `json:"use_bidirectional_attention"`
	}
	if err := json.Unmarshal(textCfg, &t); err != nil {
		return gemma4.MediaTokens{}, err
	}
	cfg := map[string]any{"model_type": "gemma4", "text_config": map[string]any{"vocab_size": vocab, "use_bidirectional_attention": t.Bidirectional}}
	for _, f := range ggufMediaStrings {
		id := ids[f.text]
		if id < 0 {
			return gemma4.MediaTokens{}, fmt.Errorf("the GGUF's vocabulary (tokenizer.ggml.tokens) has no %q token, so its %s is unknown", f.text, f.key)
		}
		cfg[f.key] = id
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		return gemma4.MediaTokens{}, err
	}
	return gemma4.ParseMediaTokens(js)
}
