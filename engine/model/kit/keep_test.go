package kit

import (
	"slices"
	"testing"
)

type closer struct {
	name string
	log  *[]string
}

func (c closer) Close() error { *c.log = append(*c.log, c.name); return nil }

// TestKeeper: a key kept again closes the earlier value, past MaxKept the
// oldest is closed, OnDrop runs before each close, Close closes the rest
// newest first.
func TestKeeper(t *testing.T) {
	var log []string
	k := Keeper{OnDrop: func(key any) { log = append(log, "drop "+key.(string)) }}
	k.Keep("a", closer{"a1", &log})
	k.Keep("a", closer{"a2", &log})
	if !slices.Equal(log, []string{"drop a", "a1"}) {
		t.Fatalf("keeping a again: %v", log)
	}
	if c, ok := k.Kept("a").(closer); !ok || c.name != "a2" {
		t.Fatalf("Kept(a) = %v", k.Kept("a"))
	}
	if k.Kept("b") != nil {
		t.Fatal("Kept(b) of nothing kept")
	}
	log = nil
	keys := []string{"b", "c", "d", "e", "f", "g", "h"}
	for _, s := range keys[:MaxKept-1] {
		k.Keep(s, closer{s, &log})
	}
	k.Keep("z", closer{"z", &log})
	if !slices.Equal(log, []string{"drop a", "a2"}) || k.Kept("a") != nil {
		t.Fatalf("past %d kept: %v", MaxKept, log)
	}
	log = nil
	k.Close()
	want := []string{"drop z", "z"}
	for i := MaxKept - 2; i >= 0; i-- {
		want = append(want, "drop "+keys[i], keys[i])
	}
	if !slices.Equal(log, want) {
		t.Fatalf("Close: %v, want %v", log, want)
	}
}
