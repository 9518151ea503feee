package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"verdict/engine/hub"
	"verdict/engine/models"
	"verdict/engine/safefile"
)

// EventDownload carries a DownloadState: a download's progress, at most
// one per DownloadInterval, and its outcome.
const EventDownload = "hub:download"

// DownloadInterval is the time between two hub:download events.
const DownloadInterval = 250 * time.Millisecond

// GemmaRepos are the Gemma 3n and Gemma 4 checkpoints the Download dialog
// offers (models.KnownRepos).
var GemmaRepos = models.KnownRepos

// HubRepo is one repo the Download dialog lists.
type HubRepo struct {
	Repo  string `json:"repo"`
	Title string `json:"title"`
	// Family is the checkpoint's decoder family (models.FamilyGemma3n,
	// models.FamilyGemma4).
	Family string `json:"family"`
	// SizeBytes and Files are what a download fetches (0 when the Hub
	// could not be asked: Error says why).
	SizeBytes int64 `json:"size_bytes"`
	Files     int   `json:"files"`
	Gated     bool  `json:"gated"`
	// Path is the snapshot in the Hub cache when it is downloaded.
	Path  string `json:"path,omitempty"`
	Error string `json:"error,omitempty"`
	// Offline is the plain message for a Hub that cannot be reached (Error
	// keeps the details).
	Offline string `json:"offline,omitempty"`
}

// Download states.
const (
	DownloadIdle      = "idle"
	DownloadRunning   = "downloading"
	DownloadDone      = "done"
	DownloadError     = "error"
	DownloadCancelled = "cancelled"
)

// DownloadState is the download in progress or the last one.
type DownloadState struct {
	State     string `json:"state"`
	Repo      string `json:"repo,omitempty"`
	Stage     string `json:"stage,omitempty"`
	File      string `json:"file,omitempty"`
	FileIndex int    `json:"file_index,omitempty"`
	Files     int    `json:"files,omitempty"`
	// Done of Total bytes, files already in the cache counted as done.
	Done        int64   `json:"done,omitempty"`
	Total       int64   `json:"total,omitempty"`
	BytesPerSec float64 `json:"bytes_per_sec,omitempty"`
	// LeftMs is the time left at that speed (-1 unknown).
	LeftMs float64 `json:"left_ms,omitempty"`
	// Path is the snapshot folder once done; Spec what to open.
	Path  string `json:"path,omitempty"`
	Spec  string `json:"spec,omitempty"`
	Error string `json:"error,omitempty"`
	// Gated marks an error for want of access; LicenceURL is where to
	// accept the licence.
	Gated      bool   `json:"gated,omitempty"`
	LicenceURL string `json:"licence_url,omitempty"`
	// Offline is the plain message of a download that could not reach the
	// Hub (Error keeps the details).
	Offline string `json:"offline,omitempty"`
}

// TokenInfo says whether a Hugging Face token is at hand, and from where
// (never the token itself).
type TokenInfo struct {
	Present bool   `json:"present"`
	Source  string `json:"source,omitempty"` // "entered", "HF_TOKEN", "token file"
}

// maxRecent is how many opened folders the library remembers.
const maxRecent = 20

// Library is the model library service: the Gemma 3n repos on the Hub and
// their download into the Hub cache, and the Gemma 3n models already on
// this computer (the Hub cache, folders opened before, Ollama, LM Studio).
type Library struct {
	emit Emitter
	log  *logrus.Logger
	// recentPath keeps the folders opened before ("": memory only).
	recentPath string
	// client and places are hub.NewClient and models.DefaultPlaces unless
	// a test replaces them.
	client func() *hub.Client
	places func(recent []string) models.Places

	mu      sync.Mutex
	state   DownloadState
	cancel  context.CancelFunc
	token   string // entered in the app, kept for the session
	recent  []string
	repos   []HubRepo
	reposAt time.Time
	dirty   bool // the state changed since the last event
}

// NewLibrary returns the service; recentPath is the file that keeps the
// folders opened before ("" keeps them in memory).
func NewLibrary(e Emitter, log *logrus.Logger, recentPath string) *Library {
	l := &Library{emit: e, log: log, recentPath: recentPath, client: hub.NewClient, places: models.DefaultPlaces, state: DownloadState{State: DownloadIdle}}
	if recentPath != "" {
		if b, err := safefile.ReadFile(recentPath, 1<<20); err == nil {
			json.Unmarshal(b, &l.recent)
		}
	}
	return l
}

