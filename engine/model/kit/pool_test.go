package kit

import (
	"slices"
	"testing"
)

// TestPool: Get reuses the most recently released Exec, Put keeps at most
// MaxIdle and closes the rest, Close closes the idle ones.
func TestPool(t *testing.T) {
	var p Pool[int]
	made, closed := 0, []int{}
	newX := func() (int, error) { made++; return made, nil }
	closeX := func(x int) { closed = append(closed, x) }
	var got []int
	for range MaxIdle + 1 {
		x, _ := p.Get(newX)
		got = append(got, x)
	}
	if !slices.Equal(got, []int{1, 2, 3}) {
		t.Fatalf("made %v", got)
	}
	for _, x := range got {
		p.Put(x, closeX)
	}
	if !slices.Equal(closed, []int{3}) {
		t.Fatalf("closed %v past %d idle, want [3]", closed, MaxIdle)
	}
	if x, _ := p.Get(newX); x != 2 || made != 3 {
		t.Fatalf("Get gave %d (made %d), want the idle 2", x, made)
	}
	p.Close(closeX)
	if !slices.Equal(closed, []int{3, 1}) {
		t.Fatalf("closed %v", closed)
	}
}
