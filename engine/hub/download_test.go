package hub

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"verdict/engine/hub/hubtest"
	"verdict/engine/safefile"
)

const testRepo = "google/gemma-3n-E2B-it"

// checkpoint is a small repo: the files the engine needs (two in LFS), and
// some it does not.
func checkpoint() map[string]string {
	return map[string]string{
		"config.json":       `{"model_type":"gemma3n"}`,
		"tokenizer.json":    strings.Repeat("tok", 3000),
		"model.safetensors": strings.Repeat("weights!", 40000), // 320 KB
		"README.md":         "# card",
		"model.gguf":        "not needed",
	}
}

func newTestHub(t *testing.T) (*hubtest.Repo, *Client) {
	f := hubtest.NewRepo(checkpoint(), "tokenizer.json", "model.safetensors", "model.gguf")
	s := (&hubtest.Hub{Repos: map[string]*hubtest.Repo{testRepo: f}}).Start(t)
	return f, &Client{Endpoint: s.URL, CacheDir: t.TempDir()}
}

// checkSnapshot checks that every needed file of f is in the snapshot,
// linked to its blob, with the fake Hub's content.
func checkSnapshot(t *testing.T, f *hubtest.Repo, c *Client, path string) {
	t.Helper()
	want := filepath.Join(RepoDir(c.CacheDir, testRepo), "snapshots", f.Commit)
	if path != want {
		t.Fatalf("snapshot at %s, want %s", path, want)
	}
	for name, b := range f.Files {
		got, err := os.ReadFile(filepath.Join(path, name))
		if !Needed(name) {
			if err == nil {
				t.Errorf("%s was downloaded, but the engine does not need it", name)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("%s: %d bytes (%v), want %d", name, len(got), err, len(b))
		}
		target, err := os.Readlink(filepath.Join(path, name))
		blob := hubtest.GitOID(b)
		if f.LFS[name] {
			blob = hubtest.SHA256(b)
		}
		if err != nil || target != filepath.Join("..", "..", "blobs", blob) {
			t.Errorf("%s links to %q (%v), want ../../blobs/%s", name, target, err, blob)
		}
	}
	ref, err := os.ReadFile(filepath.Join(RepoDir(c.CacheDir, testRepo), "refs", "main"))
	if err != nil || string(ref) != f.Commit {
		t.Errorf("refs/main holds %q (%v), want %s", ref, err, f.Commit)
	}
	if got, err := Resolve(c.CacheDir, testRepo); err != nil || got != path {
		t.Errorf("Resolve: %q, %v; want %s", got, err, path)
	}
}

func TestDownloadFull(t *testing.T) {
	f, c := newTestHub(t)
	var last Progress
	calls := 0
	res, err := c.Download(context.Background(), testRepo, Options{Progress: func(p Progress) { last = p; calls++ }})
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, f, c, res.Path)
	want := int64(len(f.Files["config.json"]) + len(f.Files["tokenizer.json"]) + len(f.Files["model.safetensors"]))
	if res.Fetched != want || res.Info.Size != want {
		t.Errorf("fetched %d bytes of %d listed, want %d", res.Fetched, res.Info.Size, want)
	}
	if calls == 0 || last.Done != want || last.Total != want || last.Files != 3 || last.FileIndex != 3 {
		t.Errorf("last progress %+v after %d calls, want %d of %d bytes, file 3 of 3", last, calls, want, want)
	}
	// A second run checks what is there and fetches nothing.
	res, err = c.Download(context.Background(), testRepo, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Fetched != 0 || len(res.Reused) != 3 {
		t.Errorf("second run fetched %d bytes, reused %v", res.Fetched, res.Reused)
	}
	for name, rs := range f.Ranges {
		if len(rs) != 1 {
			t.Errorf("%s requested %d times", name, len(rs))
		}
	}
}

// TestDownloadResume: a connection cut mid-file leaves a .incomplete part;
// the next run (or the next attempt of the same run) asks for the rest with
// a Range request and completes the file.
func TestDownloadResume(t *testing.T) {
	for _, tc := range []struct {
		name     string
		attempts int
		runs     int
	}{
		{"next run", 1, 2},
		{"same run", 3, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, c := newTestHub(t)
			const cutAt = 100000
			f.Cut["model.safetensors"] = cutAt
			var err error
			var res *Result
			for run := 1; run <= tc.runs; run++ {
				res, err = c.Download(context.Background(), testRepo, Options{Attempts: tc.attempts, Backoff: time.Millisecond})
				if run < tc.runs {
					if err == nil || !strings.Contains(err.Error(), "cut at byte 100000") {
						t.Fatalf("run %d: %v, want the cut reported", run, err)
					}
					part := filepath.Join(RepoDir(c.CacheDir, testRepo), "blobs", hubtest.SHA256(f.Files["model.safetensors"])+".incomplete")
					if fi, err := os.Stat(part); err != nil || fi.Size() != cutAt {
						t.Fatalf("the part after the cut: %v, %v; want %d bytes", fi, err, cutAt)
					}
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			checkSnapshot(t, f, c, res.Path)
			rs := f.Ranges["model.safetensors"]
			if len(rs) != 2 || rs[0] != "" || rs[1] != "bytes=100000-" {
				t.Errorf("requests' Range headers %q, want none then bytes=100000-", rs)
			}
		})
	}
}

// TestDownloadCorrupt: a blob corrupted in the cache is refused, deleted
// and fetched again; a corrupt transfer is fetched again; one that stays
// corrupt fails with a ChecksumError and leaves nothing in the cache.
func TestDownloadCorrupt(t *testing.T) {
	t.Run("in the cache", func(t *testing.T) {
		f, c := newTestHub(t)
		res, err := c.Download(context.Background(), testRepo, Options{})
		if err != nil {
			t.Fatal(err)
		}
		blob := filepath.Join(RepoDir(c.CacheDir, testRepo), "blobs", hubtest.SHA256(f.Files["model.safetensors"]))
		b, _ := os.ReadFile(blob)
		b[1234] ^= 1
		os.WriteFile(blob, b, 0o644)
		res, err = c.Download(context.Background(), testRepo, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Refetched) != 1 || res.Refetched[0] != "model.safetensors" || res.Fetched != int64(len(b)) {
			t.Errorf("refetched %v, %d bytes; want model.safetensors, %d", res.Refetched, res.Fetched, len(b))
		}
		checkSnapshot(t, f, c, res.Path)
	})
	for _, tc := range []struct {
		name    string
		corrupt int
		file    string
		ok      bool
	}{
		{"once in transit, LFS", 1, "model.safetensors", true},
		{"once in transit, git", 1, "config.json", true},
		{"every time", 99, "model.safetensors", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, c := newTestHub(t)
			f.Corrupt[tc.file] = tc.corrupt
			res, err := c.Download(context.Background(), testRepo, Options{Backoff: time.Millisecond})
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				checkSnapshot(t, f, c, res.Path)
				return
			}
			var ce *ChecksumError
			if !errors.As(err, &ce) || ce.File != tc.file {
				t.Fatalf("error %v, want a checksum error on %s", err, tc.file)
			}
			blobs, _ := os.ReadDir(filepath.Join(RepoDir(c.CacheDir, testRepo), "blobs"))
			for _, b := range blobs {
				if b.Name() == hubtest.SHA256(f.Files[tc.file]) || strings.HasSuffix(b.Name(), ".incomplete") {
					t.Errorf("%s left in the cache", b.Name())
				}
			}
		})
	}
}

