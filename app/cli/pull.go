package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"verdict/engine/hub"
	"verdict/engine/models"
)

func pullCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("pull", stderr)
	revision := fs.String("revision", "main", "branch, tag or commit to download")
	token := fs.String("token", "", "Hugging Face access token (default: $HF_TOKEN, else the token file of `hf auth login`)")
	var include stringList
	fs.Var(&include, "include", "fetch the top-level files matching this pattern instead of the checkpoint's (e.g. '*Q4_K_M.gguf'); repeat for more")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: verdict pull REPO [--revision R] [--token T] [--include PATTERN]\n\n"+
			"Downloads the files of a Hugging Face model that Verdict needs into the Hub cache (%s),\n"+
			"resuming an interrupted download, and prints the snapshot folder. Open it afterwards with --model REPO.\n\n", hub.CacheDir())
		fs.PrintDefaults()
	}
	// The repo may come before the flags: verdict pull google/gemma-4-E2B-it --revision main.
	var repo string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		repo, args = args[0], args[1:]
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	rest := fs.Args()
	if repo == "" && len(rest) > 0 {
		repo, rest = rest[0], rest[1:]
	}
	if repo == "" {
		return usageErr("name the repo to download, e.g. verdict pull google/gemma-3n-E2B-it")
	}
	if len(rest) != 0 {
		return usageErr("unexpected arguments %v", rest)
	}
	if !hub.ValidRepo(repo) {
		return usageErr("%q is not a Hugging Face model id (org/name, e.g. google/gemma-3n-E2B-it)", repo)
	}
	c := hub.NewClient()
	if *token != "" {
		c.Token = *token
	}
	pb := newPullBar(stderr)
	res, err := c.Download(ctx, repo, hub.Options{Revision: *revision, Progress: pb.show, Include: include})
	pb.clear()
	if err != nil {
		var ne *hub.NetworkError
		spec := repo
		if *revision != "main" {
			spec += "@" + *revision
		}
		switch {
		case errors.Is(err, context.Canceled):
			fmt.Fprintln(stderr, "verdict pull: run the same command again to resume where it stopped")
		case errors.As(err, &ne):
			if p, rerr := hub.Resolve(c.CacheDir, spec); rerr == nil {
				fmt.Fprintf(stderr, "verdict pull: %s is in the cache already (%s): --model %s works offline\n", spec, p, spec)
			}
		}
		return err
	}
	fmt.Fprintf(stderr, "%s at %s: %d files, %s fetched, %d already in the cache", repo, res.Info.Commit[:12], len(res.Info.Files), byteCount(res.Fetched), len(res.Reused))
	if len(res.Refetched) > 0 {
		fmt.Fprintf(stderr, ", %d found corrupt and fetched again (%s)", len(res.Refetched), strings.Join(res.Refetched, ", "))
	}
	if len(include) > 0 {
		var names []string
		for _, f := range res.Info.Files {
			names = append(names, f.Path)
		}
		fmt.Fprintf(stderr, "\nfiles: %s\n", strings.Join(names, ", "))
	} else if f, err := models.SnapshotFamily(res.Path); err != nil {
		fmt.Fprintf(stderr, "\nnote: Verdict cannot run it: %v\n", err)
	} else {
		fmt.Fprintf(stderr, "\n%s checkpoint: open it with --model %s\n", models.FamilyName(f), repo)
	}
	fmt.Fprintln(stdout, res.Path)
	return nil
}

// pullBar shows a download's progress on stderr: one line redrawn in place
// on a terminal, else a line per file and one every ten seconds.
type pullBar struct {
	w    io.Writer
	term bool
	now  func() time.Time

	mu     sync.Mutex
	drawn  time.Time
	file   string
	active bool
}

func newPullBar(w io.Writer) *pullBar { return &pullBar{w: w, term: isTerminal(w), now: time.Now} }

func (b *pullBar) show(p hub.Progress) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	newFile := p.File != b.file
	b.file = p.File
	if b.term {
		if !newFile && now.Sub(b.drawn) < 100*time.Millisecond && p.FileDone < p.FileSize {
			return
		}
		b.drawn, b.active = now, true
		fmt.Fprintf(b.w, "\r%s\x1b[K", pullLine(p))
		return
	}
	if newFile || now.Sub(b.drawn) >= 10*time.Second {
		b.drawn = now
		fmt.Fprintln(b.w, pullLine(p))
	}
}

func (b *pullBar) clear() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.term && b.active {
		fmt.Fprint(b.w, "\r\x1b[K")
		b.active = false
	}
}

// pullLine is one line of progress: "model-00001-of-00003.safetensors
// (1 of 4) [######..................] 25% 2.50 GB of 10.0 GB · 42.0 MB/s,
// about 3m0s left".
func pullLine(p hub.Progress) string {
	var s strings.Builder
	fmt.Fprintf(&s, "%s %s (%d of %d)", p.Stage, p.File, p.FileIndex, p.Files)
	if p.Total > 0 {
		f := min(1, max(0, float64(p.Done)/float64(p.Total)))
		n := int(f * barWidth)
		fmt.Fprintf(&s, " [%s%s] %3.0f%% %s of %s", strings.Repeat("#", n), strings.Repeat(".", barWidth-n), 100*f, byteCount(p.Done), byteCount(p.Total))
	}
	if p.BytesPerSec > 0 {
		fmt.Fprintf(&s, " · %s/s", byteCount(int64(p.BytesPerSec)))
	}
	if p.Left >= 0 && p.Done < p.Total {
		fmt.Fprintf(&s, ", about %s left", p.Left.Round(time.Second))
	}
	return s.String()
}

// byteCount writes n bytes in B, kB, MB or GB (powers of 1000).
func byteCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d B", n)
}
