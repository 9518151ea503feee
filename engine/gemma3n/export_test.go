package gemma3n

import (
	"verdict/engine/model/kit"
	"verdict/native"
)

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
	t, err := c.bound.Matrix(c.embed)
	if err != nil {
		panic(err)
	}
	c.t.embed = t
	c.execs = &kit.Pool[*Exec]{}
	return &c
}

// FreeBlocks reports the key/value blocks of each attention kind (global,
// sliding window) no sequence holds, for tests.
func (m *Model) FreeBlocks() [2]int { return m.pool.Unheld() }
