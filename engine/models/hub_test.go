package models_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"verdict/engine/fixture/testmodel"
	"verdict/engine/hub"
	"verdict/engine/hub/hubtest"
	"verdict/engine/models"
)

// TestOpenRepoID: a model id opens its snapshot in the Hub cache (here
// pulled from a fake Hub serving the micro checkpoint), named by the id;
// an id not in the cache says to pull it.
func TestOpenRepoID(t *testing.T) {
	dir := testmodel.Dir(t, "gemma3n-micro-bf16.tar.gz")
	files := map[string]string{}
	for _, n := range []string{"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"} {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		files[n] = string(b)
	}
	const repo = "test/gemma-3n-micro"
	h := &hubtest.Hub{Repos: map[string]*hubtest.Repo{repo: hubtest.NewRepo(files, "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")}}
	cache := t.TempDir()
	t.Setenv("HF_HUB_CACHE", cache)
	c := &hub.Client{Endpoint: h.Start(t).URL, CacheDir: cache}
	res, err := c.Download(context.Background(), repo, hub.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := models.OpenWith(repo, models.Options{CacheDir: "off"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Name != repo || m.Path != res.Path || m.Config().Layers == 0 {
		t.Errorf("opened %q at %s (%d layers), want %s at %s", m.Name, m.Path, m.Config().Layers, repo, res.Path)
	}
	_, err = models.OpenWith("test/not-pulled", models.Options{CacheDir: "off"})
	if !errors.Is(err, hub.ErrNotCached) || !strings.Contains(err.Error(), "verdict pull test/not-pulled") {
		t.Errorf("an id not in the cache: %v", err)
	}
}
