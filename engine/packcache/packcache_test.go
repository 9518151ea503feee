package packcache

import (
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var testMats = []Matrix{{"a", 8, 64}, {"b (transposed)", 3, 128}, {"c", 17, 64}}

// build writes a committed cache file of testMats (group 64, key "k") whose
// area holds a pattern, and returns its path and the area's bytes.
func build(t *testing.T, dir string) (string, []byte) {
	t.Helper()
	es, size := Layout(testMats, 64)
	a, err := Open(Options{Dir: dir, Key: "k", Name: "m", Group: 64}, es, size)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.FromDisk || a.Path == "" {
		t.Fatalf("a new cache: from disk %v, path %q", a.FromDisk, a.Path)
	}
	for i := range a.Area() {
		a.Area()[i] = byte(i*7 + 1)
	}
	if err := a.Commit(); err != nil {
		t.Fatal(err)
	}
	return a.Path, append([]byte(nil), a.Area()...)
}

// TestLayout: entries follow each other aligned, sized as q4 wants.
func TestLayout(t *testing.T) {
	es, size := Layout(testMats, 64)
	var end int64
	for i, e := range es {
		if e.QOff%align != 0 || e.SOOff%align != 0 || e.QOff < end || e.SOOff < e.QOff+e.QLen {
			t.Errorf("entry %d %+v overlaps or is unaligned (previous end %d)", i, e, end)
		}
		if e.QLen != int64(e.Rows*e.Cols/2) || e.SOFloats != e.Rows*e.Cols/64*2 {
			t.Errorf("entry %d: %d nibble bytes, %d scales", i, e.QLen, e.SOFloats)
		}
		end = e.SOOff + int64(e.SOFloats)*4
	}
	if size != up(end) {
		t.Errorf("size %d, want %d", size, up(end))
	}
}

// TestFileName: the name keeps a readable prefix and changes with the key
// and group.
func TestFileName(t *testing.T) {
	for _, c := range []struct{ name, want string }{{"gemma-4 E2B/it", "gemma-4_E2B_it"}, {"", "model"}, {"a.b", "a.b"}} {
		if got := Name(c.name); got != c.want {
			t.Errorf("Name(%q) = %q, want %q", c.name, got, c.want)
		}
	}
	base := FileName("/d", "m", "k", 64)
	if !strings.HasPrefix(base, "/d/m-g64-") || !strings.HasSuffix(base, ".q4") {
		t.Errorf("FileName = %s", base)
	}
	for _, other := range []string{FileName("/d", "m", "k2", 64), FileName("/d", "m", "k", 32)} {
		if other == base {
			t.Errorf("%s: the key or group does not change the name", other)
		}
	}
}

// TestOpenRefuses: a committed file maps with its bytes; each way a file
// can be wrong (truncated, another format, a header lying about its length
// or sizes, another key, group or matrix list, a flipped data byte) is
// refused with an error naming it, and Open then starts a new file.
func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	path, area := build(t, dir)
	es, size := Layout(testMats, 64)
	a, err := Open(Options{Dir: dir, Key: "k", Name: "m", Group: 64}, es, size)
	if err != nil || !a.FromDisk || string(a.Area()) != string(area) {
		t.Fatalf("reopen: %v, from disk %v", err, a != nil && a.FromDisk)
	}
	a.Close()
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	hl := binary.LittleEndian.Uint32(good[8:])
	// rehead rewrites the header JSON through f (keeping its room and a
	// valid checksum).
	rehead := func(f func(h *header)) []byte {
		var h header
		if err := json.Unmarshal(good[16:16+hl], &h); err != nil {
			t.Fatal(err)
		}
		f(&h)
		js, _ := json.Marshal(h)
		if len(js) > int(hl) {
			t.Fatalf("header grew")
		}
		js = append(js, strings.Repeat(" ", int(hl)-len(js))...)
		b := append([]byte(nil), good...)
		copy(b[16:], js)
		binary.LittleEndian.PutUint32(b[12:], crc32.Checksum(js, castagnoli))
		return b
	}
	cases := []struct {
		name, want string
		file       []byte
		mats       []Matrix
		key        string
		group      int
	}{
		{name: "as written"},
		{name: "empty", file: []byte{}, want: "short file"},
		{name: "truncated data", file: good[:len(good)-1], want: "file size"},
		{name: "another format", file: append([]byte("GGUF\x03\x00\x00\x00"), good[8:]...), want: "not a packed-weights file"},
		{name: "absurd header length", file: func() []byte {
			b := append([]byte(nil), good...)
			binary.LittleEndian.PutUint32(b[8:], 0xffffffff)
			return b
		}(), want: "bad header length"},
		{name: "header byte flipped", file: func() []byte { b := append([]byte(nil), good...); b[20] ^= 1; return b }(), want: "header checksum"},
		{name: "header not JSON", file: func() []byte {
			b := append([]byte(nil), good...)
			js := []byte(strings.Repeat("{", int(hl)))
			copy(b[16:], js)
			binary.LittleEndian.PutUint32(b[12:], crc32.Checksum(js, castagnoli))
			return b
		}(), want: "header:"},
		{name: "another version", file: rehead(func(h *header) { h.Version = 9 }), want: "format version 9"},
		{name: "lies about its data size", file: rehead(func(h *header) { h.Data += 64 }), want: "file size"},
		{name: "another key", key: "k2", want: "another checkpoint"},
		{name: "another group", group: 32, want: "group size"},
		{name: "fewer matrices", mats: testMats[:2], want: "3 matrices, want 2"},
		{name: "another shape", mats: []Matrix{{"a", 8, 64}, {"b (transposed)", 3, 128}, {"c", 16, 64}}, want: "matrix 2 is c 17x64, want c 16x64"},
		{name: "another name", mats: []Matrix{{"x", 8, 64}, testMats[1], testMats[2]}, want: "matrix 0 is a"},
		{name: "data byte flipped", file: func() []byte {
			b := append([]byte(nil), good...)
			b[(16+int64(hl)+dataAlign-1)/dataAlign*dataAlign+es[1].QOff+5] ^= 1 // in b's nibbles
			return b
		}(), want: "checksum mismatch in b (transposed)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := good
			if c.file != nil {
				file = c.file
			}
			if err := os.WriteFile(path, file, 0o644); err != nil {
				t.Fatal(err)
			}
			mats, key, group := testMats, "k", 64
			if c.mats != nil {
				mats = c.mats
			}
			if c.key != "" {
				key = c.key
			}
			if c.group != 0 {
				group = c.group
			}
			es, _ := Layout(mats, group)
			a, err := openFile(path, key, group, es, nil)
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				a.Close()
				return
			}
			if err == nil {
				a.Close()
				t.Fatalf("accepted, want %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q, want %q", err, c.want)
			}
			// Open logs the refusal and starts a new file (when the
			// name is the same: same key and group).
			if key == "k" && group == 64 {
				var logs []string
				es, size := Layout(mats, group)
				a, err := Open(Options{Dir: dir, Key: key, Name: "m", Group: group, Log: func(s string) { logs = append(logs, s) }}, es, size)
				if err != nil {
					t.Fatal(err)
				}
				if a.FromDisk || a.Path != path || len(logs) != 1 || !strings.Contains(logs[0], c.want) {
					t.Errorf("Open after %s: from disk %v, path %s, log %q", c.name, a.FromDisk, a.Path, logs)
				}
				a.Close()
			}
		})
	}
	if left, _ := filepath.Glob(filepath.Join(dir, TempPattern)); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestOpenNoCache: without a directory or key, under the threshold, or
