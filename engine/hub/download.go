package hub

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"verdict/engine/safefile"
)

// Progress is the state of a download, as Options.Progress hears it.
type Progress struct {
	Repo string `json:"repo"`
	// Stage is StageChecking (hashing a file already on disk) or
	// StageDownloading.
	Stage string `json:"stage"`
	File  string `json:"file"`
	// FileIndex counts from 1 to Files.
	FileIndex int   `json:"file_index"`
	Files     int   `json:"files"`
	FileDone  int64 `json:"file_done"`
	FileSize  int64 `json:"file_size"`
	// Done of Total bytes of the download; files already in the cache count
	// as done.
	Done  int64 `json:"done"`
	Total int64 `json:"total"`
	// BytesPerSec is the speed of this run's transfers (0 before the first).
	BytesPerSec float64 `json:"bytes_per_sec"`
	// Left is the time left at that speed (-1: unknown).
	Left time.Duration `json:"left"`
}

// Download stages.
const (
	StageChecking    = "checking"
	StageDownloading = "downloading"
)

// Options are Download's settings.
type Options struct {
	// Revision is a branch, tag or commit ("": main).
	Revision string
	// Progress, when set, hears the download at most ten times a second
	// and at the end of every file.
	Progress func(Progress)
	// Attempts per file: a connection cut or stalled mid-file is resumed
	// where it stopped, a checksum mismatch fetched again from the start
	// (0: DefaultAttempts).
	Attempts int
	// Backoff is the wait before a new attempt (0: one second times the
	// attempt's number).
	Backoff time.Duration
	// Include, when set, replaces Needed: the top-level files whose names
	// match one of these path.Match patterns are fetched (one GGUF file of
	// a repo of many: "*Q4_K_M.gguf"), and the repo need not be a
	// safetensors checkpoint.
	Include []string
}

// keep is the filter of the files opt fetches.
func (opt Options) keep() (func(string) bool, error) {
	if len(opt.Include) == 0 {
		return Needed, nil
	}
	for _, p := range opt.Include {
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("pattern %q: %w", p, err)
		}
	}
	return func(name string) bool {
		for _, p := range opt.Include {
			if ok, _ := path.Match(p, name); ok {
				return true
			}
		}
		return false
	}, nil
}

// DefaultAttempts is the tries per file unless Options say otherwise.
const DefaultAttempts = 3

// Result is what a download did.
type Result struct {
	Info *Info
	// Path is the snapshot folder: open it as a model.
	Path string
	// Fetched is the bytes transferred; Reused the files found valid in
	// the cache; Refetched the files found corrupt there and fetched again.
	Fetched   int64
	Reused    []string
	Refetched []string
}

// Download fetches the files of repo the engine needs into the cache and
// returns the snapshot folder. Files already in the cache are checked
// (size and hash) and kept when valid; an interrupted file is resumed from
// its .incomplete part with a Range request; every file is checked against
// the Hub's hash before it enters the cache. ctx stops it; the part written
// so far stays for the next run to resume.
func (c *Client) Download(ctx context.Context, repo string, opt Options) (*Result, error) {
	keep, err := opt.keep()
	if err != nil {
		return nil, err
	}
	info, err := c.InfoOf(ctx, repo, opt.Revision, keep)
	if err != nil {
		return nil, err
	}
	switch {
	case len(opt.Include) > 0 && len(info.Files) == 0:
		return nil, fmt.Errorf("no top-level file of %s at %s matches %s", repo, info.Revision, strings.Join(opt.Include, ", "))
	case len(opt.Include) == 0 && (!hasFile(info, "config.json") || !hasWeights(info)):
		return nil, fmt.Errorf("%s at %s has no config.json or no top-level .safetensors weights: not a checkpoint Verdict opens (a GGUF repo: name its file with an include pattern)", repo, info.Revision)
	}
	if opt.Attempts <= 0 {
		opt.Attempts = DefaultAttempts
	}
	rd := RepoDir(c.cacheDir(), repo)
	snap := filepath.Join(rd, "snapshots", info.Commit)
	for _, d := range []string{filepath.Join(rd, "blobs"), snap} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("hub cache: %w", err)
		}
	}
	if err := c.checkSpace(rd, info); err != nil {
		return nil, err
	}
	d := &download{c: c, opt: opt, info: info, rd: rd, snap: snap, res: &Result{Info: info, Path: snap}}
	d.p = Progress{Repo: repo, Files: len(info.Files), Total: info.Size, Left: -1}
	for i, f := range info.Files {
		d.p.FileIndex, d.p.File, d.p.FileDone, d.p.FileSize = i+1, f.Path, 0, f.Size
		if err := d.file(ctx, f); err != nil {
			return nil, err
		}
	}
	if info.Revision != info.Commit {
		if err := writeRef(rd, info.Revision, info.Commit); err != nil {
			return nil, fmt.Errorf("hub cache: %w", err)
		}
	}
	return d.res, nil
}

