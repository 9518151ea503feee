package models

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"math"
	"sync"

	"verdict/engine/audio"
	"verdict/engine/model"
	"verdict/engine/vision"
)

// towers loads the vision and audio towers on first use: a text-only
// request never pays for them. A load stopped by its context is not
// remembered: the next use tries again.
type towers struct {
	visionMu, audioMu   sync.Mutex
	vision              *vision.Tower
	audio               *audio.Tower
	visionErr, audioErr error
}

// close frees the loaded towers' weights on the backend (Model.Close).
func (tw *towers) close() {
	tw.visionMu.Lock()
	if tw.vision != nil {
		tw.vision.Close()
	}
	tw.visionMu.Unlock()
	tw.audioMu.Lock()
	if tw.audio != nil {
		tw.audio.Close()
	}
	tw.audioMu.Unlock()
}

// TowerProgress hears a tower's work on one item: done of total steps;
// loading is true while the tower's weights are read on first use.
type TowerProgress func(loading bool, done, total int)

// DefaultTowerCacheBytes bounds the tower outputs a model keeps (about a
// hundred images or clips of Gemma 3n's).
const DefaultTowerCacheBytes = 256 << 20

// errGemma4Towers is VisionTower's and AudioTower's answer for a Gemma 4
// model: its towers are engine/gemma4's, reached through ImageTokens and
// AudioTokens.
var errGemma4Towers = errors.New("a Gemma 4 model's towers are engine/gemma4's: use ImageTokens and AudioTokens")

// VisionTower returns the model's (Gemma 3n) vision tower, loading it on
// first use.
func (m *Model) VisionTower() (*vision.Tower, error) {
	return m.visionTower(context.Background(), nil)
}

func (m *Model) visionTower(ctx context.Context, progress TowerProgress) (*vision.Tower, error) {
	if m.g4 != nil {
		return nil, errGemma4Towers
	}
	tw := &m.towers
	tw.visionMu.Lock()
	defer tw.visionMu.Unlock()
	if tw.vision != nil || tw.visionErr != nil {
		return tw.vision, tw.visionErr
	}
	var p func(done, total int)
	if progress != nil {
		p = func(done, total int) { progress(true, done, total) }
	}
	t, err := vision.LoadTowerOn(ctx, m.store, m.configJSON, m.Backend(), p)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil, err
		}
		tw.visionErr = fmt.Errorf("%s has no usable vision tower: %w", m.Name, err)
	}
	tw.vision = t
	return tw.vision, tw.visionErr
}

// AudioTower returns the model's (Gemma 3n) audio tower, loading it on
// first use.
func (m *Model) AudioTower() (*audio.Tower, error) {
	if m.g4 != nil {
		return nil, errGemma4Towers
	}
	tw := &m.towers
	tw.audioMu.Lock()
	defer tw.audioMu.Unlock()
	if tw.audio == nil && tw.audioErr == nil {
		tw.audio, tw.audioErr = audio.LoadTowerOn(m.store, m.configJSON, m.Backend())
		if tw.audioErr != nil {
			tw.audioErr = fmt.Errorf("%s has no usable audio tower: %w", m.Name, tw.audioErr)
		}
	}
	return tw.audio, tw.audioErr
}

// encoder is one family's towers as the loader's Model runs them: an
// image or a clip in, its soft tokens out, rows of the decoder's hidden
// width (an item's soft-token count is its rows: for Gemma 3n always the
// config's count, for Gemma 4 the image's size and the clip's length
// decide). gemma3nMedia and gemma4Media implement it.
type encoder interface {
	// inputs reports what the checkpoint's towers accept.
	inputs() (images, audio bool)
	// image encodes one image; cached: from the model's tower cache.
	image(ctx context.Context, img image.Image, progress TowerProgress) (soft []float32, cached bool, err error)
	// audioClip encodes one 16 kHz mono clip (its kept rows).
	audioClip(ctx context.Context, pcm []float32, progress TowerProgress) (soft []float32, cached bool, err error)
	// imageCount and audioCount are the soft tokens of an image of
	// width×height pixels and of a clip of n samples, without encoding.
	imageCount(width, height int) (int, error)
	audioCount(samples int) (int, error)
	// view is what the tower receives of a width×height image (its size
	// checked by imageCount first), render that image (imageview.go).
	view(width, height int) (ImageView, error)
	render(img image.Image) (*image.RGBA, error)
}

// ImageTokenCount is the soft-token count of an image of width×height
// pixels, before encoding: its run in the prompt. Gemma 3n's is the chat
// format's fixed VisionTokens (its processor stretches every image to
// 768×768); Gemma 4's follows the size the processor resizes the image to
// (gemma4.ImageProcessorConfig.TargetSize). A model that takes no images,
// or a size the processor refuses, is an error.
func (m *Model) ImageTokenCount(width, height int) (int, error) {
	return m.enc().imageCount(width, height)
}