// recentPathFor is the file beside the settings that keeps opened folders.
func recentPathFor(settingsPath string) string {
	if settingsPath == "" {
		return ""
	}
	return filepath.Join(filepath.Dir(settingsPath), "recent-models.json")
}

// Local lists the Gemma 3n models found on this computer.
func (l *Library) Local() []models.Local {
	l.mu.Lock()
	recent := slices.Clone(l.recent)
	l.mu.Unlock()
	out := models.Discover(l.places(recent))
	if out == nil {
		out = []models.Local{}
	}
	return out
}

// reposFresh is how long the Hub's sizes are kept.
const reposFresh = 10 * time.Minute

// Repos lists the Gemma 3n repos with what a download of each fetches,
// asked of the Hub (at most every ten minutes); a repo the Hub cannot be
// asked about carries the error, and the listing still succeeds.
func (l *Library) Repos() []HubRepo {
	l.mu.Lock()
	if l.repos != nil && time.Since(l.reposAt) < reposFresh {
		out := l.withPaths(slices.Clone(l.repos))
		l.mu.Unlock()
		return out
	}
	c := l.clientLocked()
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	out := make([]HubRepo, len(GemmaRepos))
	var wg sync.WaitGroup
	for i, g := range GemmaRepos {
		out[i] = HubRepo{Repo: g.Repo, Title: g.Title, Family: g.Family}
		wg.Add(1)
		go func() {
			defer wg.Done()
			info, err := c.Info(ctx, g.Repo, "")
			if err != nil {
				out[i].Error, out[i].Offline = err.Error(), offlineMessage(err)
				return
			}
			out[i].SizeBytes, out[i].Files, out[i].Gated = info.Size, len(info.Files), info.Gated != ""
		}()
	}
	wg.Wait()
	failed := slices.ContainsFunc(out, func(r HubRepo) bool { return r.Error != "" })
	l.mu.Lock()
	defer l.mu.Unlock()
	if !failed {
		l.repos, l.reposAt = slices.Clone(out), time.Now()
	}
	return l.withPaths(out)
}

// offlineMessage is what the dialog says when err is a Hub that cannot be
// reached ("" for any other error): its host, and that local models work.
func offlineMessage(err error) string {
	var ne *hub.NetworkError
	if !errors.As(err, &ne) {
		return ""
	}
	host := ne.Endpoint
	if u, perr := url.Parse(ne.Endpoint); perr == nil && u.Host != "" {
		host = u.Host
	}
	return fmt.Sprintf("Can't reach %s — check the connection; models on this machine still work", host)
}

// withPaths fills in the snapshot of each repo already downloaded.
func (l *Library) withPaths(rs []HubRepo) []HubRepo {
	dir := l.clientLocked().CacheDir
	for i := range rs {
		rs[i].Path, _ = hub.Resolve(dir, rs[i].Repo)
	}
	return rs
}

// clientLocked is a Hub client with the token entered, if any.
func (l *Library) clientLocked() *hub.Client {
	c := l.client()
	if l.token != "" {
		c.Token = l.token
	}
	return c
}

// Token says whether a token is at hand.
func (l *Library) Token() TokenInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.token != "":
		return TokenInfo{true, "entered"}
	case strings.TrimSpace(os.Getenv("HF_TOKEN")) != "":
		return TokenInfo{true, "HF_TOKEN"}
	case hub.Token() != "":
		return TokenInfo{true, "token file"}
	}
	return TokenInfo{}
}

// SetToken keeps token for this session's downloads ("" forgets it); it is
// not written anywhere.
func (l *Library) SetToken(token string) TokenInfo {
	token = strings.TrimSpace(token)
	l.mu.Lock()
	l.token = token
	l.repos = nil
	l.mu.Unlock()
	return l.Token()
}

// State returns the download in progress or the last one.
func (l *Library) State() DownloadState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state
}

// ErrDownloading refuses a second download while one runs.
var ErrDownloading = errors.New("a download is already running: wait for it or cancel it")

