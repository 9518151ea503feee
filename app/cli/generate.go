package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"verdict/engine/models"
	promptpkg "verdict/engine/prompt"
	"verdict/engine/scorer"
	"verdict/engine/session"
)

func generateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("generate", stderr)
	model := fs.String("model", models.Builtin, "model folder (Hugging Face Gemma 3n checkpoint or synthetic fixture), or builtin")
	wf := addWeightFlags(fs)
	prompt := fs.String("prompt", "", "the user's message")
	system := fs.String("system", "", "optional system message")
	raw := fs.Bool("raw", false, "send the prompt as it is, without the chat format")
	maxTokens := fs.Int("max-tokens", 128, "most tokens to generate")
	temp := fs.Float64("temperature", 1.0, "sampling temperature; 0 means greedy")
	topK := fs.Int("top-k", 64, "keep the k most likely tokens (0: off)")
	topP := fs.Float64("top-p", 0.95, "keep the smallest set of tokens with this much probability (1: off)")
	seed := fs.Uint64("seed", 0, "sampling seed")
	mf := addMediaFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if strings.TrimSpace(*prompt) == "" && !mf.any() {
		return usageErr("--prompt is required (or media: --image, --audio, --video)")
	}
	if !utf8.ValidString(*prompt) || !utf8.ValidString(*system) {
		return usageErr("--prompt and --system must be valid UTF-8 text")
	}
	if fs.NArg() != 0 {
		return usageErr("unexpected arguments %v", fs.Args())
	}
	m, tok, err := wf.openTok(ctx, *model, stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	if m.Builtin {
		fmt.Fprintf(stderr, "model: %s — its output is noise, not language\n", m.Name)
	}
	var ids []int32
	var media *scorer.Media
	if mf.any() {
		if *raw {
			return usageErr("--raw takes no media")
		}
		p, err := mf.prepare(ctx, m, stderr)
		if err != nil {
			return err
		}
		// Each media run sized to its item's soft tokens (Gemma 4's vary).
		pr, err := session.ChatPrompt(m.Chat(), &p.Media, *system, *prompt).Sized(m.Chat().Media, p.ImageTokens, p.AudioTokens)
		if err != nil {
			return err
		}
		if ids, err = pr.Encode(tok, m.Chat().Media); err != nil {
			return err
		}
		media = &p.Media
	} else if *raw {
		// --raw sends the text as written, control tokens included; media
		// placeholders without media are refused.
		ids = append([]int32{int32(tok.BOS())}, tok.Encode(*prompt)...)
		if err := promptpkg.CheckMediaIDs(ids, m.Chat().Media, tok); err != nil {
			return fmt.Errorf("--raw prompt: %w", err)
		}
	} else {
		// The model's chat template; media tokens spelled in the text are
		// refused.
		turns := []session.Turn{{Role: "user", Content: *prompt}}
		if ids, err = session.ChatTurnsPrompt(m.Chat(), nil, *system, turns).Encode(tok, m.Chat().Media); err != nil {
			return err
		}
	}
	sm := session.Sampling{MaxTokens: *maxTokens, Temperature: *temp, TopK: *topK, TopP: *topP, Seed: *seed}
	stop := []int32{int32(tok.EOS()), int32(tok.EndOfTurn())}
	dec := tok.NewStreamDecoder()
	res, err := session.GenerateOn(ctx, m, ids, media, sm, stop, prefillProgress(newBar(stderr)), func(id int32) error {
		if id == int32(tok.EndOfTurn()) || id == int32(tok.EOS()) {
			return nil
		}
		_, werr := io.WriteString(stdout, dec.Add(id))
		return werr
	})
	interrupted := err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err())
	if err == nil || interrupted || len(res.IDs) > 0 {
		io.WriteString(stdout, dec.Flush()+"\n")
	}
	switch {
	case interrupted: // Ctrl-C: what was generated is the answer
		fmt.Fprintf(stderr, "interrupted after %d tokens\n", len(res.IDs))
		return nil
	case err != nil: // no speed figures for a run that failed
		return err
	}
	fmt.Fprintf(stderr, "prompt %d tokens, prefill %.1f tokens/s, first token %.0f ms, %d tokens at %.1f tokens/s\n",
		res.PromptTokens, res.PrefillTokensPerSec(), res.FirstToken.Seconds()*1000, len(res.IDs), res.DecodeTokensPerSec())
	return nil
}
