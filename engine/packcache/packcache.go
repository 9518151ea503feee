// Package packcache keeps a model's q4-packed matrices in one arena outside
// the Go heap and, for large models, in a cache file that the next load of
// the same checkpoint maps instead of packing again. It knows nothing of a
// model family: a loader lists its matrices (Layout), asks for an arena
// (Open), packs into it when it was not read from disk, and commits it.
//
// A cache file is
//
//	magic "VRDQ4PK\x00" | u32 header length | u32 CRC-32C of the header |
//	header JSON | zero padding to 4096 | data
//
// The header names the format version, the checkpoint's identity (Key), the
// group size and, per matrix, its name, shape, data offsets and the CRC-32C
// of its bytes. A file whose header, size, key, group, matrix list or any
// checksum disagrees with what the loader expects is stale, corrupt or
// another model's: it is removed and rebuilt. Files are written under a
// temporary name (locked while written) and renamed into place, so a reader
// only ever maps a whole file and concurrent loads of one model each write
// their own; a failed or cancelled build removes its temporary file, and a
// load removes the unlocked ones a crash left behind.
package packcache

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"verdict/native"
)

const (
	magic     = "VRDQ4PK\x00"
	Version   = 1    // the file format; a change renames every file (FileName)
	align     = 64   // each matrix's nibbles and scales start at a multiple of this
	dataAlign = 4096 // data starts at a multiple of this
	headerMax = 64 * dataAlign
)

// DefaultMin is the smallest packed size worth a cache file: smaller
// models pack in a moment.
const DefaultMin int64 = 64 << 20

// Matrix is one matrix to pack: its name (unique within a model) and its
// packed shape.
type Matrix struct {
	Name       string
	Rows, Cols int
}

// Entry is a matrix's place in the arena and its checksum in a file.
type Entry struct {
	Name     string `json:"name"`
	Rows     int    `json:"rows"`
	Cols     int    `json:"cols"`
	QOff     int64  `json:"q_off"` // relative to the data start
	SOOff    int64  `json:"so_off"`
	CRC      uint32 `json:"crc32c"`
	QLen     int64  `json:"-"` // nibble bytes
	SOFloats int    `json:"-"` // scales and offsets
}

type header struct {
	Version int     `json:"version"`
	Key     string  `json:"key"`
	Group   int     `json:"group"`
	Data    int64   `json:"data_bytes"`
	Entries []Entry `json:"matrices"`
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func up(n int64) int64 { return (n + align - 1) / align * align }

// Layout assigns each matrix its offsets for q4 groups of group columns;
// it returns the entries and the arena's size.
func Layout(ms []Matrix, group int) ([]Entry, int64) {
	es := make([]Entry, len(ms))
	var off int64
	for i, m := range ms {
		nq, ns := native.Q4Sizes(m.Rows, m.Cols, group)
		es[i] = Entry{Name: m.Name, Rows: m.Rows, Cols: m.Cols, QLen: int64(nq), SOFloats: ns, QOff: off}
		off = up(off + int64(nq))
		es[i].SOOff = off
		off = up(off + int64(ns)*4)
	}
	return es, off
}

// View returns the nibbles and scales of entry e in an arena's area.
func View(area []byte, e *Entry) ([]byte, []float32) {
	q := area[e.QOff : e.QOff+e.QLen : e.QOff+e.QLen]
	var so []float32
	if e.SOFloats > 0 {
		so = unsafe.Slice((*float32)(unsafe.Pointer(&area[e.SOOff])), e.SOFloats)
	}
	return q, so
}

func (e *Entry) bytes() int64 { return e.QLen + int64(e.SOFloats)*4 }

func entryCRC(area []byte, e *Entry) uint32 {
	c := crc32.Update(0, castagnoli, area[e.QOff:e.QOff+e.QLen])
	return crc32.Update(c, castagnoli, area[e.SOOff:e.SOOff+int64(e.SOFloats)*4])
}

// parallel runs f(i) for i < n on GOMAXPROCS goroutines.
func parallel(n int, f func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int, n)
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	for w := 0; w < min(n, runtime.GOMAXPROCS(0)); w++ {
		wg.Go(func() {
			for i := range next {
				f(i)
			}
		})
	}
	wg.Wait()
}

// FileName names the cache file of a checkpoint in dir: a readable prefix
// (Name), the group size and a hash of the key, group and format version.
func FileName(dir, name, key string, group int) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d\x00%d", key, group, Version)))
	return filepath.Join(dir, fmt.Sprintf("%s-g%d-%s.q4", Name(name), group, hex.EncodeToString(h[:8])))
}

// Name keeps letters, digits, '-' and '.' of a model's name ("model" when
// none is left).
func Name(name string) string {
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "model"
	}
	return b.String()
}

// Options say where and whether an arena is cached.
type Options struct {
	// Dir, Key: the cache directory and the checkpoint's identity; without
	// both there is no cache file.
	Dir, Key string
	// Name gives the file a readable prefix; a new file removes the older
	// ones of the same Name and Group.
	Name string
	// Group is the q4 group size.
	Group int
	// Min is the smallest arena that gets a file.
	Min int64
	// Log, when set, hears why a file was refused or not written.
	Log func(string)
	// Checking, when set, hears the bytes of a file checked.
	Checking func(done, total int64)
}