// AudioTokenCount is the soft-token count of a 16 kHz mono clip of samples
// samples, before encoding. Gemma 3n's is the chat format's fixed
// AudioTokens; Gemma 4's follows the clip's length (its valid feature
// frames, subsampled four times). A model that takes no audio, or a clip
// the feature extractor refuses (too short, too long), is an error.
func (m *Model) AudioTokenCount(samples int) (int, error) {
	return m.enc().audioCount(samples)
}

// enc is the model's family's encoder.
func (m *Model) enc() encoder {
	if m.g4 != nil {
		return m.g4
	}
	return gemma3nMedia{m}
}

// gemma3nMedia is Gemma 3n's towers (engine/vision, engine/audio) on the
// model's backend, loaded on first use.
type gemma3nMedia struct{ m *Model }

// Inputs reports what the model accepts besides text, from what its
// checkpoint holds.
func (m *Model) Inputs() (images, audio bool) { return m.enc().inputs() }

func (g gemma3nMedia) inputs() (images, audio bool) {
	_, _, images = g.m.store.Info("model.vision_tower.timm_model.conv_stem.conv.weight")
	_, _, audio = g.m.store.Info("model.audio_tower.subsample_conv_projection.conv_0.conv.weight")
	return images, audio
}

// ImageTokens runs one image through the image processor and the vision
// tower: its soft tokens [n, D], n the chat format's VisionTokens (Gemma
// 3n) or the image's count (Gemma 4: len(soft)/D). An image the model has
// encoded before (the same pixels after preprocessing) comes from the
// model's tower cache: cached is then true. ctx stops the tower (Gemma 3n:
// between blocks); progress, when set, hears its steps. The result must
// not be modified.
func (m *Model) ImageTokens(ctx context.Context, img image.Image, progress TowerProgress) (soft []float32, cached bool, err error) {
	return m.enc().image(ctx, img, progress)
}

func (g gemma3nMedia) imageCount(width, height int) (int, error) {
	if images, _ := g.inputs(); !images {
		return 0, fmt.Errorf("%s has no vision tower: it takes no images", g.m.Name)
	}
	if width < 1 || height < 1 {
		return 0, fmt.Errorf("an image of %dx%d pixels", width, height)
	}
	return g.m.Chat().Media.VisionTokens, nil
}

func (g gemma3nMedia) audioCount(samples int) (int, error) {
	if _, audio := g.inputs(); !audio {
		return 0, fmt.Errorf("%s has no audio tower: it takes no audio", g.m.Name)
	}
	if samples < 1 {
		return 0, fmt.Errorf("a clip of %d samples", samples)
	}
	return g.m.Chat().Media.AudioTokens, nil
}

func (g gemma3nMedia) image(ctx context.Context, img image.Image, progress TowerProgress) (soft []float32, cached bool, err error) {
	m := g.m
	vt, err := m.visionTower(ctx, progress)
	if err != nil {
		return nil, false, err
	}
	px := vision.Preprocess(img)
	key := outputKey('v', px)
	if v, ok := m.outputs().get(key); ok {
		return v, true, nil
	}
	var p func(done, total int)
	if progress != nil {
		p = func(done, total int) { progress(false, done, total) }
	}
	if soft, err = vt.SoftTokensContext(ctx, px, p); err != nil {
		return nil, false, err
	}
	m.outputs().put(key, soft)
	return soft, false, nil
}

// AudioTokens runs a 16 kHz mono clip through the feature extractor and
// the audio tower: its soft tokens [n, D] (Gemma 3n: the config's
// AudioTokens; Gemma 4: the clip's kept frames), from the tower cache when
// the model has encoded the same samples before (cached true). ctx stops
// the tower between layers. The result must not be modified.
func (m *Model) AudioTokens(ctx context.Context, pcm []float32, progress TowerProgress) (soft []float32, cached bool, err error) {
	return m.enc().audioClip(ctx, pcm, progress)
}

func (g gemma3nMedia) audioClip(ctx context.Context, pcm []float32, progress TowerProgress) (soft []float32, cached bool, err error) {
	m := g.m
	at, err := m.AudioTower()
	if err != nil {
		return nil, false, err
	}
	key := outputKey('a', pcm)
	if v, ok := m.outputs().get(key); ok {
		return v, true, nil
	}
	var p func(done, total int)
	if progress != nil {
		p = func(done, total int) { progress(false, done, total) }
	}
	if soft, err = at.SoftTokensContext(ctx, pcm, p); err != nil {
		return nil, false, err
	}
	m.outputs().put(key, soft)
	return soft, false, nil
}