// TestDownloadErrors: gated repos, missing repos, revisions and files, and
// no network each give an error that says so.
func TestDownloadErrors(t *testing.T) {
	closed := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		return "http://" + addr
	}()
	for _, tc := range []struct {
		name     string
		setup    func(f *hubtest.Repo, c *Client)
		repo     string
		revision string
		check    func(err error) bool
		says     []string
	}{
		{"gated without a token", func(f *hubtest.Repo, c *Client) { f.Gated = "hf_good" }, testRepo, "",
			func(err error) bool { var g *GatedError; return errors.As(err, &g) && g.Status == 401 && !g.HasToken },
			[]string{"gated", "/google/gemma-3n-E2B-it", "accept its licence", "HF_TOKEN"}},
		{"gated with a token without access", func(f *hubtest.Repo, c *Client) { f.Gated = "hf_good"; c.Token = "hf_other" }, testRepo, "",
			func(err error) bool { var g *GatedError; return errors.As(err, &g) && g.Status == 403 && g.HasToken },
			[]string{"gated", "no access", "/google/gemma-3n-E2B-it"}},
		{"missing repo", nil, "google/no-such-model", "",
			func(err error) bool { var n *NotFoundError; return errors.As(err, &n) && n.File == "" },
			[]string{"no model google/no-such-model"}},
		{"missing revision", nil, testRepo, "v9",
			func(err error) bool { var n *NotFoundError; return errors.As(err, &n) && n.Revision == "v9" },
			[]string{`no revision "v9"`}},
		{"missing file", func(f *hubtest.Repo, c *Client) { f.Missing["tokenizer.json"] = true }, testRepo, "",
			func(err error) bool { var n *NotFoundError; return errors.As(err, &n) && n.File == "tokenizer.json" },
			[]string{"has no file tokenizer.json"}},
		{"no network", func(f *hubtest.Repo, c *Client) { c.Endpoint = closed }, testRepo, "",
			func(err error) bool { var n *NetworkError; return errors.As(err, &n) },
			[]string{"cannot reach the Hub at " + closed}},
		{"not a repo id", nil, "../etc", "",
			func(err error) bool { return err != nil }, []string{"not a Hugging Face model id"}},
		{"not a revision", nil, testRepo, "../../x",
			func(err error) bool { return err != nil }, []string{"not a revision"}},
		{"not a checkpoint", func(f *hubtest.Repo, c *Client) { delete(f.Files, "config.json") }, testRepo, "",
			func(err error) bool { return err != nil }, []string{"no config.json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, c := newTestHub(t)
			if tc.setup != nil {
				tc.setup(f, c)
			}
			_, err := c.Download(context.Background(), tc.repo, Options{Revision: tc.revision, Attempts: 1})
			if err == nil || !tc.check(err) {
				t.Fatalf("error %T %v", err, err)
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%q does not say %q", err, s)
				}
			}
		})
	}
}