func (o Options) log(format string, args ...any) {
	if o.Log != nil {
		o.Log(fmt.Sprintf(format, args...))
	}
}

// Arena is a model's packed matrices: a mapped cache file (FromDisk), a
// cache file being written (Path set, until Commit) or anonymous memory.
type Arena struct {
	Path     string // the cache file ("" when none)
	FromDisk bool   // mapped from an existing cache file: nothing to pack
	Bytes    int64  // the packed matrices' bytes

	data   []byte // the mapping (header included for cache files)
	area   []byte // the packed matrices within data
	mapped bool

	// An uncommitted cache file: its temporary file (locked) and header.
	f    *os.File
	tmp  string
	hdr  header
	room int // the header's bytes
	opt  Options
}

// Area is the packed matrices' memory; entries' offsets are relative to it.
func (a *Arena) Area() []byte { return a.area }

// Open returns the arena for entries es of size bytes (Layout's). With a
// cache (opt.Dir and opt.Key set, size at least opt.Min, a platform that
// maps files) it maps the file of that key and group when the file holds
// exactly es, else it starts a new file (refusing, logging and removing a
// stale, corrupt or foreign one); without one, or when no file can be
// written, it returns anonymous memory. Unless the arena is FromDisk the
// caller packs every entry into Area and calls Commit; Close releases it.
// es's checksums are set from a file mapped.
func Open(opt Options, es []Entry, size int64) (*Arena, error) {
	if size < 0 || uint64(size) > math.MaxInt {
		return nil, fmt.Errorf("packed weights of %d bytes: out of range", size)
	}
	if opt.Dir != "" && opt.Key != "" && size > 0 && size >= opt.Min && Mappable {
		pruneTemp(opt.Dir)
		path := FileName(opt.Dir, opt.Name, opt.Key, opt.Group)
		a, err := openFile(path, opt.Key, opt.Group, es, opt.Checking)
		if err == nil {
			a.Bytes = size
			return a, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			opt.log("packed weights %s: %v; rebuilding", path, err)
		}
		os.Remove(path)
		if a, err = create(path, opt, es, size); err == nil {
			return a, nil
		}
		opt.log("packed weights: no cache (%v)", err)
	}
	data, mapped, err := anonMem(int(size))
	if err != nil {
		return nil, fmt.Errorf("memory for %d bytes of packed weights: %w", size, err)
	}
	return &Arena{data: data, area: data, mapped: mapped, Bytes: size}, nil
}

// create starts a cache file at path: a locked temporary file of the
// whole size, mapped writable, its header written by Commit.
func create(path string, opt Options, es []Entry, size int64) (*Arena, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	hdr := header{Version: Version, Key: opt.Key, Group: opt.Group, Data: size, Entries: append([]Entry(nil), es...)}
	// Checksums are not known yet: size the header with placeholders of the
	// widest value; Commit pads to it.
	for i := range hdr.Entries {
		hdr.Entries[i].CRC = ^uint32(0)
	}
	js, err := json.Marshal(hdr)
	if err != nil {
		return nil, err
	}
	if len(js) > headerMax {
		return nil, fmt.Errorf("a header of %d bytes (at most %d)", len(js), headerMax)
	}
	dataAt := int64(16+len(js)+dataAlign-1) / dataAlign * dataAlign
	total := dataAt + size
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, err
	}
	tmp := f.Name()
	lockFile(f) // pruneTemp leaves a file alone while it is being written
	fail := func(err error) (*Arena, error) {
		f.Close()
		os.Remove(tmp)
		return nil, err
	}
	if err := f.Truncate(total); err != nil {
		return fail(err)
	}
	m, err := mapFileRW(f, int(total))
	if err != nil {
		return fail(err)
	}
	return &Arena{Path: path, Bytes: size, data: m, area: m[dataAt:], mapped: true, f: f, tmp: tmp, hdr: hdr, room: len(js), opt: opt}, nil
}

// Commit finishes a cache file after the caller packed the area: the
// checksums, the header, then the rename into place (and the removal of
// the older files of the same name and group). It does nothing for an
// arena without a file being written (or nil). When it fails the arena stays
// usable, without a file (Path "").
func (a *Arena) Commit() error {
	if a == nil || a.f == nil {
		return nil
	}
	f, tmp, path := a.f, a.tmp, a.Path
	a.f, a.tmp = nil, ""
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		a.Path = ""
		return fmt.Errorf("packed weights %s: %w", path, err)
	}
	es := a.hdr.Entries
	parallel(len(es), func(i int) { es[i].CRC = entryCRC(a.area, &es[i]) })
	js, err := json.Marshal(a.hdr)
	if err != nil {
		return fail(err)
	}
	if len(js) > a.room {
		return fail(errors.New("header grew past its room"))
	}
	js = append(js, strings.Repeat(" ", a.room-len(js))...)
	copy(a.data, magic)
	binary.LittleEndian.PutUint32(a.data[8:], uint32(len(js)))
	binary.LittleEndian.PutUint32(a.data[12:], crc32.Checksum(js, castagnoli))
	copy(a.data[16:], js)
	if err := syncMem(a.data); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		a.Path = ""
		return fmt.Errorf("packed weights %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		a.Path = ""
		return fmt.Errorf("packed weights %s: %w", path, err)
	}
	protectRead(a.data)
	pruneCache(path, a.opt.Name, a.opt.Group)
	return nil
}

