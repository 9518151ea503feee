package weights

// ParseGGUFWithin is ParseGGUF within a budget of limit bytes; charged is
// what the parse took of it.
func ParseGGUFWithin(data []byte, limit int64) (g *GGUF, charged int64, err error) {
	mem := newBudget("gguf", limit)
	g, err = parseGGUFHeader(&stFile{path: "mem", data: data}, mem)
	return g, limit - mem.left, err
}

// ParseSafetensorsWithin parses a safetensors file's bytes within a budget
// of limit bytes, returning its tensors' names and what it charged.
func ParseSafetensorsWithin(data []byte, limit int64) (names []string, charged int64, err error) {
	mem := newBudget("safetensors", limit)
	ts, err := parseSafetensors(&stFile{path: "mem", data: data}, mem)
	names = make([]string, len(ts)) // as the store's own list
	for i, t := range ts {
		names[i] = t.name
	}
	return names, limit - mem.left, err
}

// ParseIndexWithin parses a checkpoint index within a budget of limit
// bytes, returning its entry and shard counts and what it charged.
func ParseIndexWithin(js []byte, limit int64) (entries, shards int, charged int64, err error) {
	mem := newBudget("index", limit)
	e, s, err := parseIndex(js, mem)
	return len(e), len(s), limit - mem.left, err
}
