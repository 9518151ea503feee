package weights

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unsafe"

	"verdict/engine/safefile"
)

// OpenCheckpoint opens a Hugging Face model folder: model.safetensors.index.json
// with the shards its weight_map names, or else a single model.safetensors.
// Every shard the index names must exist, and every tensor it lists must be
// in its shard. The parsed index and headers are held to HeaderBudget
// together.
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
	mem := newBudget("index", HeaderBudget)
	entries, shards, err := parseIndex(js, mem)
	if err != nil {
		return nil, fmt.Errorf("weights: %s: %w", indexPath, err)
	}
	paths := make([]string, len(shards))
	for i, sh := range shards {
		paths[i] = filepath.Join(dir, sh)
		if _, err := os.Stat(paths[i]); err != nil {
			return nil, fmt.Errorf("weights: %s names shard %s: %w", indexPath, sh, err)
		}
	}
	s, err := openSafetensors(mem, paths...)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		t, ok := s.tensors[e.name]
		if !ok || t.file.path != filepath.Join(dir, e.shard) {
			s.Close()
			return nil, fmt.Errorf("weights: %s: tensor %s listed in %s is not in that shard", filepath.Join(dir, e.shard), quoted(e.name), indexFile)
		}
	}
	return s, nil
}

// indexEntry is one tensor of a checkpoint index's weight_map.
type indexEntry struct{ name, shard string }

// indexEntryCost is the memory an index entry takes beyond its name: its
// place in the entries.
var indexEntryCost = int(unsafe.Sizeof(indexEntry{}))

// parseIndex reads a checkpoint index's weight_map: its entries sorted by
// tensor name and its shards sorted, each shard a file inside the folder.
// What they take is charged to mem before it is allocated; a shard's name
// is held once however many tensors name it.
func parseIndex(js []byte, mem *memBudget) ([]indexEntry, []string, error) {
	if err := checkJSON(js); err != nil {
		return nil, nil, err
	}
	var wm []byte
	err := jsonMembers(js, func(key, val []byte) error {
		if string(key) == `"weight_map"` {
			wm = val
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	n := 0
	if wm != nil && string(wm) != "null" {
		if n, err = jsonCount(wm, '{'); err != nil {
			return nil, nil, fmt.Errorf("weight_map: %w", err)
		}
	}
	if n == 0 {
		return nil, nil, errors.New("empty weight_map")
	}
	if err := mem.take(int64(heapSize(n*indexEntryCost)), "weight_map entries", ""); err != nil {
		return nil, nil, err
	}
	entries := make([]indexEntry, 0, n)
	shardOf := map[string]string{} // interns the shard names
	err = jsonMembers(wm, func(key, val []byte) error {
		if err := mem.take(int64(heapSize(len(key))), "weight_map entry", ""); err != nil {
			return err
		}
		name, err := jsonString(key, maxTensorName, "tensor name")
		if err != nil {
			return err
		}
		if len(val) > 0 && val[0] == '"' && len(val)-2 > maxTensorName {
			return fmt.Errorf("tensor %s: shard name of %d bytes, over the limit of %d", quoted(name), len(val)-2, maxTensorName)
		}
		shard, ok := shardOf[string(val)]
		if !ok {
			// its raw and unquoted names, its slots in shardOf and the set below
			if err := mem.take(int64(2*heapSize(len(val))+mapEntry(2*strHeader)+mapEntry(strHeader+1)+2*strHeader), "shard", ""); err != nil {
				return err
			}
			if shard, err = jsonString(val, maxTensorName, "shard"); err != nil {
				return fmt.Errorf("tensor %s: %w", quoted(name), err)
			}
			if !filepath.IsLocal(shard) {
				return fmt.Errorf("tensor %s: shard %s is not a file inside the folder", quoted(name), quoted(shard))
			}
			shardOf[string(val)] = shard
		}
		entries = append(entries, indexEntry{name, shard})
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	slices.SortFunc(entries, func(a, b indexEntry) int { return strings.Compare(a.name, b.name) })
	for i := 1; i < len(entries); i++ {
		if entries[i].name == entries[i-1].name {
			return nil, nil, fmt.Errorf("tensor %s is listed twice in weight_map", quoted(entries[i].name))
		}
	}
	seen := make(map[string]bool, len(shardOf))
	shards := make([]string, 0, len(shardOf))
	for _, sh := range shardOf {
		if !seen[sh] {
			seen[sh] = true
			shards = append(shards, sh)
		}
	}
	slices.Sort(shards)
	return entries, shards, nil
}

// CheckpointNames lists the tensors of a Hugging Face model folder and its
// weight files as OpenCheckpoint finds them, reading only the index (every
// shard it names must exist) or else the single file's header, within
// HeaderBudget.
func CheckpointNames(dir string) (names, files []string, err error) {
	indexPath := filepath.Join(dir, indexFile)
	js, err := safefile.ReadFile(indexPath, MaxJSONBytes)
	if errors.Is(err, os.ErrNotExist) {
		single := filepath.Join(dir, singleFile)
		f, err := mapSafetensors(single)
		if err != nil {
			return nil, nil, err
		}
		defer func() {
			if f.mapped {
				unmap(f.data)
			}
		}()
		ts, err := parseSafetensors(f, newBudget("safetensors", HeaderBudget))
		if err != nil {
			return nil, nil, err
		}
		names = make([]string, len(ts))
		for i, t := range ts {
			names[i] = t.name
		}
		return names, []string{single}, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("weights: %w", err)
	}
	entries, shards, err := parseIndex(js, newBudget("index", HeaderBudget))
	if err != nil {
		return nil, nil, fmt.Errorf("weights: %s: %w", indexPath, err)
	}
	names = make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.name
	}
	files = make([]string, len(shards))
	for i, sh := range shards {
		files[i] = filepath.Join(dir, sh)
		if _, err := os.Stat(files[i]); err != nil {
			return nil, nil, fmt.Errorf("weights: %s names shard %s: %w", indexPath, sh, err)
		}
	}
	return names, files, nil
}