// Close releases the arena's memory; an uncommitted file is removed. The
// matrices bound to the area must not be used afterwards.
func (a *Arena) Close() error {
	if a == nil {
		return nil
	}
	if a.f != nil {
		a.f.Close()
		os.Remove(a.tmp)
		a.f, a.Path = nil, ""
	}
	if a.data == nil {
		return nil
	}
	var err error
	if a.mapped {
		err = unmapMem(a.data)
	}
	a.data, a.area = nil, nil
	return err
}

// TempPattern matches the temporary files of a cache being written.
const TempPattern = "*.q4.tmp-*"

// pruneTemp removes the temporary cache files in dir that no process is
// writing (a crash or a kill left them): those it can lock.
func pruneTemp(dir string) {
	tmps, _ := filepath.Glob(filepath.Join(dir, TempPattern))
	for _, p := range tmps {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		if tryLock(f) {
			os.Remove(p)
		}
		f.Close()
	}
}

// pruneCache removes older cache files of the same model name and group.
func pruneCache(keep, name string, group int) {
	old, _ := filepath.Glob(filepath.Join(filepath.Dir(keep), fmt.Sprintf("%s-g%d-*.q4", Name(name), group)))
	for _, f := range old {
		if f != keep {
			os.Remove(f)
		}
	}
}

// openFile maps an existing cache file and checks it against what the
// loader wants: format, key, group, the matrices and their checksums;
// progress, when set, hears the bytes checked.
func openFile(path, key string, group int, want []Entry, progress func(done, total int64)) (*Arena, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var head [16]byte
	if _, err := f.ReadAt(head[:], 0); err != nil {
		return nil, fmt.Errorf("short file")
	}
	if string(head[:8]) != magic {
		return nil, fmt.Errorf("not a packed-weights file")
	}
	hl := int64(binary.LittleEndian.Uint32(head[8:]))
	if hl > headerMax || 16+hl > fi.Size() {
		return nil, fmt.Errorf("bad header length")
	}
	js := make([]byte, hl)
	if _, err := f.ReadAt(js, 16); err != nil {
		return nil, err
	}
	if crc32.Checksum(js, castagnoli) != binary.LittleEndian.Uint32(head[12:]) {
		return nil, fmt.Errorf("header checksum mismatch")
	}
	var hdr header
	if err := json.Unmarshal(js, &hdr); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	switch {
	case hdr.Version != Version:
		return nil, fmt.Errorf("format version %d, want %d", hdr.Version, Version)
	case hdr.Key != key:
		return nil, fmt.Errorf("made for another checkpoint")
	case hdr.Group != group:
		return nil, fmt.Errorf("group size %d, want %d", hdr.Group, group)
	case len(hdr.Entries) != len(want):
		return nil, fmt.Errorf("%d matrices, want %d", len(hdr.Entries), len(want))
	}
	for i, e := range hdr.Entries {
		w := want[i]
		if e.Name != w.Name || e.Rows != w.Rows || e.Cols != w.Cols || e.QOff != w.QOff || e.SOOff != w.SOOff {
			return nil, fmt.Errorf("matrix %d is %s %dx%d, want %s %dx%d", i, e.Name, e.Rows, e.Cols, w.Name, w.Rows, w.Cols)
		}
	}
	dataAt := (16 + hl + dataAlign - 1) / dataAlign * dataAlign
	var size int64
	if len(want) > 0 {
		last := want[len(want)-1]
		size = up(last.SOOff + int64(last.SOFloats)*4)
	}
	if hdr.Data != size || fi.Size() != dataAt+size {
		return nil, fmt.Errorf("file size %d, want %d", fi.Size(), dataAt+size)
	}
	m, err := mapFileRead(f, int(fi.Size()))
	if err != nil {
		return nil, err
	}
	d := m[dataAt:]
	a := &Arena{data: m, area: d, mapped: true, Path: path, FromDisk: true}
	bad := make([]bool, len(want))
	var checked, sum atomic.Int64
	for i := range want {
		sum.Add(want[i].bytes())
	}
	parallel(len(want), func(i int) {
		bad[i] = entryCRC(d, &want[i]) != hdr.Entries[i].CRC
		n := checked.Add(want[i].bytes())
		if progress != nil {
			progress(n, sum.Load())
		}
	})
	for i, b := range bad {
		if b {
			a.Close()
			return nil, fmt.Errorf("checksum mismatch in %s", want[i].Name)
		}
	}
	for i := range want {
		want[i].CRC = hdr.Entries[i].CRC
	}
	return a, nil
}
