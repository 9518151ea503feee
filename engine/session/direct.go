package session

import (
	"context"

	"verdict/engine/generate"
	"verdict/engine/model"
	"verdict/engine/models"
	"verdict/engine/scorer"
)

// GenerateOn generates from the prompt ids on the opened model m alone: no
// session, no scheduler and no prompt built here (`verdict generate` builds
// its own, opens the model by itself and runs it so). It stops after
// sm.MaxTokens, after one of the stop ids, when emit (which hears each id as
// it is chosen) returns an error, or when ctx is done (returning ctx's error
// with what was generated so far). media (nil: a text-only prompt) are the
// soft tokens of the prompt's image and audio placeholders; onPrefill, when
// set, hears the prefill: decoder layers done of those it runs, after each.
// The Result has no Tail: ids are not decoded here.
func GenerateOn(ctx context.Context, m *models.Model, ids []int32, media *scorer.Media, sm Sampling, stop []int32,
	onPrefill func(done, total int), emit func(id int32) error) (Result, error) {
	var md *model.Media
	if media != nil {
		md = &media.Media
	}
	opt := generate.Options{
		MaxTokens: sm.MaxTokens, Temperature: sm.Temperature, TopK: sm.TopK, TopP: sm.TopP, Seed: sm.Seed,
		Stop: stop, Media: md, OnPrefill: onPrefill, Logprobs: sm.Logprobs, TopLogprobs: sm.TopLogprobs,
	}
	res, err := generate.Run(ctx, m.Model, ids, opt, func(t generate.Token) error {
		if emit == nil {
			return nil
		}
		return emit(t.ID)
	})
	return Result{
		IDs: res.IDs, Stopped: res.Stopped, PromptTokens: res.PromptLen,
		Prefill: res.Prefill, FirstToken: res.FirstToken, Decode: res.Decode, Total: res.Total,
	}, err
}
