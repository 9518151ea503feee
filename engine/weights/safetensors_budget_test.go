package weights

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// heapAllocated is the bytes the Go heap gave out while fn ran.
func heapAllocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// manyEntries is a JSON object of n members made by entry(i), with the
// prefix and suffix around them.
func manyEntries(prefix string, n int, entry func(b *bytes.Buffer, i int), suffix string) []byte {
	var b bytes.Buffer
	b.WriteString(prefix)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		entry(&b, i)
	}
	b.WriteString(suffix)
	return b.Bytes()
}

// A safetensors header or checkpoint index whose parsed form would take
// more than HeaderBudget (1.3 million empty tensors, a shape or data_offsets
// of millions of numbers, a 40 MB dtype or name, nine million index entries) is
// refused with an error naming the problem, allocating a bounded amount:
// every header is parsed where it lies, and costs are charged before they
// are allocated.
func TestSafetensorsHeaderBudget(t *testing.T) {
	const mb = 1 << 20
	zeros := func(n int) string { return strings.Repeat("0,", n-1) + "0" }
	for _, tc := range []struct {
		name     string
		header   []byte
		want     string
		maxAlloc uint64
	}{
		{"1.3 million empty tensors", manyEntries("{", 1_300_000, func(b *bytes.Buffer, i int) {
			fmt.Fprintf(b, `"%07d":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}`, i)
		}, "}"), "over 256 MB", 16 * mb},
		{"long shape", []byte(`{"w":{"dtype":"F32","shape":[` + zeros(10_000_000) + `],"data_offsets":[0,0]}}`), "more than 64", mb},
		{"long data_offsets", []byte(`{"w":{"dtype":"F32","shape":[0],"data_offsets":[` + zeros(10_000_000) + `]}}`), "not [begin, end]", mb},
		{"long dtype", []byte(`{"w":{"dtype":"` + strings.Repeat("F", 40_000_000) + `","shape":[0],"data_offsets":[0,0]}}`), "dtype", mb},
		{"long name", []byte(`{"` + strings.Repeat("n", 40_000_000) + `":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}`), "name of 40000000 bytes", mb},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := rawST(string(tc.header), nil)
			var err error
			n := heapAllocated(func() { _, err = newMemStore("hostile.safetensors", data) })
			t.Logf("%d-byte header: %.1f MB allocated; %.200v", len(tc.header), float64(n)/mb, err)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "hostile.safetensors") {
				t.Errorf("err = %.300v, want one naming the file and %q", err, tc.want)
			}
			if n > tc.maxAlloc {
				t.Errorf("parsing allocated %d bytes, over %d", n, tc.maxAlloc)
			}
		})
	}
	t.Run("index", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, dir, indexFile, manyEntries(`{"metadata":{},"weight_map":{`, 9_000_000, func(b *bytes.Buffer, i int) {
			b.WriteString(`"":"s"`)
		}, "}}"))
		var err error
		n := heapAllocated(func() { _, err = OpenCheckpoint(dir) })
		t.Logf("%.1f MB allocated; %v", float64(n)/mb, err)
		var be *BudgetError
		if !errors.As(err, &be) || be.Format != "index" || !strings.Contains(err.Error(), filepath.Join(dir, indexFile)) {
			t.Errorf("err = %v, want an index *BudgetError naming the file", err)
		}
		if n > 64*mb+MaxJSONBytes { // the index is read into memory
			t.Errorf("parsing allocated %d bytes", n)
		}
	})
	t.Run("recipe", func(t *testing.T) {
		js := manyEntries(`{"tensors":[`, 10_000_000, func(b *bytes.Buffer, i int) { b.WriteString("{}") }, "]}")
		var err error
		n := heapAllocated(func() { _, err = NewRecipeStore(js, nil) })
		t.Logf("%d-byte recipe: %.1f MB allocated; %v", len(js), float64(n)/mb, err)
		var be *BudgetError
		if !errors.As(err, &be) || be.Format != "recipe" {
			t.Errorf("err = %v, want a recipe *BudgetError", err)
		}
		if n > 16*mb {
			t.Errorf("parsing allocated %d bytes", n)
		}
	})
}
