package hub

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

// fakeHub is an httptest Hub serving one repo at one commit, with the
// revision, tree and resolve endpoints the client uses, and knobs that
// make it misbehave.
type fakeHub struct {
	repo, commit string
	files        map[string][]byte
	lfs          map[string]bool

	mu sync.Mutex
	// gated: the files need this token (401 without one, 403 with another).
	gated string
	// cut: the next request for a file ends the connection after n bytes.
	cut map[string]int64
	// corrupt: the next n answers for a file flip one byte.
	corrupt map[string]int
	// missing: listed in the tree, 404 when fetched.
	missing map[string]bool
	// treeExtra are entries added to the tree answer as they are.
	treeExtra []map[string]any
	// sha overrides the commit the revision endpoint names.
	sha string
	// extraBytes: the file is served with this many bytes more than listed.
	extraBytes map[string]int
	// ranges records the Range header of each file request ("" for none).
	ranges map[string][]string
}

func newFakeHub(repo string, files map[string]string, lfs ...string) *fakeHub {
	f := &fakeHub{repo: repo, commit: strings.Repeat("ab12", 10), files: map[string][]byte{}, lfs: map[string]bool{},
		cut: map[string]int64{}, corrupt: map[string]int{}, missing: map[string]bool{}, extraBytes: map[string]int{}, ranges: map[string][]string{}}
	for k, v := range files {
		f.files[k] = []byte(v)
	}
	for _, k := range lfs {
		f.lfs[k] = true
	}
	return f
}

func gitOID(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

func sha256hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func (f *fakeHub) start(t *testing.T) *httptest.Server {
	s := httptest.NewServer(f)
	t.Cleanup(s.Close)
	return s
}

func (f *fakeHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := r.URL.Path
	switch {
	case p == "/api/models/"+f.repo+"/revision/main" || p == "/api/models/"+f.repo+"/revision/"+f.commit:
		sha := f.commit
		if f.sha != "" {
			sha = f.sha
		}
		json.NewEncoder(w).Encode(map[string]any{"id": f.repo, "sha": sha, "gated": f.gated != ""})
	case strings.HasPrefix(p, "/api/models/"+f.repo+"/revision/"):
		w.Header().Set("X-Error-Code", "RevisionNotFound")
		http.Error(w, `{"error":"Invalid rev id"}`, http.StatusNotFound)
	case p == "/api/models/"+f.repo+"/tree/"+f.commit:
		var names []string
		for k := range f.files {
			names = append(names, k)
		}
		sort.Strings(names)
		var ents []map[string]any
		for _, k := range names {
			b := f.files[k]
			e := map[string]any{"type": "file", "path": k, "size": len(b), "oid": gitOID(b)}
			if f.lfs[k] {
				e["size"] = len(b)
				e["oid"] = gitOID([]byte("pointer " + k))
				e["lfs"] = map[string]any{"oid": sha256hex(b), "size": len(b), "pointerSize": 134}
			}
			ents = append(ents, e)
		}
		ents = append(ents, map[string]any{"type": "directory", "path": "onnx", "oid": gitOID(nil), "size": 0})
		ents = append(ents, f.treeExtra...)
		json.NewEncoder(w).Encode(ents)
	case strings.HasPrefix(p, "/"+f.repo+"/resolve/"+f.commit+"/"):
		name := strings.TrimPrefix(p, "/"+f.repo+"/resolve/"+f.commit+"/")
		f.serveFile(w, r, name)
	case strings.HasPrefix(p, "/api/models/"), strings.HasPrefix(p, "/"):
		w.Header().Set("X-Error-Code", "RepoNotFound")
		http.Error(w, `{"error":"Repository not found"}`, http.StatusNotFound)
	}
}

func (f *fakeHub) serveFile(w http.ResponseWriter, r *http.Request, name string) {
	if f.gated != "" {
		switch r.Header.Get("Authorization") {
		case "Bearer " + f.gated:
		case "":
			w.Header().Set("X-Error-Code", "GatedRepo")
			http.Error(w, "Access to model "+f.repo+" is restricted", http.StatusUnauthorized)
			return
		default:
			w.Header().Set("X-Error-Code", "GatedRepo")
			http.Error(w, "Access to model "+f.repo+" is restricted and you are not in the authorized list", http.StatusForbidden)
			return
		}
	}
	b, ok := f.files[name]
	if !ok || f.missing[name] {
		w.Header().Set("X-Error-Code", "EntryNotFound")
		http.Error(w, "Entry not found", http.StatusNotFound)
		return
	}
	f.ranges[name] = append(f.ranges[name], r.Header.Get("Range"))
	b = append([]byte(nil), b...)
	if f.corrupt[name] > 0 {
		f.corrupt[name]--
		b[len(b)/2] ^= 0x55
	}
	b = append(b, make([]byte, f.extraBytes[name])...)
	start := 0
	if rg := r.Header.Get("Range"); rg != "" {
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
	if n, ok := f.cut[name]; ok {
		delete(f.cut, name)
		w.Write(body[:n])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection is cut mid-file
	}
	w.Write(body)
}
