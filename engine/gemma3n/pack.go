package gemma3n

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"verdict/native"
)

// Packing the large matrices to 4 bits at load (Weights q4), and the cache
// of packed weights on disk.
//
// The packed matrices live in one arena outside the Go heap: a memory-mapped
// cache file, or anonymous memory when there is no cache. A cache file is
//
//	magic "VRDQ4PK\x00" | u32 header length | u32 CRC-32C of the header |
//	header JSON | zero padding to 4096 | data
//
// The header names the format version, the checkpoint's identity (Key), the
// group size and, per matrix, its name, shape, data offsets and the CRC-32C
// of its bytes. A file whose header, size, key, group, matrix list or any
// checksum disagrees is stale or corrupt: it is removed and rebuilt. Files
// are written under a temporary name (locked while written) and renamed; a
// failed or cancelled build removes its temporary file, and a load removes
// the unlocked ones a crash left behind.

const (
	packMagic   = "VRDQ4PK\x00"
	packVersion = 1
	packAlign   = 64
	packDataAt  = 4096 // data starts at a multiple of this
)

// packMinCache is the smallest packed size worth a cache file: smaller
// models pack in a moment.
var packMinCache int64 = 64 << 20

// packReq is one matrix to pack.
type packReq struct {
	dst        *native.Matrix
	name       string
	rows, cols int  // the packed matrix's shape
	transpose  bool // packed is the transpose of the stored cols×rows tensor
}

// entryName names a request in the cache header.
func (r packReq) entryName() string {
	if r.transpose {
		return r.name + " (transposed)"
	}
	return r.name
}

type packEntry struct {
	Name     string `json:"name"`
	Rows     int    `json:"rows"`
	Cols     int    `json:"cols"`
	QOff     int64  `json:"q_off"` // relative to the data start
	SOOff    int64  `json:"so_off"`
	CRC      uint32 `json:"crc32c"`
	qLen     int64
	soFloats int
}