// SpaceError is a download that does not fit on the cache's disk.
type SpaceError struct {
	Dir        string
	Need, Free int64
}

func (e *SpaceError) Error() string {
	return fmt.Sprintf("the download needs %.2f GB more in %s, and only %.2f GB are free: free some space or set HF_HUB_CACHE to another disk", float64(e.Need)/1e9, e.Dir, float64(e.Free)/1e9)
}

// checkSpace refuses a download whose missing bytes (files not yet in the
// cache, less the parts already fetched) exceed the free space.
func (c *Client) checkSpace(rd string, info *Info) error {
	free := c.free
	if free == nil {
		free = diskFree
	}
	n, err := free(rd)
	if err != nil {
		return nil // unknown: the writes will say
	}
	var need int64
	for _, f := range info.Files {
		blob := filepath.Join(rd, "blobs", f.blob())
		if isFile(blob) {
			continue
		}
		need += f.Size
		if fi, err := os.Lstat(blob + ".incomplete"); err == nil && fi.Mode().IsRegular() && fi.Size() <= f.Size {
			need -= fi.Size()
		}
	}
	if need > n {
		return &SpaceError{Dir: rd, Need: need, Free: n}
	}
	return nil
}

func hasFile(info *Info, name string) bool {
	for _, f := range info.Files {
		if f.Path == name {
			return true
		}
	}
	return false
}

func hasWeights(info *Info) bool {
	for _, f := range info.Files {
		if strings.HasSuffix(f.Path, ".safetensors") {
			return true
		}
	}
	return false
}

// download is one Download's state.
type download struct {
	c          *Client
	opt        Options
	info       *Info
	rd, snap   string
	res        *Result
	p          Progress
	started    time.Time // the first byte transferred
	reported   time.Time
	fetchedRun int64
	samples    []sample // for speed
}

// sample is the bytes transferred by a time.
type sample struct {
	at    time.Time
	bytes int64
}

// report tells Options.Progress, at most ten times a second unless force.
func (d *download) report(force bool) {
	if d.opt.Progress == nil {
		return
	}
	now := time.Now()
	if !force && now.Sub(d.reported) < 100*time.Millisecond {
		return
	}
	d.reported = now
	d.p.Left = -1
	if !d.started.IsZero() {
		d.p.BytesPerSec = d.speed(now)
		if d.p.BytesPerSec > 0 {
			d.p.Left = time.Duration(float64(d.p.Total-d.p.Done) / d.p.BytesPerSec * float64(time.Second))
		}
	}
	d.opt.Progress(d.p)
}

// speedWindow is the span the transfer speed is measured over.
const speedWindow = 5 * time.Second

// speed is the bytes a second transferred over about the last speedWindow
// (since the first byte when that is more recent), from samples taken at
// each report.
func (d *download) speed(now time.Time) float64 {
	d.samples = append(d.samples, sample{now, d.fetchedRun})
	for len(d.samples) > 1 && now.Sub(d.samples[1].at) >= speedWindow {
		d.samples = d.samples[1:]
	}
	from := d.samples[0]
	if now.Sub(from.at) < speedWindow {
		from = sample{d.started, 0}
	}
	el := now.Sub(from.at).Seconds()
	if el < 0.2 {
		return 0
	}
	return float64(d.fetchedRun-from.bytes) / el
}

