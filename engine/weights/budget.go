package weights

import (
	"fmt"
	"strconv"
)

// HeaderBudget bounds the memory a file's parsed header may take: a GGUF's
// metadata and tensor infos, the tensor entries of the safetensors files one
// store opens together, a checkpoint index's weight_map or a recipe's tensor
// list. The bytes left in a file bound every count too, but a GGUF's empty
// array costs 12 bytes on disk and over 100 in memory, so those alone let a
// file of a few hundred MB ask for gigabytes. Real headers take tens of MB
// at most (a GGUF vocabulary of 262,144 strings with its scores and types
// takes under 10), so this leaves them ample room.
const HeaderBudget = 256 << 20

// BudgetError is the error of a header whose parsed form would take more
// than its budget: Format is "gguf", "safetensors", "index" or "recipe";
// Item and Name say what was being read when the budget ran out ("metadata
// key", "tokenizer.ggml.tokens"), Name empty when it has none.
type BudgetError struct {
	Format, Item, Name string
	Budget             int64
}

func (e *BudgetError) Error() string {
	what := e.Item
	if e.Name != "" {
		what = e.Item + " " + quoted(e.Name)
	}
	return fmt.Sprintf("%s: %s: the parsed header would take over %d MB of memory (the limit)", e.Format, what, e.Budget>>20)
}

// quoted is a key or tensor name quoted for an error message, cut to its
// first 64 bytes (a hostile one may be long, and quoting binary quadruples
// it).
func quoted(name string) string {
	if len(name) <= 64 {
		return strconv.Quote(name)
	}
	return fmt.Sprintf("%q... (%d bytes)", name[:64], len(name))
}

// memBudget is what is left of a header's budget. Costs are charged before
// what they pay for is allocated.
type memBudget struct {
	format      string
	limit, left int64
}

func newBudget(format string, limit int64) *memBudget {
	return &memBudget{format: format, limit: limit, left: limit}
}

// take charges n bytes for the item of that name; the error is a
// *BudgetError when they are not left.
func (b *memBudget) take(n int64, item, name string) error {
	if n < 0 || n > b.left {
		b.left = 0
		return &BudgetError{Format: b.format, Item: item, Name: name, Budget: b.limit}
	}
	b.left -= n
	return nil
}

// Sizes for the memory costs of parsed headers, in bytes.
const (
	strHeader = 16 // a string header (pointer, length)
	ptrSize   = 8
	intSize   = 8 // an int or int64 of a shape or offset
)

// heapSize bounds what an allocation of n bytes takes on the heap: Go's size
// classes round a small one up by at most an eighth (and 16 bytes), a large
// one to whole 8 KB pages.
func heapSize(n int) int {
	switch {
	case n <= 0:
		return 0
	case n > 32<<10:
		return n + 8<<10
	}
	return n + n/8 + 16
}

// mapEntry is the memory one entry of a map made for its full count takes,
// for keys and values of kv bytes together: the slot and its control byte,
// over the table's load factor of 7/8, twice for the tables' count rounded
// up to a power of two.
func mapEntry(kv int) int { return (kv + 1) * 16 / 7 }
