package gemma3n

import "verdict/native"

// SetPackMinCache lowers the smallest packed size that gets a cache file,
// for tests; it returns a function restoring the old value.
func SetPackMinCache(n int64) func() {
	old := packMinCache
	packMinCache = n
	return func() { packMinCache = old }
}

// WithQ4Head returns a shallow copy of m whose tied embedding and output
// head are packed to q4, for tests of the output head.
func (m *Model) WithQ4Head(group int) *Model {
	c := *m
	c.embed = native.Quantize(m.embed, group)
	return &c
}
