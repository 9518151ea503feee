package models

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"verdict/engine/hub"
	"verdict/engine/hub/hubtest"
)

// TestPullGemma4: a Gemma 4 repo id pulled from a fake Hub lands in the Hub
// cache, where discovery lists it by its id as a Gemma 4 model and its
// snapshot's config says Gemma 4; a repo of another family is named as
// such.
func TestPullGemma4(t *testing.T) {
	root := t.TempDir()
	serve := func(modelType string) *hubtest.Repo {
		dir := filepath.Join(root, modelType)
		writeCheckpoint(t, dir, modelType, "bfloat16", []string{"model.language_model.embed_tokens.weight"}, false)
		files := map[string]string{}
		for _, n := range []string{"config.json", "model.safetensors"} {
			b, err := os.ReadFile(filepath.Join(dir, n))
			if err != nil {
				t.Fatal(err)
			}
			files[n] = string(b)
		}
		return hubtest.NewRepo(files, "model.safetensors")
	}
	const repo, other = "google/gemma-4-E2B-it", "meta/llama"
	h := &hubtest.Hub{Repos: map[string]*hubtest.Repo{repo: serve("gemma4"), other: serve("llama")}}
	cache := filepath.Join(root, "cache")
	c := &hub.Client{Endpoint: h.Start(t).URL, CacheDir: cache}
	res, err := c.Download(context.Background(), repo, hub.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if f, err := SnapshotFamily(res.Path); err != nil || f != FamilyGemma4 {
		t.Errorf("the snapshot's family %q, %v; want %q", f, err, FamilyGemma4)
	}
	got := Discover(Places{HubCache: cache})
	if len(got) != 1 || got[0].Spec != repo || got[0].Family != FamilyGemma4 || got[0].Path != res.Path {
		t.Errorf("discovered %+v, want %s as a Gemma 4 model at %s", got, repo, res.Path)
	}
	res, err = c.Download(context.Background(), other, hub.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if f, err := SnapshotFamily(res.Path); err == nil || !strings.Contains(err.Error(), `model_type "llama"`) {
		t.Errorf("a Llama snapshot: family %q, error %v; want one naming its model_type", f, err)
	}
	if _, err := SnapshotFamily(root); err == nil {
		t.Error("a folder with no config.json gave no error")
	}
}

// TestRepoFamily: the released Gemma 3n and Gemma 4 repo ids have their
// family (with a revision too); other ids have none.
func TestRepoFamily(t *testing.T) {
	for spec, want := range map[string]string{
		"google/gemma-3n-E2B-it":      FamilyGemma3n,
		"google/gemma-3n-E4B":         FamilyGemma3n,
		"google/gemma-4-E2B-it":       FamilyGemma4,
		"google/gemma-4-E4B-it@main":  FamilyGemma4,
		"google/gemma-4-26B-A4B-it":   FamilyGemma4,
		"google/gemma-4-31B":          FamilyGemma4,
		"google/gemma-4-12B-it":       "",
		"google/gemma-3-4b-it":        "",
		"not a repo":                  "",
		"google/gemma-4-E2B-it/extra": "",
	} {
		if got := RepoFamily(spec); got != want {
			t.Errorf("RepoFamily(%q) = %q, want %q", spec, got, want)
		}
	}
	seen := map[string]bool{}
	for _, k := range KnownRepos {
		if seen[k.Repo] || !hub.ValidRepo(k.Repo) || FamilyName(k.Family) == k.Family || !strings.HasPrefix(k.Title, FamilyName(k.Family)+" ") {
			t.Errorf("known repo %+v: repeated, not an id, or its family and title disagree", k)
		}
		seen[k.Repo] = true
	}
}
