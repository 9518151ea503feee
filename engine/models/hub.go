package models

import "verdict/engine/hub"

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
