package weights

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"verdict/engine/safefile"
)

// OpenCheckpoint opens a Hugging Face model folder: model.safetensors.index.json
// with the shards its weight_map names, or else a single model.safetensors.
// Every shard the index names must exist, and every tensor it lists must be
// in its shard.
func OpenCheckpoint(dir string) (Store, error) {
	indexPath := filepath.Join(dir, indexFile)
	js, err := safefile.ReadFile(indexPath, MaxJSONBytes)
	if errors.Is(err, os.ErrNotExist) {
		single := filepath.Join(dir, singleFile)
		if !exists(single) {
			return nil, fmt.Errorf("weights: %s: neither %s nor %s", dir, indexFile, singleFile)
		}
		return OpenSafetensors(single)
	}
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	var index struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(js, &index); err != nil {
		return nil, fmt.Errorf("weights: %s: %w", indexPath, err)
	}
	if len(index.WeightMap) == 0 {
		return nil, fmt.Errorf("weights: %s: empty weight_map", indexPath)
	}
	names := make([]string, 0, len(index.WeightMap))
	for name := range index.WeightMap {
		names = append(names, name)
	}
	slices.Sort(names)
	var shards []string
	for _, name := range names {
		shard := index.WeightMap[name]
		if !filepath.IsLocal(shard) {
			return nil, fmt.Errorf("weights: %s: tensor %q: shard %q is not a file inside the folder", indexPath, name, shard)
		}
		if !slices.Contains(shards, shard) {
			shards = append(shards, shard)
		}
	}
	slices.Sort(shards)
	paths := make([]string, len(shards))
	for i, sh := range shards {
		paths[i] = filepath.Join(dir, sh)
		if _, err := os.Stat(paths[i]); err != nil {
			return nil, fmt.Errorf("weights: %s names shard %s: %w", indexPath, sh, err)
		}
	}
	st, err := OpenSafetensors(paths...)
	if err != nil {
		return nil, err
	}
	s := st.(*stStore)
	for _, name := range names {
		shard := index.WeightMap[name]
		t, ok := s.tensors[name]
		if !ok || t.file.path != filepath.Join(dir, shard) {
			s.Close()
			return nil, fmt.Errorf("weights: %s: tensor %q listed in %s is not in that shard", filepath.Join(dir, shard), name, indexFile)
		}
	}
	return s, nil
}
