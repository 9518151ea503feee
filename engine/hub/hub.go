// Package hub downloads models from the Hugging Face Hub into the Hub's own
// cache layout, and finds the models already there:
//
//	$HF_HUB_CACHE (or $HF_HOME/hub, or ~/.cache/huggingface/hub)
//	  models--org--name/
//	    blobs/<sha256 or git sha1>        the files' content, named by hash
//	    snapshots/<commit>/<file>         -> ../../blobs/<hash>
//	    refs/main                         the commit "main" pointed to
//
// so that a model fetched by another tool (huggingface_hub, transformers) is
// reused and one fetched here serves them. Only the files the engine reads
// are fetched (Needed). Every LFS file is checked against the sha256 the Hub
// lists for it, every other file against its git blob hash.
//
// The package prints nothing: progress goes to a callback.
package hub

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"verdict/engine/safefile"
)

// DefaultEndpoint is the Hub's address unless HF_ENDPOINT says otherwise.
const DefaultEndpoint = "https://huggingface.co"

// Endpoint is $HF_ENDPOINT, else DefaultEndpoint, without a trailing slash.
func Endpoint() string {
	if e := strings.TrimSpace(os.Getenv("HF_ENDPOINT")); e != "" {
		return strings.TrimRight(e, "/")
	}
	return DefaultEndpoint
}

// CacheDir is the Hub cache: $HF_HUB_CACHE, $HF_HOME/hub,
// $XDG_CACHE_HOME/huggingface/hub or ~/.cache/huggingface/hub, the first set.
func CacheDir() string {
	if d := os.Getenv("HF_HUB_CACHE"); d != "" {
		return d
	}
	return filepath.Join(homeDir(), "hub")
}

// homeDir is $HF_HOME, else $XDG_CACHE_HOME/huggingface, else
// ~/.cache/huggingface.
func homeDir() string {
	if d := os.Getenv("HF_HOME"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "huggingface")
	}
	h, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "huggingface")
	}
	return filepath.Join(h, ".cache", "huggingface")
}

// maxTokenFile bounds the token file.
const maxTokenFile = 4 << 10

// Token is $HF_TOKEN, else the token file the Hub's own tools write
// ($HF_TOKEN_PATH, else $HF_HOME/token or ~/.cache/huggingface/token), else "".
func Token() string {
	if t := strings.TrimSpace(os.Getenv("HF_TOKEN")); t != "" {
		return t
	}
	p := os.Getenv("HF_TOKEN_PATH")
	if p == "" {
		p = filepath.Join(homeDir(), "token")
	}
	b, err := safefile.ReadFile(p, maxTokenFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

var (
	repoRe     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$`)
	revisionRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$`)
	commitRe   = regexp.MustCompile(`^[0-9a-f]{40}$`)
	sha1Re     = commitRe
	sha256Re   = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// ValidRepo reports whether id is a Hub model id, "org/name".
func ValidRepo(id string) bool {
	return repoRe.MatchString(id) && !strings.Contains(id, "..")
}

// checkRepo returns a clear error for an id that is not "org/name".
func checkRepo(id string) error {
	if !ValidRepo(id) {
		return fmt.Errorf("%q is not a Hugging Face model id (org/name, e.g. google/gemma-3n-E2B-it)", id)
	}
	return nil
}

func checkRevision(rev string) error {
	if !revisionRe.MatchString(rev) || strings.Contains(rev, "..") || strings.Contains(rev, "//") || strings.HasSuffix(rev, "/") {
		return fmt.Errorf("%q is not a revision (a branch, tag or commit)", rev)
	}
	return nil
}

// RepoDir is the folder of repo in the cache at dir.
func RepoDir(dir, repo string) string {
	return filepath.Join(dir, "models--"+strings.ReplaceAll(repo, "/", "--"))
}

// LicenceURL is where a gated repo's licence is accepted.
func LicenceURL(endpoint, repo string) string { return endpoint + "/" + repo }

// GatedError is a repo that refuses the files without a token that has
// accepted its licence (401 without a token, 403 with one).
type GatedError struct {
	Repo     string
	URL      string // where to accept the licence
	Status   int
	HasToken bool
}

func (e *GatedError) Error() string {
	if e.HasToken {
		return fmt.Sprintf("%s is gated and the token given has no access (HTTP %d): accept its licence at %s with the account the token belongs to, then try again", e.Repo, e.Status, e.URL)
	}
	return fmt.Sprintf("%s is gated (HTTP %d): accept its licence at %s, then give a token (HF_TOKEN, --token, or `hf auth login`; tokens at https://huggingface.co/settings/tokens)", e.Repo, e.Status, e.URL)
}

// NotFoundError is a repo, revision or file the Hub does not have.
type NotFoundError struct {
	Repo, Revision, File string
}

func (e *NotFoundError) Error() string {
	switch {
	case e.File != "":
		return fmt.Sprintf("%s has no file %s at revision %s", e.Repo, e.File, e.Revision)
	case e.Revision != "":
		return fmt.Sprintf("%s has no revision %q", e.Repo, e.Revision)
	}
	return fmt.Sprintf("no model %s on the Hub (check the id; a private repo needs a token)", e.Repo)
}

// NetworkError is a Hub that cannot be reached.
type NetworkError struct {
	Endpoint string
	Err      error
}

func (e *NetworkError) Error() string {
	return fmt.Sprintf("cannot reach the Hub at %s (no network, or HF_ENDPOINT is wrong): %v", e.Endpoint, e.Err)
}

func (e *NetworkError) Unwrap() error { return e.Err }

// ChecksumError is a file whose content is not what the Hub lists.
type ChecksumError struct {
	File, Want, Got string
}

func (e *ChecksumError) Error() string {
	return fmt.Sprintf("%s: checksum %s, the Hub lists %s: the file is corrupt", e.File, e.Got, e.Want)
}

// ErrHostile marks a Hub answer that breaks the protocol or Verdict's
// bounds: a file name outside the snapshot, a size over the limits, more
// bytes than declared.
var ErrHostile = errors.New("refused the Hub's answer")

func hostile(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrHostile, fmt.Sprintf(format, a...))
}

// Needed reports whether the engine reads the file at path of a repo:
// top-level safetensors, their index, the configuration, the tokenizer and
// the processors' configuration.
func Needed(path string) bool {
	if strings.Contains(path, "/") {
		return false
	}
	switch path {
	case "config.json", "generation_config.json", "model.safetensors.index.json",
		"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
		"preprocessor_config.json", "processor_config.json":
		return true
	}
	return strings.HasSuffix(path, ".safetensors")
}

// checkName refuses a file name that could leave the snapshot folder or
// that the cache cannot hold: absolute, with "..", a backslash, a control
// character, or empty parts.
func checkName(name string) error {
	if name == "" || len(name) > 255 || strings.ContainsAny(name, "\\:") || !filepath.IsLocal(name) || strings.HasPrefix(name, "/") {
		return hostile("file name %q is not a plain name inside the repo", name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == "" || part == "." || part == ".." {
			return hostile("file name %q is not a plain name inside the repo", name)
		}
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return hostile("file name %q holds a control character", name)
		}
	}
	return nil
}