type packHeader struct {
	Version int         `json:"version"`
	Key     string      `json:"key"`
	Group   int         `json:"group"`
	Data    int64       `json:"data_bytes"`
	Entries []packEntry `json:"matrices"`
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// packed is a model's arena of packed weights.
type packed struct {
	data     []byte // the mapping (header included for cache files)
	area     []byte // the packed matrices within data
	mapped   bool
	Path     string // cache file ("" when none)
	FromDisk bool   // loaded from an existing cache file
	Bytes    int64  // packed weight bytes
}

func (p *packed) close() error {
	if p == nil || p.data == nil {
		return nil
	}
	var err error
	if p.mapped {
		err = unmapMem(p.data)
	}
	p.data = nil
	return err
}

// layout assigns each request its offsets; it returns the data size.
func layout(reqs []packReq, group int) ([]packEntry, int64) {
	es := make([]packEntry, len(reqs))
	var off int64
	al := func(n int64) int64 { return (n + packAlign - 1) / packAlign * packAlign }
	for i, r := range reqs {
		nq, ns := native.Q4Sizes(r.rows, r.cols, group)
		es[i] = packEntry{Name: r.entryName(), Rows: r.rows, Cols: r.cols, qLen: int64(nq), soFloats: ns}
		es[i].QOff = off
		off = al(off + int64(nq))
		es[i].SOOff = off
		off = al(off + int64(ns)*4)
	}
	return es, off
}

// views returns the nibbles and scales of entry e in the data area.
func views(data []byte, e *packEntry) ([]byte, []float32) {
	q := data[e.QOff : e.QOff+e.qLen : e.QOff+e.qLen]
	var so []float32
	if e.soFloats > 0 {
		so = unsafe.Slice((*float32)(unsafe.Pointer(&data[e.SOOff])), e.soFloats)
	}
	return q, so
}

func entryCRC(data []byte, e *packEntry) uint32 {
	c := crc32.Update(0, castagnoli, data[e.QOff:e.QOff+e.qLen])
	return crc32.Update(c, castagnoli, data[e.SOOff:e.SOOff+int64(e.soFloats)*4])
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

// cacheFile names the cache file of a checkpoint: a readable prefix, the
// group size and a hash of the key and format.
func cacheFile(dir, name, key string, group int) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d\x00%d", key, group, packVersion)))
	return filepath.Join(dir, fmt.Sprintf("%s-g%d-%s.q4", cacheName(name), group, hex.EncodeToString(h[:8])))
}

// cacheName keeps letters, digits, '-' and '.' of a model's name.
func cacheName(name string) string {
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

// pack packs reqs into q4 matrices, from the cache when it holds them.
func (pk *packer) pack(reqs []packReq) (*packed, error) {
	opt := pk.opt
	es, size := layout(reqs, opt.Group)
	useCache := opt.CacheDir != "" && opt.CacheKey != "" && size >= packMinCache && mmapSupported
	if useCache {
		pruneTemp(opt.CacheDir)
		path := cacheFile(opt.CacheDir, opt.CacheName, opt.CacheKey, opt.Group)
		p, err := openPacked(path, opt.CacheKey, opt.Group, es, pk.report(StageChecking))
		if err == nil {
			bindAll(p.area, reqs, es, opt.Group)
			p.Bytes = size
			return p, nil
		}
		if !errors.Is(err, os.ErrNotExist) && opt.Log != nil {
			opt.Log(fmt.Sprintf("packed weights %s: %v; rebuilding", path, err))
		}
		os.Remove(path)
		p, err = pk.buildCache(path, reqs, es, size)
		if err == nil {
			p.Bytes = size
			return p, nil
		}
		if cerr := opt.ctx().Err(); cerr != nil {
			return nil, cerr
		}
		if opt.Log != nil {
			opt.Log(fmt.Sprintf("packed weights: no cache (%v)", err))
		}
	}
	data, mapped, err := anonMem(int(size))
	if err != nil {
		return nil, fmt.Errorf("gemma3n: memory for %d bytes of packed weights: %w", size, err)
	}
	p := &packed{data: data, area: data, mapped: mapped, Bytes: size}
	if err := pk.quantizeAll(data, reqs, es); err != nil {
		p.close()
		return nil, err
	}
	bindAll(data, reqs, es, opt.Group)
	return p, nil
}

func bindAll(data []byte, reqs []packReq, es []packEntry, group int) {
	for i, r := range reqs {
		q, so := views(data, &es[i])
		*r.dst = native.NewQ4(r.rows, r.cols, group, q, so)
	}
}

// report returns a progress function for stage that passes at most about
// ten calls a second (and the last one) to LoadOptions.Progress; nil when
// there is none.
func (pk *packer) report(stage string) func(done, total int64) {
	f := pk.opt.Progress
	if f == nil {
		return nil
	}
	var mu sync.Mutex
	var last time.Time
	return func(done, total int64) {
		mu.Lock()
		defer mu.Unlock()
		if now := time.Now(); done >= total || now.Sub(last) >= 100*time.Millisecond {
			last = now
			f(stage, done, total)
		}
	}
}

// quantizeAll packs every request into data, reading the source a few rows
// at a time (never a whole float32 copy of the model). It stops between
// reads when the load's context is done, and reports the weights packed.
func (pk *packer) quantizeAll(data []byte, reqs []packReq, es []packEntry) error {
	const chunk = 4 << 20 // floats per read
	ctx, report := pk.opt.ctx(), pk.report(StagePacking)
	var total, done int64
	for _, r := range reqs {
		total += int64(r.rows) * int64(r.cols)
	}
	step := func(n int64) error {
		done += n
		if report != nil {
			report(done, total)
		}
		return ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	var buf []float32
	for i, r := range reqs {
		q, so := views(data, &es[i])
		if r.transpose {
			if err := pk.quantizeT(q, so, r); err != nil {
				return err
			}
			if err := step(int64(r.rows) * int64(r.cols)); err != nil {
				return err
			}
			continue
		}
		per := max(1, chunk/r.cols)
		if need := min(per, r.rows) * r.cols; cap(buf) < need {
			buf = make([]float32, need)
		}
		ng := r.cols / pk.opt.Group
		for r0 := 0; r0 < r.rows; r0 += per {
			n := min(per, r.rows-r0)
			b := buf[:n*r.cols]
			if err := pk.store.Rows(r.name, r0, b); err != nil {
				return fmt.Errorf("gemma3n: packing %s: %w", r.name, err)
			}
			native.QuantizeQ4(q[r0*r.cols/2:], so[r0*ng*2:], b, n, r.cols, pk.opt.Group)
			if err := step(int64(n) * int64(r.cols)); err != nil {
				return err
			}
		}
	}
	return nil
}

// quantizeT packs the transpose of a stored tensor: it reads the whole
// tensor (one matrix of float32, transiently), then packs the transpose a
// few rows at a time.
func (pk *packer) quantizeT(q []byte, so []float32, r packReq) error {
	src := make([]float32, r.rows*r.cols) // stored as [r.cols, r.rows]
	if err := pk.store.Rows(r.name, 0, src); err != nil {
		return fmt.Errorf("gemma3n: packing %s: %w", r.name, err)
	}
	per := max(1, (1<<20)/r.cols)
	buf := make([]float32, min(per, r.rows)*r.cols)
	ng := r.cols / pk.opt.Group
	for r0 := 0; r0 < r.rows; r0 += per {
		n := min(per, r.rows-r0)
		b := buf[:n*r.cols]
		for c := 0; c < r.cols; c++ {
			row := src[c*r.rows+r0 : c*r.rows+r0+n]
			for k, v := range row {
				b[k*r.cols+c] = v
			}
		}
		native.QuantizeQ4(q[r0*r.cols/2:], so[r0*ng*2:], b, n, r.cols, pk.opt.Group)
	}
	return nil
}

// buildCache packs into a new cache file at path.
func (pk *packer) buildCache(path string, reqs []packReq, es []packEntry, size int64) (*packed, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	hdr := packHeader{Version: packVersion, Key: pk.opt.CacheKey, Group: pk.opt.Group, Data: size, Entries: es}
	// Checksums are not known yet: size the header with placeholders of the
	// widest value, then pad.
	for i := range hdr.Entries {
		hdr.Entries[i].CRC = ^uint32(0)
	}
	js, _ := json.Marshal(hdr)
	dataAt := int64(16+len(js)+packDataAt-1) / packDataAt * packDataAt
	total := dataAt + size
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, err
	}
	tmp := f.Name()
	lockFile(f) // pruneTemp leaves a file alone while it is being written
	fail := func(err error) (*packed, error) {
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
	d := m[dataAt:]
	p := &packed{data: m, area: d, mapped: true, Path: path}
	if err := pk.quantizeAll(d, reqs, es); err != nil {
		p.close()
		return fail(err)
	}
	parallel(len(es), func(i int) { es[i].CRC = entryCRC(d, &es[i]) })
	hdr.Entries = es
	room := len(js)
	js, _ = json.Marshal(hdr)
	if len(js) > room {
		p.close()
		return fail(fmt.Errorf("header grew past its room"))
	}
	// Pad to the placeholder length, which fixed where the data starts.
	js = append(js, []byte(strings.Repeat(" ", room-len(js)))...)
	copy(m, packMagic)
	binary.LittleEndian.PutUint32(m[8:], uint32(len(js)))
	binary.LittleEndian.PutUint32(m[12:], crc32.Checksum(js, castagnoli))
	copy(m[16:], js)
	if err := syncMem(m); err != nil {
		p.close()
		return fail(err)
	}
	if err := f.Close(); err != nil {
		p.close()
		os.Remove(tmp)
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		p.close()
		os.Remove(tmp)
		return nil, err
	}
	protectRead(m)
	bindAll(d, reqs, es, pk.opt.Group)
	pruneCache(path, pk.opt.CacheName, pk.opt.Group)
	return p, nil
}

// tempPattern matches the temporary files buildCache writes.
const tempPattern = "*.q4.tmp-*"

// pruneTemp removes the temporary cache files in dir that no process is
// writing (a crash or a kill left them): those it can lock.
func pruneTemp(dir string) {
	tmps, _ := filepath.Glob(filepath.Join(dir, tempPattern))
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
	old, _ := filepath.Glob(filepath.Join(filepath.Dir(keep), fmt.Sprintf("%s-g%d-*.q4", cacheName(name), group)))
	for _, f := range old {
		if f != keep {
			os.Remove(f)
		}
	}
}

// openPacked maps an existing cache file and checks it against what the
// loader wants: format, key, group, the matrices and their checksums;
// progress, when set, hears the bytes checked.
func openPacked(path, key string, group int, want []packEntry, progress func(done, total int64)) (*packed, error) {
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
	if string(head[:8]) != packMagic {
		return nil, fmt.Errorf("not a packed-weights file")
	}
	hl := int64(binary.LittleEndian.Uint32(head[8:]))
	if hl > packDataAt*64 || 16+hl > fi.Size() {
		return nil, fmt.Errorf("bad header length")
	}
	js := make([]byte, hl)
	if _, err := f.ReadAt(js, 16); err != nil {
		return nil, err
	}
	if crc32.Checksum(js, castagnoli) != binary.LittleEndian.Uint32(head[12:]) {
		return nil, fmt.Errorf("header checksum mismatch")
	}
	var hdr packHeader
	if err := json.Unmarshal(js, &hdr); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	switch {
	case hdr.Version != packVersion:
		return nil, fmt.Errorf("format version %d, want %d", hdr.Version, packVersion)
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
		want[i].CRC = e.CRC
	}
	dataAt := (16 + hl + packDataAt - 1) / packDataAt * packDataAt
	_, size := layout(nil, group)
	if len(want) > 0 {
		last := want[len(want)-1]
		size = (last.SOOff + int64(last.soFloats)*4 + packAlign - 1) / packAlign * packAlign
	}
	if hdr.Data != size || fi.Size() != dataAt+size {
		return nil, fmt.Errorf("file size %d, want %d", fi.Size(), dataAt+size)
	}
	m, err := mapFileRead(f, int(fi.Size()))
	if err != nil {
		return nil, err
	}
	d := m[dataAt:]
	p := &packed{data: m, area: d, mapped: true, Path: path, FromDisk: true}
	bad := make([]bool, len(want))
	var checked, sum atomic.Int64
	for i := range want {
		sum.Add(want[i].qLen + int64(want[i].soFloats)*4)
	}
	parallel(len(want), func(i int) {
		bad[i] = entryCRC(d, &want[i]) != want[i].CRC
		n := checked.Add(want[i].qLen + int64(want[i].soFloats)*4)
		if progress != nil {
			progress(n, sum.Load())
		}
	})
	for i, b := range bad {
		if b {
			p.close()
			return nil, fmt.Errorf("checksum mismatch in %s", want[i].Name)
		}
	}
	return p, nil
}