// Media runs the towers: every image through the image processor and the
// vision tower, the audio clip (16 kHz mono, nil for none) through the
// feature extractor and the audio tower. The result is what the decoder
// merges at the prompt's placeholders, with each item's soft-token count
// (model.Media's ImageTokens and AudioTokens) for a model whose counts
// vary (Gemma 4; Gemma 3n's are the config's and left unset).
func (m *Model) Media(images []image.Image, pcm []float32) (*model.Media, error) {
	return m.MediaContext(context.Background(), images, pcm)
}

// MediaContext is Media stopped by ctx, inside the towers too.
func (m *Model) MediaContext(ctx context.Context, images []image.Image, pcm []float32) (*model.Media, error) {
	md := &model.Media{}
	for i, img := range images {
		soft, _, err := m.ImageTokens(ctx, img, nil)
		if err != nil {
			if errors.Is(err, ctx.Err()) && ctx.Err() != nil {
				return nil, err
			}
			return nil, fmt.Errorf("image %d: %w", i+1, err)
		}
		md.Image = append(md.Image, soft...)
		if m.g4 != nil {
			md.ImageTokens = append(md.ImageTokens, len(soft)/m.Config().Hidden)
		}
	}
	if pcm != nil {
		soft, _, err := m.AudioTokens(ctx, pcm, nil)
		if err != nil {
			return nil, fmt.Errorf("audio: %w", err)
		}
		md.Audio = soft
		if m.g4 != nil {
			md.AudioTokens = []int{len(soft) / m.Config().Hidden}
		}
	}
	md.Hard = m.HardEmbed
	return md, nil
}

// HardEmbed embeds a multimodal control token (model.Media.Hard). Gemma
// 4's begin and end tokens are ordinary tokens: their scaled token
// embedding (its AddMultimodal does not call Hard).
func (m *Model) HardEmbed(id int32) ([]float32, error) {
	if m.g4 != nil {
		return m.Embed([]int32{id})
	}
	audioFirst := int32(m.Chat().Media.EOA) // the audio vocabulary starts at <end_of_audio>
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

// outputs returns the model's tower cache.
func (m *Model) outputs() *outputCache {
	m.outOnce.Do(func() {
		n := m.towerCacheBytes
		if n == 0 {
			n = DefaultTowerCacheBytes
		}
		m.out = newOutputCache(n)
	})
	return m.out
}

// ClearTowerCache forgets the model's cached tower outputs.
func (m *Model) ClearTowerCache() { m.outputs().clear() }

// outputKey identifies a tower input: its kind and a hash of its values.
func outputKey(kind byte, x []float32) [32]byte {
	h := sha256.New()
	h.Write([]byte{kind})
	var b [4096]byte
	for len(x) > 0 {
		n := min(len(x), len(b)/4)
		for i, v := range x[:n] {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		h.Write(b[:4*n])
		x = x[n:]
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// outputCache keeps tower outputs by input, least recently used first out,
// within a bound on their bytes.
type outputCache struct {
	mu    sync.Mutex
	max   int64
	used  int64
	order *list.List // of *outputEntry, most recent first
	byKey map[[32]byte]*list.Element
}

type outputEntry struct {
	key [32]byte
	v   []float32
}

func newOutputCache(max int64) *outputCache {
	return &outputCache{max: max, order: list.New(), byKey: map[[32]byte]*list.Element{}}
}

func (c *outputCache) get(k [32]byte) ([]float32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[k]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*outputEntry).v, true
}

// put keeps v unless it alone exceeds the bound, dropping the least
// recently used entries to make room.
func (c *outputCache) put(k [32]byte, v []float32) {
	n := int64(len(v)) * 4
	c.mu.Lock()
	defer c.mu.Unlock()
	if n > c.max || c.byKey[k] != nil {
		return
	}
	for c.used+n > c.max {
		last := c.order.Back()
		old := last.Value.(*outputEntry)
		c.order.Remove(last)
		delete(c.byKey, old.key)
		c.used -= int64(len(old.v)) * 4
	}
	c.byKey[k] = c.order.PushFront(&outputEntry{key: k, v: v})
	c.used += n
}

func (c *outputCache) clear() {
	c.mu.Lock()
	c.order.Init()
	clear(c.byKey)
	c.used = 0
	c.mu.Unlock()
}

// len and bytes report the cache's size (tests).
func (c *outputCache) size() (entries int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byKey), c.used
}

// SoftTokenWidth is the width of a soft token, the decoder's hidden size:
// an image's or clip's soft-token count is its values over it.
func (m *Model) SoftTokenWidth() int { return m.Config().Hidden }