// TestHostileHub: answers that would write outside the snapshot, past the
// bounds or more than declared are refused.
func TestHostileHub(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(f *hubtest.Repo)
		says  string
	}{
		{"backslash traversal", func(f *hubtest.Repo) {
			f.TreeExtra = []map[string]any{{"type": "file", "path": `..\..\evil.safetensors`, "size": 1, "oid": hubtest.GitOID([]byte("x"))}}
		}, "not a plain name"},
		{"dot dot", func(f *hubtest.Repo) {
			f.TreeExtra = []map[string]any{{"type": "file", "path": "..", "size": 1, "oid": hubtest.GitOID([]byte("x"))}}
		}, ""}, // not needed: skipped
		{"huge file", func(f *hubtest.Repo) {
			f.TreeExtra = []map[string]any{{"type": "file", "path": "big.safetensors", "size": 1, "oid": hubtest.GitOID(nil),
				"lfs": map[string]any{"oid": hubtest.SHA256(nil), "size": int64(1) << 50}}}
		}, "outside 0.."},
		{"big file outside LFS", func(f *hubtest.Repo) {
			f.TreeExtra = []map[string]any{{"type": "file", "path": "tokenizer_config.json", "size": 1 << 30, "oid": hubtest.GitOID(nil)}}
		}, "over the limit"},
		{"bad hash", func(f *hubtest.Repo) {
			f.TreeExtra = []map[string]any{{"type": "file", "path": "x.safetensors", "size": 1, "oid": hubtest.GitOID(nil), "lfs": map[string]any{"oid": "../../x", "size": 1}}}
		}, "not a sha256"},
		{"bad commit", func(f *hubtest.Repo) { f.SHA = "../../../tmp" }, "not a 40-digit hash"},
		{"more bytes than listed", func(f *hubtest.Repo) { f.ExtraBytes["model.safetensors"] = 10 }, "where"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, c := newTestHub(t)
			tc.setup(f)
			_, err := c.Download(context.Background(), testRepo, Options{Attempts: 1})
			if tc.says == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrHostile) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("error %v, want it refused saying %q", err, tc.says)
			}
			filepath.WalkDir(filepath.Dir(c.CacheDir), func(p string, d os.DirEntry, err error) error {
				if d != nil && strings.Contains(d.Name(), "evil") {
					t.Errorf("%s written", p)
				}
				return nil
			})
		})
	}
}