// with nothing to pack, the arena is memory and Commit writes nothing.
func TestOpenNoCache(t *testing.T) {
	es, size := Layout(testMats, 64)
	for _, c := range []struct {
		name string
		opt  Options
		size int64
	}{
		{"no directory", Options{Key: "k"}, size},
		{"no key", Options{Key: ""}, size},
		{"under the threshold", Options{Key: "k", Min: size + 1}, size},
		{"nothing to pack", Options{Key: "k"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if c.name != "no directory" {
				c.opt.Dir = dir
			}
			c.opt.Group = 64
			a, err := Open(c.opt, es, c.size)
			if err != nil {
				t.Fatal(err)
			}
			if a.Path != "" || a.FromDisk || int64(len(a.Area())) != c.size {
				t.Errorf("path %q, from disk %v, %d bytes", a.Path, a.FromDisk, len(a.Area()))
			}
			if err := a.Commit(); err != nil {
				t.Error(err)
			}
			a.Close()
			if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) > 0 {
				t.Errorf("files written: %v", left)
			}
		})
	}
	if _, err := Open(Options{}, nil, -1); err == nil {
		t.Error("a negative size was accepted")
	}
}

// TestCloseUncommitted: an arena closed before Commit (a cancelled or
// failed pack) leaves no file; a new file prunes the older ones of its
// name and group.
func TestCloseUncommitted(t *testing.T) {
	dir := t.TempDir()
	es, size := Layout(testMats, 64)
	a, err := Open(Options{Dir: dir, Key: "k", Name: "m", Group: 64}, es, size)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) > 0 {
		t.Errorf("an uncommitted arena left %v", left)
	}
	old, _ := build(t, dir)
	b, err := Open(Options{Dir: dir, Key: "k2", Name: "m", Group: 64}, es, size)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("the older file %s is still there", old)
	}
	if _, err := os.Stat(b.Path); err != nil {
		t.Error(err)
	}
}
