package models_test

import (
	"context"
	"errors"
	"image"
	"math"
	"testing"
	"time"

	"verdict/engine/audio"
	"verdict/engine/gemma3n"
	"verdict/engine/models"
	"verdict/engine/vision"
)

// TestOpenContextCancelled: a load stopped while packing returns the
// context's error.
func TestOpenContextCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var stages []string
	_, err := models.OpenContext(ctx, models.Builtin, models.Options{CacheDir: "off", Progress: func(stage string, done, total int64) {
		stages = append(stages, stage)
		cancel()
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled open: %v", err)
	}
	if len(stages) != 1 || stages[0] != gemma3n.StagePacking {
		t.Errorf("stages heard %q, want one %q", stages, gemma3n.StagePacking)
	}
}

// TestTowerCancelAndCache: the vision tower stops between blocks when its
// context is done (and its load is tried again later); the audio tower's
// output is kept per clip.
func TestTowerCancelAndCache(t *testing.T) {
	m, err := models.Open(models.Builtin)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var steps int
	var at time.Time
	_, _, err = m.ImageTokens(ctx, image.NewRGBA(image.Rect(0, 0, 8, 8)), func(loading bool, done, total int) {
		if !loading {
			steps = done
			if done == 3 {
				at = time.Now()
				cancel()
			}
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled image: %v", err)
	}
	if steps != 3 {
		t.Errorf("the tower went on to step %d after the cancel at step 3", steps)
	}
	if d := time.Since(at); d > time.Second {
		t.Errorf("the tower stopped %v after the cancel", d)
	}

	clip := make([]float32, 16000)
	for i := range clip {
		clip[i] = float32(0.3 * math.Sin(float64(i)*0.05))
	}
	var heard int
	first, cached, err := m.AudioTokens(context.Background(), clip, func(bool, int, int) { heard++ })
	if err != nil || cached || heard == 0 {
		t.Fatalf("first clip: cached %v, %d progress calls, %v", cached, heard, err)
	}
	heard = 0
	again, cached, err := m.AudioTokens(context.Background(), clip, func(bool, int, int) { heard++ })
	if err != nil || !cached || heard != 0 || &again[0] != &first[0] {
		t.Errorf("same clip: cached %v, %d progress calls, %v", cached, heard, err)
	}
	clip[5] += 0.01
	if _, cached, _ := m.AudioTokens(context.Background(), clip, nil); cached {
		t.Error("a changed clip came from the cache")
	}
	m.ClearTowerCache()
	clip[5] -= 0.01
	if _, cached, _ := m.AudioTokens(context.Background(), clip, nil); cached {
		t.Error("the cache answered after it was cleared")
	}
}

// TestCloseClosesTowers: closing the model closes the towers it loaded
// (their weights on the backend freed): their passes then fail with
// ErrClosed.
func TestCloseClosesTowers(t *testing.T) {
	m, err := models.Open(models.Builtin)
	if err != nil {
		t.Fatal(err)
	}
	vt, err := m.VisionTower()
	if err != nil {
		t.Fatal(err)
	}
	at, err := m.AudioTower()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := vt.Features(make([]float32, 3*vision.ImageSize*vision.ImageSize)); !errors.Is(err, vision.ErrClosed) {
		t.Errorf("vision tower after the model's Close: %v, want ErrClosed", err)
	}
	if _, _, err := at.Encode(make([]float32, 4*at.Cfg.InputFeatSize), []bool{true, true, true, true}); !errors.Is(err, audio.ErrClosed) {
		t.Errorf("audio tower after the model's Close: %v, want ErrClosed", err)
	}
}