// Download starts fetching repo (revision "" is main) into the Hub cache
// and returns at once; hub:download events report the progress and the
// outcome. One download runs at a time.
func (l *Library) Download(repo, revision string) (DownloadState, error) {
	repo = strings.TrimSpace(repo)
	if !hub.ValidRepo(repo) {
		return l.State(), fmt.Errorf("%q is not a Hugging Face model id (org/name, e.g. google/gemma-3n-E2B-it)", repo)
	}
	l.mu.Lock()
	if l.state.State == DownloadRunning {
		l.mu.Unlock()
		return l.State(), ErrDownloading
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	l.state = DownloadState{State: DownloadRunning, Repo: repo, LeftMs: -1}
	st := l.state
	c := l.clientLocked()
	l.mu.Unlock()
	l.emit.Emit(EventDownload, st)
	l.log.WithField("repo", repo).Info("download started")
	go l.run(ctx, cancel, c, repo, revision)
	return st, nil
}

func (l *Library) run(ctx context.Context, cancel context.CancelFunc, c *hub.Client, repo, revision string) {
	defer cancel()
	done := make(chan struct{})
	tickerDone := make(chan struct{})
	go l.tick(done, tickerDone)
	res, err := c.Download(ctx, repo, hub.Options{Revision: revision, Progress: func(p hub.Progress) { l.progress(ctx, p) }})
	close(done)
	<-tickerDone // no progress event may follow the outcome
	l.mu.Lock()
	st := DownloadState{State: DownloadDone, Repo: repo, Done: l.state.Done, Total: l.state.Total, Files: l.state.Files}
	var gated *hub.GatedError
	switch {
	case err == nil:
		st.Path, st.Spec, st.Done, st.Total = res.Path, repo, res.Info.Size, res.Info.Size
		if revision != "" && revision != "main" {
			st.Spec = repo + "@" + revision
		}
	case errors.Is(err, context.Canceled):
		st.State, st.Error = DownloadCancelled, "cancelled: download again to resume where it stopped"
	case errors.As(err, &gated):
		st.State, st.Error, st.Gated, st.LicenceURL = DownloadError, err.Error(), true, gated.URL
	default:
		st.State, st.Error, st.Offline = DownloadError, err.Error(), offlineMessage(err)
	}
	l.state = st
	l.mu.Unlock()
	if err != nil {
		l.log.WithError(err).WithField("repo", repo).Warn("download ended")
	} else {
		l.log.WithFields(logrus.Fields{"repo": repo, "path": res.Path, "fetched": res.Fetched}).Info("download done")
	}
	l.emit.Emit(EventDownload, st)
}

// progress records p for the next hub:download event.
func (l *Library) progress(ctx context.Context, p hub.Progress) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ctx.Err() != nil || l.state.State != DownloadRunning {
		return
	}
	s := &l.state
	s.Stage, s.File, s.FileIndex, s.Files, s.Done, s.Total, s.BytesPerSec = p.Stage, p.File, p.FileIndex, p.Files, p.Done, p.Total, p.BytesPerSec
	s.LeftMs = -1
	if p.Left >= 0 {
		s.LeftMs = ms(p.Left)
	}
	l.dirty = true
}

// tick emits the download's state every DownloadInterval while it changes,
// until done is closed.
func (l *Library) tick(done <-chan struct{}, ended chan<- struct{}) {
	defer close(ended)
	t := time.NewTicker(DownloadInterval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			l.mu.Lock()
			st, dirty := l.state, l.dirty
			l.dirty = false
			l.mu.Unlock()
			if dirty && st.State == DownloadRunning {
				l.emit.Emit(EventDownload, st)
			}
		}
	}
}

// Cancel stops the download in progress; its part stays for a resume.
func (l *Library) Cancel() DownloadState {
	l.mu.Lock()
	if l.cancel != nil {
		l.cancel()
	}
	l.mu.Unlock()
	return l.State()
}

// remember adds a folder opened as a model to the front of the recent list.
func (l *Library) remember(path string) {
	if path == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recent = slices.DeleteFunc(l.recent, func(p string) bool { return p == path })
	l.recent = append([]string{path}, l.recent...)
	if len(l.recent) > maxRecent {
		l.recent = l.recent[:maxRecent]
	}
	if l.recentPath == "" {
		return
	}
	b, _ := json.MarshalIndent(l.recent, "", "  ")
	if err := os.MkdirAll(filepath.Dir(l.recentPath), 0o755); err == nil {
		tmp := l.recentPath + ".tmp"
		if err = os.WriteFile(tmp, append(b, '\n'), 0o644); err == nil {
			err = os.Rename(tmp, l.recentPath)
		}
		if err != nil {
			l.log.WithError(err).Warn("library: cannot save the recent models")
		}
	}
}

// watch forwards events to e and remembers the folder of every model that
// becomes ready.
func (l *Library) watch(e Emitter) Emitter {
	return EmitterFunc(func(event string, data any) {
		if m, ok := data.(ModelInfo); ok && event == EventModel && m.State == ModelReady && !m.Builtin && m.Path != "" {
			l.remember(m.Path)
		}
		e.Emit(event, data)
	})
}

// shutdown cancels the download in progress.
func (l *Library) shutdown() { l.Cancel() }
