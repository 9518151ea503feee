package models

import (
	"encoding/json"
	"fmt"
	"path/filepath"

	"verdict/engine/hub"
	"verdict/engine/safefile"
)

// resolveRepo turns a Hugging Face model id ("google/gemma-3n-E2B-it",
// "org/name@revision") that is not a path on disk into the folder of its
// snapshot in the Hub cache; repo is then the id. Any other spec comes back
// as it is, with repo "".
func resolveRepo(spec string) (path, repo string, err error) {
	if !hub.LooksLikeRepo(spec) {
		return spec, "", nil
	}
	p, err := hub.Resolve("", spec)
	if err != nil {
		return spec, "", err
	}
	return p, spec, nil
}

// KnownRepo is a released checkpoint on the Hub: its id, its family and a
// title.
type KnownRepo struct {
	Repo, Family, Title string
}

// KnownRepos are the released Gemma 3n and Gemma 4 checkpoints, the
// instruction-tuned ones first. Gemma 4's are transformers' four variants
// (convert_gemma4_weights.py's _VARIANTS: gemma-4-e2b, gemma-4-e4b,
// gemma-4-26b-a4b, gemma-4-31b) under Google's names on the Hub.
var KnownRepos = []KnownRepo{
	{"google/gemma-3n-E2B-it", FamilyGemma3n, "Gemma 3n E2B, instruction-tuned"},
	{"google/gemma-3n-E4B-it", FamilyGemma3n, "Gemma 3n E4B, instruction-tuned"},
	{"google/gemma-3n-E2B", FamilyGemma3n, "Gemma 3n E2B, base (pre-trained)"},
	{"google/gemma-3n-E4B", FamilyGemma3n, "Gemma 3n E4B, base (pre-trained)"},
	{"google/gemma-4-E2B-it", FamilyGemma4, "Gemma 4 E2B, instruction-tuned"},
	{"google/gemma-4-E4B-it", FamilyGemma4, "Gemma 4 E4B, instruction-tuned"},
	{"google/gemma-4-26B-A4B-it", FamilyGemma4, "Gemma 4 26B-A4B (mixture of experts), instruction-tuned"},
	{"google/gemma-4-31B-it", FamilyGemma4, "Gemma 4 31B, instruction-tuned"},
	{"google/gemma-4-E2B", FamilyGemma4, "Gemma 4 E2B, base (pre-trained)"},
	{"google/gemma-4-E4B", FamilyGemma4, "Gemma 4 E4B, base (pre-trained)"},
	{"google/gemma-4-26B-A4B", FamilyGemma4, "Gemma 4 26B-A4B (mixture of experts), base (pre-trained)"},
	{"google/gemma-4-31B", FamilyGemma4, "Gemma 4 31B, base (pre-trained)"},
}

// RepoFamily is the family of a known repo ("org/name" or
// "org/name@revision"; "" when it is not one of KnownRepos).
func RepoFamily(spec string) string {
	repo, _, ok := hub.SplitSpec(spec)
	if !ok {
		return ""
	}
	for _, k := range KnownRepos {
		if k.Repo == repo {
			return k.Family
		}
	}
	return ""
}

// SnapshotFamily reads the config.json of a downloaded checkpoint (a
// snapshot folder) and says its family; a checkpoint of neither Gemma 3n
// nor Gemma 4 is an error naming what its config says.
func SnapshotFamily(dir string) (string, error) {
	path := filepath.Join(dir, "config.json")
	b, err := safefile.ReadFile(path, MaxConfigBytes)
	if err != nil {
		return "", err
	}
	var cfg struct {
		ModelType     string   `json:"model_type"`
		Architectures []string `json:"architectures"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return "", fmt.Errorf("%s: %v", path, err)
	}
	if f := configFamily(cfg.ModelType, cfg.Architectures); f != "" {
		return f, nil
	}
	return "", fmt.Errorf("%s: model_type %q, architectures %q: neither Gemma 3n nor Gemma 4, which Verdict runs", path, cfg.ModelType, cfg.Architectures)
}
