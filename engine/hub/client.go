package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client talks to one Hub and writes into one cache.
type Client struct {
	// Endpoint is the Hub's address ("": Endpoint()).
	Endpoint string
	// Token authenticates the requests ("": none).
	Token string
	// CacheDir is the Hub cache written into ("": CacheDir()).
	CacheDir string
	// HTTP sends the requests (nil: one with connection timeouts).
	HTTP *http.Client
	// StallTimeout fails a download that receives nothing for this long
	// (0: DefaultStallTimeout).
	StallTimeout time.Duration

	free func(dir string) (int64, error) // diskFree unless a test replaces it
}

// DefaultStallTimeout is how long a download may go without a byte.
const DefaultStallTimeout = 60 * time.Second

// NewClient returns a client of Endpoint(), with Token() and CacheDir().
func NewClient() *Client {
	return &Client{Endpoint: Endpoint(), Token: Token(), CacheDir: CacheDir()}
}

var defaultHTTP = &http.Client{Transport: &http.Transport{
	Proxy:                 http.ProxyFromEnvironment,
	DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	TLSHandshakeTimeout:   30 * time.Second,
	ResponseHeaderTimeout: 60 * time.Second,
	IdleConnTimeout:       90 * time.Second,
	ForceAttemptHTTP2:     true,
}}

func (c *Client) endpoint() string {
	if c.Endpoint == "" {
		return Endpoint()
	}
	return strings.TrimRight(c.Endpoint, "/")
}

func (c *Client) cacheDir() string {
	if c.CacheDir == "" {
		return CacheDir()
	}
	return c.CacheDir
}

func (c *Client) http() *http.Client {
	if c.HTTP == nil {
		return defaultHTTP
	}
	return c.HTTP
}

// File is one file of a repo at a commit, as the Hub lists it.
type File struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	// LFS files are checked against SHA256; others against their git blob
	// hash, OID.
	LFS    bool   `json:"lfs"`
	OID    string `json:"oid"`
	SHA256 string `json:"sha256,omitempty"`
}

// blob is the file's name in the cache's blobs folder, as huggingface_hub
// names it: the sha256 of an LFS file, the git blob hash of another.
func (f File) blob() string {
	if f.LFS {
		return f.SHA256
	}
	return f.OID
}

// Info is a repo at a revision: its commit and the files the engine needs.
type Info struct {
	Repo     string `json:"repo"`
	Revision string `json:"revision"`
	Commit   string `json:"commit"`
	// Gated is the Hub's gating mode ("", "auto", "manual").
	Gated string `json:"gated,omitempty"`
	Files []File `json:"files"`
	// Size is the bytes of Files together.
	Size int64 `json:"size"`
}

// Bounds on what the Hub may send.
const (
	maxAPIBody   = 16 << 20 // one JSON answer
	maxTreePages = 64
	maxFiles     = 10000 // files listed in a repo
	// MaxFileBytes bounds one file: the largest safetensors shard a Gemma
	// 3n checkpoint could have, with room to spare.
	MaxFileBytes = 64 << 30
	// MaxSmallFile bounds a file that is not in LFS (configs, small tokenizers).
	MaxSmallFile = 64 << 20
	// MaxRepoBytes bounds the files of one download together.
	MaxRepoBytes = 256 << 30
)

// Info asks the Hub for repo at revision ("": main): its commit, gating and
// the files Needed lists, checked for names and sizes.
func (c *Client) Info(ctx context.Context, repo, revision string) (*Info, error) {
	return c.InfoOf(ctx, repo, revision, Needed)
}