// file brings one file into the cache and links it into the snapshot.
func (d *download) file(ctx context.Context, f File) error {
	unlock, err := lock(ctx, filepath.Join(d.c.cacheDir(), ".locks", filepath.Base(d.rd), f.blob()+".lock"))
	if err != nil {
		return err
	}
	defer unlock()
	blob := filepath.Join(d.rd, "blobs", f.blob())
	link := filepath.Join(d.snap, filepath.FromSlash(f.Path))
	// A valid blob, or a valid plain file in the snapshot (a cache written
	// without symbolic links), is kept.
	for _, have := range []string{blob, link} {
		fi, err := os.Lstat(have)
		if err != nil || (have == link && !fi.Mode().IsRegular()) {
			continue
		}
		d.p.Stage = StageChecking
		err = d.verify(ctx, have, f)
		if err == nil {
			d.p.Done += f.Size
			d.p.FileDone = f.Size
			d.report(true)
			d.res.Reused = append(d.res.Reused, f.Path)
			if have == blob {
				return linkBlob(blob, link)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ce *ChecksumError
		if !errors.As(err, &ce) {
			return err
		}
		if err := os.Remove(have); err != nil {
			return fmt.Errorf("%s is corrupt and cannot be removed: %w", have, err)
		}
		d.res.Refetched = append(d.res.Refetched, f.Path)
	}
	part := blob + ".incomplete"
	base := d.p.Done
	var fetched fs.FileInfo
	for attempt := 1; ; attempt++ {
		d.p.Done = base
		var err error
		fetched, err = d.fetch(ctx, f, part)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ce *ChecksumError
		switch {
		case errors.As(err, &ce):
			os.Remove(part) // fetched again from the start
		case errors.Is(err, errTransient):
		default:
			return err
		}
		if attempt >= d.opt.Attempts {
			return fmt.Errorf("%s: %s after %d attempts: %w", d.info.Repo, f.Path, attempt, err)
		}
		wait := d.opt.Backoff
		if wait == 0 {
			wait = time.Duration(attempt) * time.Second
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	// The path must still name the file fetch verified.
	if err := samePart(part, fetched); err != nil {
		return err
	}
	if err := os.Rename(part, blob); err != nil {
		return fmt.Errorf("hub cache: %w", err)
	}
	d.p.Done = base + f.Size
	d.report(true)
	return linkBlob(blob, link)
}

// newHash is the hash a file is checked with, ready for its content.
func newHash(f File) hash.Hash {
	if f.LFS {
		return sha256.New()
	}
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", f.Size)
	return h
}

func (f File) want() string {
	if f.LFS {
		return f.SHA256
	}
	return f.OID
}

// verify checks the file at path against f's size and hash, reporting
// progress as it reads.
func (d *download) verify(ctx context.Context, path string, f File) error {
	fh, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return err
	}
	if fi.Size() != f.Size {
		return &ChecksumError{File: f.Path, Want: fmt.Sprintf("%s (%d bytes)", f.want(), f.Size), Got: fmt.Sprintf("of a file of %d bytes", fi.Size())}
	}
	h := newHash(f)
	if err := d.hashInto(ctx, h, fh, f.Size); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != f.want() {
		return &ChecksumError{File: f.Path, Want: f.want(), Got: got}
	}
	return nil
}

// hashInto reads n bytes of r into h, stopped by ctx, with progress on the
// current file.
func (d *download) hashInto(ctx context.Context, h hash.Hash, r io.Reader, n int64) error {
	buf := make([]byte, 1<<20)
	start := d.p.FileDone
	var read int64
	for read < n {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		k, err := io.ReadFull(r, buf[:min(int64(len(buf)), n-read)])
		h.Write(buf[:k])
		read += int64(k)
		d.p.FileDone = start + read
		d.report(false)
		if err != nil {
			return err
		}
	}
	d.p.FileDone = start
	return nil
}

// errStalled ends a transfer that received nothing for StallTimeout.
var errStalled = errors.New("no data received")

// openPart opens (or creates) the part file at path without following a
// link there, and checks that it is a regular file which the path still
// names. The info is the opened file's.
func openPart(path string) (*os.File, fs.FileInfo, error) {
	f, err := openPartFile(path)
	if err != nil {
		var nr *safefile.NotRegularError
		if errors.As(err, &nr) {
			return nil, nil, fmt.Errorf("hub cache: %w: remove it and run again", err)
		}
		return nil, nil, fmt.Errorf("hub cache: %w", err)
	}
	fi, err := f.Stat()
	if err == nil {
		err = safefile.Check(path, fi)
	}
	if err == nil {
		err = samePart(path, fi)
	}
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("hub cache: %w", err)
	}
	return f, fi, nil
}

// samePart checks that path is (still) the regular file fi describes, not a
// link or another file put in its place.
func samePart(path string, fi fs.FileInfo) error {
	cur, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("hub cache: %w", err)
	}
	if err := safefile.Check(path, cur); err != nil {
		return fmt.Errorf("hub cache: %w", err)
	}
	if !os.SameFile(cur, fi) {
		return fmt.Errorf("hub cache: %s was replaced while it was written", path)
	}
	return nil
}

// fetch downloads f into part, resuming from the bytes already there, and
// checks the result's size and hash. A part longer than f is not a prefix of
// it: it is emptied and fetched again. The info is the part's.
func (d *download) fetch(ctx context.Context, f File, part string) (_ fs.FileInfo, err error) {
	out, fi, err := openPart(part)
	if err != nil {
		return nil, err
	}
	defer func() {
		if e := out.Close(); err == nil && e != nil {
			err = fmt.Errorf("hub cache: %w", e)
		}
	}()
	off := fi.Size()
	if off > f.Size {
		if err := out.Truncate(0); err != nil {
			return nil, fmt.Errorf("hub cache: %w", err)
		}
		off = 0
	}
	d.p.Stage, d.p.FileDone = StageChecking, 0
	h := newHash(f)
	if err := d.hashInto(ctx, h, out, off); err != nil {
		return nil, err
	}
	d.p.FileDone = off
	d.p.Done += off
	d.p.Stage = StageDownloading
	if off < f.Size {
		if err := d.transfer(ctx, f, out, off, h); err != nil {
			return nil, err
		}
	}
	end, err := out.Stat()
	if err != nil {
		return nil, fmt.Errorf("hub cache: %w", err)
	}
	if end.Size() != f.Size {
		return nil, &ChecksumError{File: f.Path, Want: fmt.Sprintf("%s (%d bytes)", f.want(), f.Size), Got: fmt.Sprintf("of a part of %d bytes", end.Size())}
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != f.want() {
		return nil, &ChecksumError{File: f.Path, Want: f.want(), Got: got}
	}
	if err := out.Sync(); err != nil {
		return nil, fmt.Errorf("hub cache: %w", err)
	}
	return fi, nil
}

// transfer requests f from byte off on and appends it to out and h.
func (d *download) transfer(ctx context.Context, f File, out *os.File, off int64, h hash.Hash) error {
	stall := d.c.StallTimeout
	if stall == 0 {
		stall = DefaultStallTimeout
	}
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := time.AfterFunc(stall, func() { cancel(errStalled) })
	defer timer.Stop()

	u := d.c.endpoint() + "/" + d.info.Repo + "/resolve/" + d.info.Commit + "/" + escapePath(f.Path)
	hdr := http.Header{}
	if off > 0 {
		hdr.Set("Range", fmt.Sprintf("bytes=%d-", off))
	}
	resp, err := d.c.do(rctx, u, hdr)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if c := context.Cause(rctx); errors.Is(c, errStalled) {
			return transientErr{fmt.Errorf("%s: %w for %v", f.Path, errStalled, stall)}
		}
		return err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		if off > 0 { // the server ignored the range: start again
			if err := restart(out, h, f, &off); err != nil {
				return err
			}
			d.p.Done -= d.p.FileDone
			d.p.FileDone = 0
		}
	case http.StatusPartialContent:
		start, err := rangeStart(resp.Header.Get("Content-Range"), f.Size)
		if err != nil {
			return err
		}
		if start != off {
			return hostile("%s: asked for byte %d on, got byte %d on", f.Path, off, start)
		}
	case http.StatusRequestedRangeNotSatisfiable:
		out.Truncate(0)
		return transientErr{fmt.Errorf("%s: the Hub refused to resume at byte %d", f.Path, off)}
	default:
		err := d.c.statusErr(resp, d.info.Repo, d.info.Revision, f.Path)
		if resp.StatusCode >= 500 {
			return transientErr{err}
		}
		return err
	}
	want := f.Size - off
	if resp.ContentLength > want {
		return hostile("%s: the Hub sends %d bytes where %d are left", f.Path, resp.ContentLength, want)
	}
	if _, err := out.Seek(off, io.SeekStart); err != nil {
		return err
	}
	if d.started.IsZero() {
		d.started = time.Now()
	}
	buf := make([]byte, 256<<10)
	var got int64
	first := true // the first bytes of a transfer are always reported
	for {
		k, rerr := resp.Body.Read(buf)
		if k > 0 {
			timer.Reset(stall)
			if got+int64(k) > want {
				out.Truncate(off + got)
				return hostile("%s: the Hub sent more than the %d bytes it lists", f.Path, f.Size)
			}
			if _, err := out.Write(buf[:k]); err != nil {
				return fmt.Errorf("hub cache: writing %s: %w", f.Path, err)
			}
			h.Write(buf[:k])
			got += int64(k)
			d.fetchedRun += int64(k)
			d.res.Fetched += int64(k)
			d.p.FileDone += int64(k)
			d.p.Done += int64(k)
			d.report(first)
			first = false
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if c := context.Cause(rctx); errors.Is(c, errStalled) {
				rerr = fmt.Errorf("%w for %v", errStalled, stall)
			}
			return transientErr{fmt.Errorf("%s: cut at byte %d of %d: %w", f.Path, off+got, f.Size, rerr)}
		}
	}
	if got < want {
		return transientErr{fmt.Errorf("%s: cut at byte %d of %d", f.Path, off+got, f.Size)}
	}
	return nil
}

// restart empties a part the server will send again whole.
func restart(out *os.File, h hash.Hash, f File, off *int64) error {
	if err := out.Truncate(0); err != nil {
		return err
	}
	h.Reset()
	if !f.LFS {
		fmt.Fprintf(h, "blob %d\x00", f.Size)
	}
	*off = 0
	return nil
}

// rangeStart parses "bytes START-END/SIZE" and checks it against size.
func rangeStart(cr string, size int64) (int64, error) {
	spec, ok := strings.CutPrefix(cr, "bytes ")
	rng, total, ok2 := strings.Cut(spec, "/")
	s, e, ok3 := strings.Cut(rng, "-")
	if !ok || !ok2 || !ok3 {
		return 0, hostile("Content-Range %q is not bytes START-END/SIZE", cr)
	}
	start, err1 := strconv.ParseInt(s, 10, 64)
	end, err2 := strconv.ParseInt(e, 10, 64)
	if err1 != nil || err2 != nil || start < 0 || end < start || end >= size {
		return 0, hostile("Content-Range %q is outside the file's %d bytes", cr, size)
	}
	if total != "*" {
		if n, err := strconv.ParseInt(total, 10, 64); err != nil || n != size {
			return 0, hostile("Content-Range %q: the file has %d bytes", cr, size)
		}
	}
	return start, nil
}

func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

// linkBlob points the snapshot's file at its blob with a relative symbolic
// link, as huggingface_hub does; where links cannot be made, the blob is
// hard-linked or copied.
func linkBlob(blob, link string) error {
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return fmt.Errorf("hub cache: %w", err)
	}
	rel, err := filepath.Rel(filepath.Dir(link), blob)
	if err != nil {
		return err
	}
	if cur, err := os.Readlink(link); err == nil && cur == rel {
		return nil
	}
	os.Remove(link)
	if err := os.Symlink(rel, link); err == nil {
		return nil
	}
	if err := os.Link(blob, link); err == nil {
		return nil
	}
	return copyFile(blob, link)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst + ".tmp")
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(dst+".tmp", dst)
}

// writeRef records that revision points to commit (refs/main, refs/pr/1).
func writeRef(rd, revision, commit string) error {
	p := filepath.Join(rd, "refs", filepath.FromSlash(revision))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(commit), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// lockWait is how often a held lock is tried again.
const lockWait = 200 * time.Millisecond

// lock takes the file lock at path (the one huggingface_hub takes for the
// same blob), waiting while another process holds it, until ctx ends.
func lock(ctx context.Context, path string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("hub cache: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("hub cache: %w", err)
	}
	for {
		ok, err := tryLock(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("hub cache: lock %s: %w", path, err)
		}
		if ok {
			break
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(lockWait):
		}
	}
	var once sync.Once
	return func() { once.Do(func() { unlockFile(f); f.Close() }) }, nil
}
