// Package inputs turns a request's media — files decoded by media/, or
// captured frames and audio — into what the engine takes: image and audio
// soft tokens from the model's towers, and the prompt's captions.
package inputs

import (
	"context"
	"errors"
	"fmt"
	"image"
	"time"

	"verdict/engine/scorer"
	"verdict/engine/session"
	"verdict/media"
	"verdict/media/decode"
	"verdict/media/limits"
	"verdict/media/video"
)

// Files reads image, audio and video files into a media.Input, enforcing
// its limits (8 images, one audio clip of at most 30 s, one video: 60 s
// silent or 30 s with sound, one audio source).
func Files(ctx context.Context, images []string, audioPath, videoPath string) (*media.Input, error) {
	in := &media.Input{}
	for _, p := range images {
		img, _, err := decode.ImageFile(p)
		if err != nil {
			return nil, err
		}
		if err := in.AddImage(p, img); err != nil {
			return nil, err
		}
	}
	if audioPath != "" {
		snd, err := decode.AudioFile(audioPath, limits.MaxAudio)
		if err != nil {
			return nil, err
		}
		if err := in.SetAudio(audioPath, snd.Clip); err != nil {
			return nil, err
		}
	}
	if videoPath != "" {
		r, err := video.NewReader()
		if err != nil {
			return nil, err
		}
		v, err := r.Load(ctx, videoPath, video.Options{})
		if err != nil {
			return nil, err
		}
		if err := in.SetVideo(v); err != nil {
			return nil, err
		}
	}
	return in, in.Validate()
}

// Prepared is a request's media ready for the engine.
type Prepared struct {
	scorer.Media
	Duration time.Duration // time spent in the towers
	// Items are the images, video frames and audio in the order they went
	// through their towers, each with its time.
	Items []Item
}

// Item is one image, video frame or clip's pass through its tower.
type Item struct {
	What     string        // "image 2", "video frame at 0:03", "audio"
	Duration time.Duration // its tower time (with the tower's load on first use)
	Cached   bool          // its output came from the model's tower cache
}

// Step is the towers' progress: Done of Total items (images, video frames,
// the audio clip) have been through their tower; What names the item now
// running ("" once all are done), whose tower is being loaded (Loading) or
// has done Block of Blocks steps. Items are the finished ones.
type Step struct {
	Done, Total   int
	What          string
	Loading       bool
	Block, Blocks int
	Items         []Item
}

// Progress hears the towers' work.
type Progress func(Step)

// Towers are a model's vision and audio towers and its embedding rows
// (session.Session and models.Model have them). Each item's soft-token
// count goes with the soft tokens (model.Media's ImageTokens and
// AudioTokens): Gemma 4's vary by image size and clip length.
type Towers interface {
	ImageTokens(ctx context.Context, img image.Image, progress session.TowerProgress) (soft []float32, cached bool, err error)
	AudioTokens(ctx context.Context, pcm []float32, progress session.TowerProgress) (soft []float32, cached bool, err error)
	HardEmbed(id int32) ([]float32, error)
	// SoftTokenWidth is the width of one soft token (the decoder's hidden
	// size): an item's soft-token count is its values over it.
	SoftTokenWidth() int
}

// Prepare runs the model's towers on the input: images, then the video's
// frames (captioned with their time), and the one audio source (the clip or
// the video's soundtrack).
func Prepare(m Towers, in *media.Input) (*Prepared, error) {
	return PrepareContext(context.Background(), m, in, nil)
}

// PrepareContext is Prepare one item at a time: ctx stops it between items
// and inside the towers (between blocks), and progress, when set, hears
// each item as it starts, each of its tower's steps, and once at the end.
// Outputs the model has cached are not computed again. The result is the
// same as Prepare's.
func PrepareContext(ctx context.Context, m Towers, in *media.Input, progress Progress) (*Prepared, error) {
	start := time.Now()
	type item struct {
		img  image.Image
		what string
	}
	var items []item
	for i, im := range in.Images {
		items = append(items, item{im.Image, fmt.Sprintf("image %d", i+1)})
	}
	if in.Video != nil {
		for _, f := range in.Video.Frames {
			items = append(items, item{f.Image, "video frame at " + clock(f.Time)})
		}
	}
	captions := Captions(in)
	var pcm []float32
	_, clip, hasSound := in.Sound()
	if hasSound {
		if clip.Rate != 16000 {
			return nil, fmt.Errorf("inputs: audio at %d Hz, want 16000", clip.Rate)
		}
		pcm = clip.Samples
		if pcm == nil {
			pcm = []float32{}
		}
	}
	total := len(items)
	if hasSound {
		total++
	}
	var done []Item
	report := func(st Step) {
		if progress != nil {
			st.Total, st.Done, st.Items = total, len(done), append([]Item(nil), done...)
			progress(st)
		}
	}
	// run passes one item through its tower.
	run := func(what string, tower func(session.TowerProgress) ([]float32, bool, error)) ([]float32, error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		report(Step{What: what})
		t0 := time.Now()
		soft, cached, err := tower(func(loading bool, block, blocks int) {
			report(Step{What: what, Loading: loading, Block: block, Blocks: blocks})
		})
		if err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return nil, err
			}
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		done = append(done, Item{What: what, Duration: time.Since(t0), Cached: cached})
		return soft, nil
	}
	md := &scorer.Media{Captions: captions}
	md.Hard = m.HardEmbed
	for _, it := range items {
		soft, err := run(it.what, func(p session.TowerProgress) ([]float32, bool, error) { return m.ImageTokens(ctx, it.img, p) })
		if err != nil {
			return nil, err
		}
		md.Image = append(md.Image, soft...)
		md.ImageTokens = append(md.ImageTokens, len(soft)/max(1, m.SoftTokenWidth()))
	}
	if hasSound {
		soft, err := run("audio", func(p session.TowerProgress) ([]float32, bool, error) { return m.AudioTokens(ctx, pcm, p) })
		if err != nil {
			return nil, err
		}
		md.Audio = soft
		md.AudioTokens = []int{len(soft) / max(1, m.SoftTokenWidth())}
	}
	report(Step{})
	return &Prepared{Media: *md, Duration: time.Since(start), Items: done}, nil
}

// Captions are the prompt's captions of the input's images in order: none
// for images, "Video frame at m:ss:" for each video frame.
func Captions(in *media.Input) []string {
	var captions []string
	for range in.Images {
		captions = append(captions, "")
	}
	if in.Video != nil {
		for _, f := range in.Video.Frames {
			captions = append(captions, fmt.Sprintf("Video frame at %s:", clock(f.Time)))
		}
	}
	return captions
}

// clock writes a video time as m:ss.
func clock(d time.Duration) string {
	s := int(d.Round(time.Second) / time.Second)
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}
