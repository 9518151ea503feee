// Package hubtest is a fake Hugging Face Hub for tests: the revision, tree
// and resolve endpoints engine/hub uses, serving repos held in memory, with
// knobs that make it misbehave (gated, cut connections, corrupt bytes,
// missing files, hostile listings).
package hubtest

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Repo is one model repo at one commit.
type Repo struct {
	Commit string
	Files  map[string][]byte
	LFS    map[string]bool
	// Gated: the files need this token (401 without one, 403 with another).
	Gated string
	// Cut: the next request for a file ends the connection after n bytes.
	Cut map[string]int64
	// Corrupt: the next n answers for a file flip one byte.
	Corrupt map[string]int
	// Missing: listed in the tree, 404 when fetched.
	Missing map[string]bool
	// TreeExtra are entries added to the tree answer as they are.
	TreeExtra []map[string]any
	// SHA overrides the commit the revision endpoint names.
	SHA string
	// ExtraBytes: the file is served with this many bytes more than listed.
	ExtraBytes map[string]int
	// Ranges records the Range header of each file request ("" for none).
	Ranges map[string][]string
	// Hold: a request for the file sends half of it, then waits until the
	// channel is closed or the client goes away.
	Hold map[string]chan struct{}
}

// NewRepo returns a repo of files at a fixed commit; those named in lfs
// are listed as LFS files.
func NewRepo(files map[string]string, lfs ...string) *Repo {
	r := &Repo{Commit: strings.Repeat("ab12", 10), Files: map[string][]byte{}, LFS: map[string]bool{},
		Cut: map[string]int64{}, Corrupt: map[string]int{}, Missing: map[string]bool{}, ExtraBytes: map[string]int{}, Ranges: map[string][]string{}, Hold: map[string]chan struct{}{}}
	for k, v := range files {
		r.Files[k] = []byte(v)
	}
	for _, k := range lfs {
		r.LFS[k] = true
	}
	return r
}

// Hub serves its repos; lock Mu to change one while it serves (a held
// file's wait is outside the lock).
type Hub struct {
	Mu    sync.Mutex
	Repos map[string]*Repo
}

// Start serves h on a local port until the test ends.
func (h *Hub) Start(t testing.TB) *httptest.Server {
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

// GitOID is the git blob hash of b.
func GitOID(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// SHA256 is the sha256 of b in hex.
func SHA256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Blob is the name of a file's blob in the Hub cache.
func (r *Repo) Blob(name string) string {
	if r.LFS[name] {
		return SHA256(r.Files[name])
	}
	return GitOID(r.Files[name])
}

func notFound(w http.ResponseWriter, code, msg string) {
	w.Header().Set("X-Error-Code", code)
	http.Error(w, `{"error":"`+msg+`"}`, http.StatusNotFound)
}

// ServeHTTP answers the API requests engine/hub sends.
func (h *Hub) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	h.Mu.Lock()
	locked := true
	defer func() {
		if locked {
			h.Mu.Unlock()
		}
	}()
	p := req.URL.Path
	api, isAPI := strings.CutPrefix(p, "/api/models/")
	if !isAPI {
		api = strings.TrimPrefix(p, "/")
	}
	parts := strings.SplitN(api, "/", 4) // org, name, verb, rest
	if len(parts) < 4 {
		notFound(w, "RepoNotFound", "Repository not found")
		return
	}
	r, ok := h.Repos[parts[0]+"/"+parts[1]]
	if !ok {
		notFound(w, "RepoNotFound", "Repository not found")
		return
	}
	verb, rest := parts[2], parts[3]
	switch {
	case isAPI && verb == "revision":
		if rest != "main" && rest != r.Commit {
			notFound(w, "RevisionNotFound", "Invalid rev id")
			return
		}
		sha := r.Commit
		if r.SHA != "" {
			sha = r.SHA
		}
		json.NewEncoder(w).Encode(map[string]any{"id": parts[0] + "/" + parts[1], "sha": sha, "gated": r.Gated != ""})
	case isAPI && verb == "tree" && rest == r.Commit:
		json.NewEncoder(w).Encode(r.tree())
	case !isAPI && verb == "resolve" && strings.HasPrefix(rest, r.Commit+"/"):
		name := strings.TrimPrefix(rest, r.Commit+"/")
		if hold, ok := r.Hold[name]; ok {
			b := r.Files[name]
			locked = false
			h.Mu.Unlock()
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			w.Write(b[:len(b)/2])
			w.(http.Flusher).Flush()
			select {
			case <-hold:
			case <-req.Context().Done():
			}
			w.Write(b[len(b)/2:])
			return
		}
		r.serveFile(w, req, parts[0]+"/"+parts[1], name)
	default:
		notFound(w, "EntryNotFound", "Entry not found")
	}
}

func (r *Repo) tree() []map[string]any {
	var names []string
	for k := range r.Files {
		names = append(names, k)
	}
	sort.Strings(names)
	var ents []map[string]any
	for _, k := range names {
		b := r.Files[k]
		e := map[string]any{"type": "file", "path": k, "size": len(b), "oid": GitOID(b)}
		if r.LFS[k] {
			e["oid"] = GitOID([]byte("pointer " + k))
			e["lfs"] = map[string]any{"oid": SHA256(b), "size": len(b), "pointerSize": 134}
		}
		ents = append(ents, e)
	}
	ents = append(ents, map[string]any{"type": "directory", "path": "onnx", "oid": GitOID(nil), "size": 0})
	return append(ents, r.TreeExtra...)
}

func (r *Repo) serveFile(w http.ResponseWriter, req *http.Request, repo, name string) {
	if r.Gated != "" {
		switch req.Header.Get("Authorization") {
		case "Bearer " + r.Gated:
		case "":
			w.Header().Set("X-Error-Code", "GatedRepo")
			http.Error(w, "Access to model "+repo+" is restricted", http.StatusUnauthorized)
			return
		default:
			w.Header().Set("X-Error-Code", "GatedRepo")
			http.Error(w, "Access to model "+repo+" is restricted and you are not in the authorized list", http.StatusForbidden)
			return
		}
	}
	b, ok := r.Files[name]
	if !ok || r.Missing[name] {
		notFound(w, "EntryNotFound", "Entry not found")
		return
	}
	r.Ranges[name] = append(r.Ranges[name], req.Header.Get("Range"))
	b = append([]byte(nil), b...)
	if r.Corrupt[name] > 0 {
		r.Corrupt[name]--
		b[len(b)/2] ^= 0x55
	}
	b = append(b, make([]byte, r.ExtraBytes[name])...)
	start := 0
	if rg := req.Header.Get("Range"); rg != "" {
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(rg, "bytes="), "-"))
		if err != nil || n >= len(b) {
			http.Error(w, "bad range", http.StatusRequestedRangeNotSatisfiable)
			return
		}
		start = n
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", n, len(b)-1, len(b)))
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(b)-start))
	if start > 0 {
		w.WriteHeader(http.StatusPartialContent)
	}
	body := b[start:]
	if n, ok := r.Cut[name]; ok {
		delete(r.Cut, name)
		w.Write(body[:n])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection is cut mid-file
	}
	w.Write(body)
}