// TestDownloadInclude: include patterns fetch the files they match (a GGUF
// file), without the checkpoint's; a pattern matching nothing, or not a
// pattern, is an error.
func TestDownloadInclude(t *testing.T) {
	f, c := newTestHub(t)
	res, err := c.Download(context.Background(), testRepo, Options{Include: []string{"*.gguf"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Info.Files) != 1 || res.Info.Files[0].Path != "model.gguf" || res.Fetched != int64(len(f.Files["model.gguf"])) {
		t.Errorf("fetched %v (%d bytes)", res.Info.Files, res.Fetched)
	}
	if b, err := os.ReadFile(filepath.Join(res.Path, "model.gguf")); err != nil || !bytes.Equal(b, f.Files["model.gguf"]) {
		t.Errorf("model.gguf: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(res.Path, "config.json")); err == nil {
		t.Error("config.json fetched too")
	}
	for _, tc := range []struct{ pattern, says string }{{"*.bin", "no top-level file"}, {"[", "syntax error"}} {
		if _, err := c.Download(context.Background(), testRepo, Options{Include: []string{tc.pattern}}); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%q: %v, want an error saying %q", tc.pattern, err, tc.says)
		}
	}
}

// TestDownloadSpace: a download larger than the free space is refused
// before anything is written; what is in the cache already does not count.
func TestDownloadSpace(t *testing.T) {
	f, c := newTestHub(t)
	total := int64(len(f.Files["config.json"]) + len(f.Files["tokenizer.json"]) + len(f.Files["model.safetensors"]))
	c.free = func(string) (int64, error) { return total - 1, nil }
	_, err := c.Download(context.Background(), testRepo, Options{})
	var se *SpaceError
	if !errors.As(err, &se) || se.Need != total || !strings.Contains(err.Error(), "HF_HUB_CACHE") {
		t.Fatalf("error %v, want a SpaceError for %d bytes", err, total)
	}
	c.free = nil
	if _, err := c.Download(context.Background(), testRepo, Options{}); err != nil {
		t.Fatal(err)
	}
	c.free = func(string) (int64, error) { return 0, nil }
	if _, err := c.Download(context.Background(), testRepo, Options{}); err != nil {
		t.Errorf("everything cached, no space: %v", err)
	}
}

// TestDownloadCancel: a cancelled context stops the download with its
// error and keeps the part for a resume.
func TestDownloadCancel(t *testing.T) {
	_, c := newTestHub(t)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := c.Download(ctx, testRepo, Options{Progress: func(p Progress) {
		if p.File == "model.safetensors" && p.FileDone > 0 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
}

// TestSpeed: the speed follows the last five seconds, not the average
// since the start.
func TestSpeed(t *testing.T) {
	t0 := time.Unix(1000, 0)
	d := &download{started: t0}
	var got float64
	for s := 1; s <= 20; s++ {
		if s <= 10 {
			d.fetchedRun += 1e6 // 1 MB/s
		} else {
			d.fetchedRun += 10e6 // then 10 MB/s
		}
		got = d.speed(t0.Add(time.Duration(s) * time.Second))
		if s == 3 && got != 1e6 {
			t.Errorf("after 3 s at 1 MB/s: %.0f B/s", got)
		}
	}
	if got != 10e6 {
		t.Errorf("after 10 s at 10 MB/s: %.0f B/s, want 10 MB/s", got)
	}
	if len(d.samples) > 7 {
		t.Errorf("%d samples kept", len(d.samples))
	}
}

// TestDownloadReusesOtherTools: files that another tool put in the cache
// (a blob named by its hash, or a plain copy in the snapshot where links
// could not be made) are checked and kept, not fetched again.
func TestDownloadReusesOtherTools(t *testing.T) {
	for _, tc := range []struct {
		name  string
		place func(c *Client, f *hubtest.Repo, name string) string
	}{
		{"blob", func(c *Client, f *hubtest.Repo, name string) string {
			return filepath.Join(RepoDir(c.CacheDir, testRepo), "blobs", f.Blob(name))
		}},
		{"copy in the snapshot", func(c *Client, f *hubtest.Repo, name string) string {
			return filepath.Join(RepoDir(c.CacheDir, testRepo), "snapshots", f.Commit, name)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, c := newTestHub(t)
			p := tc.place(c, f, "model.safetensors")
			os.MkdirAll(filepath.Dir(p), 0o755)
			os.WriteFile(p, f.Files["model.safetensors"], 0o644)
			res, err := c.Download(context.Background(), testRepo, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(f.Ranges["model.safetensors"]) != 0 || len(res.Reused) != 1 || res.Reused[0] != "model.safetensors" {
				t.Errorf("model.safetensors requested %d times, reused %v", len(f.Ranges["model.safetensors"]), res.Reused)
			}
			if b, err := os.ReadFile(filepath.Join(res.Path, "model.safetensors")); err != nil || !bytes.Equal(b, f.Files["model.safetensors"]) {
				t.Errorf("snapshot file: %d bytes, %v", len(b), err)
			}
		})
	}
}

// TestDownloadBadPart: a .incomplete part longer than the listed file is
// fetched again from an empty file, not renamed into the cache with its
// trailing bytes; a link or other non-regular file planted at the part's
// path is refused, and what it points to is neither written nor created.
func TestDownloadBadPart(t *testing.T) {
	const name = "model.safetensors"
	for _, tc := range []struct {
		name string
		// plant puts something at part; victim is a file outside the cache.
		plant func(t *testing.T, part, victim string, content []byte)
		ok    bool
		says  string
	}{
		{"content and trailing bytes", func(t *testing.T, part, _ string, content []byte) {
			os.WriteFile(part, append(append([]byte{}, content...), "trailing"...), 0o644)
		}, true, ""},
		{"garbage longer than the file", func(t *testing.T, part, _ string, content []byte) {
			os.WriteFile(part, bytes.Repeat([]byte{'x'}, len(content)+4096), 0o644)
		}, true, ""},
		{"link to a file", func(t *testing.T, part, victim string, _ []byte) {
			os.WriteFile(victim, []byte("precious"), 0o644)
			if err := os.Symlink(victim, part); err != nil {
				t.Skip(err)
			}
		}, false, "symbolic link"},
		{"dangling link", func(t *testing.T, part, victim string, _ []byte) {
			if err := os.Symlink(victim, part); err != nil {
				t.Skip(err)
			}
		}, false, "symbolic link"},
		{"folder", func(t *testing.T, part, _ string, _ []byte) { os.Mkdir(part, 0o755) }, false, "folder"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, c := newTestHub(t)
			content := f.Files[name]
			blobs := filepath.Join(RepoDir(c.CacheDir, testRepo), "blobs")
			os.MkdirAll(blobs, 0o755)
			part := filepath.Join(blobs, hubtest.SHA256(content)+".incomplete")
			victim := filepath.Join(t.TempDir(), "victim")
			tc.plant(t, part, victim, content)
			before, _ := os.ReadFile(victim)
			res, err := c.Download(context.Background(), testRepo, Options{Attempts: 2, Backoff: time.Millisecond})
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				checkSnapshot(t, f, c, res.Path)
				if _, err := os.Lstat(part); err == nil {
					t.Errorf("%s left behind", part)
				}
				return
			}
			var nr *safefile.NotRegularError
			if !errors.As(err, &nr) || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), part) {
				t.Fatalf("error %v, want the part refused as %s", err, tc.says)
			}
			after, aerr := os.ReadFile(victim)
			if !bytes.Equal(before, after) || (before == nil) != os.IsNotExist(aerr) {
				t.Errorf("the link's target changed: %q (%v), was %q", after, aerr, before)
			}
			if _, err := os.Stat(filepath.Join(blobs, hubtest.SHA256(content))); err == nil {
				t.Error("the blob entered the cache")
			}
		})
	}
}
