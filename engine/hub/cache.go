package hub

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"verdict/engine/safefile"
)

// ErrNotCached is wrapped by Resolve's error for a repo not in the cache.
var ErrNotCached = errors.New("not downloaded")

// Snapshot is one downloaded revision of a repo in the cache.
type Snapshot struct {
	Repo   string `json:"repo"`
	Commit string `json:"commit"`
	// Refs are the names that point to it (main, a tag).
	Refs []string `json:"refs,omitempty"`
	Path string   `json:"path"`
	// Complete: config.json and every weight file the index names are there.
	Complete bool `json:"complete"`
}

// SplitSpec splits "org/name@revision" into the id and the revision ("" when
// none is given). ok is false when spec is not of that form.
func SplitSpec(spec string) (repo, revision string, ok bool) {
	repo = spec
	if i := strings.IndexByte(spec, '@'); i >= 0 {
		repo, revision = spec[:i], spec[i+1:]
		if checkRevision(revision) != nil {
			return "", "", false
		}
	}
	return repo, revision, ValidRepo(repo)
}

// LooksLikeRepo reports whether spec names a Hub repo rather than a folder:
// it has the form org/name[@revision] and no such path exists.
func LooksLikeRepo(spec string) bool {
	if _, _, ok := SplitSpec(spec); !ok {
		return false
	}
	_, err := os.Lstat(spec)
	return errors.Is(err, os.ErrNotExist)
}

// Resolve finds the snapshot of "org/name[@revision]" in the cache at dir
// ("" for CacheDir()): the commit the revision ("main" when none) points to,
// or the commit itself. It returns a folder that holds config.json and the
// weights, or an error wrapping ErrNotCached that says how to get it.
func Resolve(dir, spec string) (string, error) {
	if dir == "" {
		dir = CacheDir()
	}
	repo, rev, ok := SplitSpec(spec)
	if !ok {
		return "", fmt.Errorf("%q is not a Hugging Face model id (org/name[@revision])", spec)
	}
	if rev == "" {
		rev = "main"
	}
	rd := RepoDir(dir, repo)
	commit := rev
	if !commitRe.MatchString(rev) {
		b, err := safefile.ReadFile(filepath.Join(rd, "refs", filepath.FromSlash(rev)), 256)
		if err != nil {
			return "", fmt.Errorf("%s (revision %s) is %w in %s: run `verdict pull %s`", repo, rev, ErrNotCached, dir, spec)
		}
		commit = strings.TrimSpace(string(b))
		if !commitRe.MatchString(commit) {
			return "", fmt.Errorf("%s: refs/%s holds %q, not a commit", rd, rev, commit)
		}
	}
	snap := filepath.Join(rd, "snapshots", commit)
	if _, err := os.Stat(snap); err != nil {
		return "", fmt.Errorf("%s (revision %s) is %w in %s: run `verdict pull %s`", repo, rev, ErrNotCached, dir, spec)
	}
	if missing := missingFiles(snap); len(missing) > 0 {
		return "", fmt.Errorf("the cached snapshot %s is incomplete (no %s): run `verdict pull %s`", snap, strings.Join(missing, ", "), spec)
	}
	return snap, nil
}

// missingFiles lists what a snapshot lacks for the engine to open it:
// config.json, and the weights (model.safetensors, or every shard its
// index names).
func missingFiles(snap string) []string {
	var missing []string
	if !isFile(filepath.Join(snap, "config.json")) {
		missing = append(missing, "config.json")
	}
	idx, err := safefile.ReadFile(filepath.Join(snap, "model.safetensors.index.json"), 64<<20)
	if err != nil {
		if !isFile(filepath.Join(snap, "model.safetensors")) {
			missing = append(missing, "model.safetensors")
		}
		return missing
	}
	var index struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if json.Unmarshal(idx, &index) != nil || len(index.WeightMap) == 0 {
		return append(missing, "a valid model.safetensors.index.json")
	}
	seen := map[string]bool{}
	for _, sh := range index.WeightMap {
		if seen[sh] {
			continue
		}
		seen[sh] = true
		if !filepath.IsLocal(sh) || !isFile(filepath.Join(snap, sh)) {
			missing = append(missing, sh)
		}
	}
	sort.Strings(missing)
	return missing
}

// isFile reports whether path (links followed) is a regular file.
func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// maxCachedRepos bounds what Cached reads of a cache.
const maxCachedRepos = 4096

// Cached lists the model snapshots in the cache at dir ("" for CacheDir()),
// sorted by repo and commit. A cache that does not exist lists nothing.
func Cached(dir string) ([]Snapshot, error) {
	if dir == "" {
		dir = CacheDir()
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Snapshot
	for i, e := range ents {
		if i >= maxCachedRepos {
			break
		}
		name, ok := strings.CutPrefix(e.Name(), "models--")
		if !ok || !e.IsDir() {
			continue
		}
		org, model, ok := strings.Cut(name, "--")
		repo := org + "/" + model
		if !ok || !ValidRepo(repo) {
			continue
		}
		rd := filepath.Join(dir, e.Name())
		refs := readRefs(rd)
		snaps, _ := os.ReadDir(filepath.Join(rd, "snapshots"))
		for _, s := range snaps {
			if !s.IsDir() || !commitRe.MatchString(s.Name()) {
				continue
			}
			p := filepath.Join(rd, "snapshots", s.Name())
			out = append(out, Snapshot{Repo: repo, Commit: s.Name(), Refs: refs[s.Name()], Path: p, Complete: len(missingFiles(p)) == 0})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Repo != out[j].Repo {
			return out[i].Repo < out[j].Repo
		}
		return out[i].Commit < out[j].Commit
	})
	return out, nil
}

// readRefs maps each commit of a repo folder to the refs naming it.
func readRefs(rd string) map[string][]string {
	out := map[string][]string{}
	base := filepath.Join(rd, "refs")
	filepath.WalkDir(base, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		b, err := safefile.ReadFile(p, 256)
		if err != nil {
			return nil
		}
		c := strings.TrimSpace(string(b))
		if rel, err := filepath.Rel(base, p); err == nil && commitRe.MatchString(c) {
			out[c] = append(out[c], filepath.ToSlash(rel))
		}
		return nil
	})
	return out
}