// InfoOf is Info listing the top-level files keep accepts.
func (c *Client) InfoOf(ctx context.Context, repo, revision string, keep func(path string) bool) (*Info, error) {
	if err := checkRepo(repo); err != nil {
		return nil, err
	}
	if revision == "" {
		revision = "main"
	}
	if err := checkRevision(revision); err != nil {
		return nil, err
	}
	var meta struct {
		SHA   string `json:"sha"`
		Gated any    `json:"gated"`
	}
	u := c.endpoint() + "/api/models/" + repo + "/revision/" + url.PathEscape(revision)
	if _, err := c.getJSON(ctx, u, repo, revision, &meta); err != nil {
		return nil, err
	}
	if !commitRe.MatchString(meta.SHA) {
		return nil, hostile("%s at %s: commit %q is not a 40-digit hash", repo, revision, meta.SHA)
	}
	info := &Info{Repo: repo, Revision: revision, Commit: meta.SHA}
	switch g := meta.Gated.(type) {
	case string:
		info.Gated = g
	case bool:
		if g {
			info.Gated = "true"
		}
	}
	type entry struct {
		Type string `json:"type"`
		Path string `json:"path"`
		Size int64  `json:"size"`
		OID  string `json:"oid"`
		LFS  *struct {
			OID  string `json:"oid"`
			Size int64  `json:"size"`
		} `json:"lfs"`
	}
	next := c.endpoint() + "/api/models/" + repo + "/tree/" + meta.SHA
	seen := 0
	for page := 0; next != ""; page++ {
		if page == maxTreePages {
			return nil, hostile("%s: the file list runs over %d pages", repo, maxTreePages)
		}
		var ents []entry
		h, err := c.getJSON(ctx, next, repo, revision, &ents)
		if err != nil {
			return nil, err
		}
		if next, err = c.nextPage(h); err != nil {
			return nil, err
		}
		for _, e := range ents {
			if seen++; seen > maxFiles {
				return nil, hostile("%s lists over %d files", repo, maxFiles)
			}
			if e.Type != "file" || strings.Contains(e.Path, "/") || !keep(e.Path) {
				continue
			}
			if err := checkName(e.Path); err != nil {
				return nil, err
			}
			f := File{Path: e.Path, Size: e.Size, OID: e.OID}
			if e.LFS != nil {
				f.LFS, f.SHA256, f.Size = true, e.LFS.OID, e.LFS.Size
				if !sha256Re.MatchString(f.SHA256) {
					return nil, hostile("%s: LFS hash %q is not a sha256", f.Path, f.SHA256)
				}
			} else if !sha1Re.MatchString(f.OID) {
				return nil, hostile("%s: git hash %q is not a sha1", f.Path, f.OID)
			}
			switch {
			case f.Size < 0 || f.Size > MaxFileBytes:
				return nil, hostile("%s: size %d is outside 0..%d", f.Path, f.Size, int64(MaxFileBytes))
			case !f.LFS && f.Size > MaxSmallFile:
				return nil, hostile("%s: %d bytes outside LFS, over the limit of %d", f.Path, f.Size, MaxSmallFile)
			}
			info.Files = append(info.Files, f)
			info.Size += f.Size
			if info.Size > MaxRepoBytes {
				return nil, hostile("%s: over %d GiB of files", repo, MaxRepoBytes>>30)
			}
		}
	}
	return info, nil
}

// nextPage is the rel="next" link of a paginated answer, on the same Hub.
func (c *Client) nextPage(h http.Header) (string, error) {
	for _, l := range h.Values("Link") {
		for _, part := range strings.Split(l, ",") {
			target, params, ok := strings.Cut(strings.TrimSpace(part), ";")
			if !ok || !strings.Contains(params, `rel="next"`) {
				continue
			}
			target = strings.Trim(strings.TrimSpace(target), "<>")
			nu, err1 := url.Parse(target)
			base, err2 := url.Parse(c.endpoint())
			if err1 != nil || err2 != nil || nu.Scheme != base.Scheme || nu.Host != base.Host {
				return "", hostile("next page %q is not on %s", target, c.endpoint())
			}
			return target, nil
		}
	}
	return "", nil
}

// getJSON decodes the answer to GET u into v (at most maxAPIBody bytes).
func (c *Client) getJSON(ctx context.Context, u, repo, revision string, v any) (http.Header, error) {
	resp, err := c.do(ctx, u, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, c.statusErr(resp, repo, revision, "")
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAPIBody+1))
	if err != nil {
		return nil, &NetworkError{c.endpoint(), err}
	}
	if len(b) > maxAPIBody {
		return nil, hostile("%s: answer over %d bytes", u, maxAPIBody)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return nil, fmt.Errorf("%s: the Hub's answer is not the JSON expected: %w", u, err)
	}
	return resp.Header, nil
}

// do sends GET u with the token and the extra headers.
func (c *Client) do(ctx context.Context, u string, header http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	req.Header.Set("User-Agent", "verdict")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.http().Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &NetworkError{c.endpoint(), err}
	}
	return resp, nil
}

// statusErr turns an answer other than 200/206 into a clear error, from its
// status and the Hub's X-Error-Code header.
func (c *Client) statusErr(resp *http.Response, repo, revision, file string) error {
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	gated := func() error {
		return &GatedError{Repo: repo, URL: LicenceURL(c.endpoint(), repo), Status: resp.StatusCode, HasToken: c.Token != ""}
	}
	switch resp.Header.Get("X-Error-Code") {
	case "GatedRepo":
		return gated()
	case "RepoNotFound":
		return &NotFoundError{Repo: repo}
	case "RevisionNotFound":
		return &NotFoundError{Repo: repo, Revision: revision}
	case "EntryNotFound":
		return &NotFoundError{Repo: repo, Revision: revision, File: file}
	}
	switch s := resp.StatusCode; {
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		return gated()
	case s == http.StatusNotFound:
		return &NotFoundError{Repo: repo, File: file, Revision: revision}
	case s == http.StatusTooManyRequests:
		return fmt.Errorf("the Hub limits the requests for now (HTTP 429): try again in a few minutes")
	}
	return fmt.Errorf("the Hub answered HTTP %d for %s: %s", resp.StatusCode, resp.Request.URL.Redacted(), strings.TrimSpace(oneLine(msg)))
}

func oneLine(b []byte) string {
	s := strings.Map(func(r rune) rune {
		if r < 0x20 {
			return ' '
		}
		return r
	}, string(b))
	return s
}

// errTransient marks a failure worth another attempt: a connection cut
// mid-file, a stall, a 5xx answer.
var errTransient = errors.New("transient")

type transientErr struct{ err error }

func (e transientErr) Error() string { return e.err.Error() }
func (e transientErr) Unwrap() []error {
	return []error{e.err, errTransient}
}
