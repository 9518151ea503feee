// Package server is Verdict's browser mode: it serves the same UI as the
// window over HTTP on localhost, with the bound services as a JSON API and
// their events as server-sent events.
//
//	POST /api/{Service}/{Method}   body: JSON array of arguments
//	                               200: the result as JSON; 4xx/5xx: {"error": "..."}
//	GET  /api/events               text/event-stream; each message's data is
//	                               {"name": EVENT, "data": PAYLOAD}
//	GET  /api/bindings             {Service: [Method, ...]}
//	POST /api/upload               multipart/form-data, one or more "file" parts:
//	                               image, audio and video files for the input
//	                               200: {"results": [{"name", "item"|"error", "limit"?}]}
//	GET  /media/...                previews of the input's media (app.Media.Files)
//	/v1/...                        the programmatic API (app/api, HandleAPI)
//	/mcp                           the MCP server, streamable HTTP (app/mcpserver, HandleMCP)
//	GET  /...                      the built frontend
//
// The API mirrors Wails' bindings (window.go.app.Service.Method(args...)),
// so the frontend uses one set of calls in both modes.
//
// Access: every request must name an allowed host in its Host header (a DNS
// rebinding attack names the attacker's), a request with an Origin must come
// from this server's own origin, and every request the router sends to
// /api/, /media/, /v1/ or /mcp must carry the per-launch token (the X-Verdict-Token
// header, an Authorization: Bearer header, or, where a header cannot be set,
// a token query parameter: the event stream and <img> URLs only). The check
// runs before any of the body is read; a refused request's connection is
// closed. Under /v1/ and /mcp these refusals are the API's JSON errors. HTTPServer
// adds the connections' timeouts and their cap.
// The token reaches the page in the fragment of the URL that `verdict serve`
// prints (#token=...), which browsers never send to a server, so only who can
// read that output, or the page opened from it, can drive the app.
package server

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"path"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"verdict/app"
	"verdict/app/api"
)

// MaxBody bounds a request body.
const MaxBody = 4 << 20

// TokenHeader is the request header that carries the access token.
const TokenHeader = "X-Verdict-Token"

// TokenParam is the query parameter that carries the access token where a
// header cannot be sent (EventSource, <img src>).
const TokenParam = "token"

// NewToken returns a fresh random access token (32 hex digits, 128 bits).
func NewToken() string {
	b := make([]byte, 16)
	rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// LoopbackHosts are the host names always accepted in the Host header.
var LoopbackHosts = []string{"127.0.0.1", "::1", "localhost"}

// Access says who may use the server.
type Access struct {
	// Token must come with every /api/ and /media/ request; it must not be
	// empty.
	Token string
	// Hosts are the host names accepted in the Host header besides
	// LoopbackHosts (e.g. the address `verdict serve --addr` names).
	Hosts []string
}

// Server is the HTTP handler of the browser mode.
type Server struct {
	token   string
	hosts   map[string]bool
	methods map[string]map[string]reflect.Value
	uploads app.Uploader
	api     http.Handler // /v1/ (HandleAPI)
	mcp     http.Handler // /mcp (HandleMCP)
	hub     *Hub
	assets  fs.FS
	built   bool
	log     *logrus.Logger
	mux     *http.ServeMux
}

// New serves services (each named by its type) with the frontend in assets
// (a placeholder page when assets has no index.html) to the clients access
// allows; hub carries events. It panics when access has no token.
func New(services []any, hub *Hub, assets fs.FS, log *logrus.Logger, access Access) *Server {
	if access.Token == "" {
		panic("server: no access token")
	}
	s := &Server{token: access.Token, hosts: map[string]bool{}, methods: map[string]map[string]reflect.Value{}, hub: hub, assets: assets, log: log}
	for _, h := range append(append([]string{}, LoopbackHosts...), access.Hosts...) {
		s.hosts[normalHost(h)] = true
	}
	for _, svc := range services {
		v := reflect.ValueOf(svc)
		t := v.Type()
		name := t.Elem().Name()
		ms := map[string]reflect.Value{}
		for i := 0; i < t.NumMethod(); i++ {
			ms[t.Method(i).Name] = v.Method(i)
		}
		s.methods[name] = ms
	}
	if assets != nil {
		if _, err := fs.Stat(assets, "index.html"); err == nil {
			s.built = true
		}
	}
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("POST /api/{service}/{method}", s.call)
	s.mux.HandleFunc("GET /api/events", s.events)
	s.mux.HandleFunc("GET /api/bindings", s.bindings)
	s.mux.HandleFunc("POST /api/upload", s.upload)
	s.mux.HandleFunc("GET /", s.static)
	return s
}

// Routes whose token may come in the query: an EventSource and an <img>
// cannot send headers.
const (
	routeEvents = "GET /api/events"
	routeMedia  = "GET /media/"
)

// HandleMedia serves uploads (POST /api/upload) into up and the media
// previews (GET /media/) from files.
func (s *Server) HandleMedia(up app.Uploader, files http.Handler) {
	s.uploads = up
	s.mux.Handle("GET /media/", sameSiteOnly(files))
}

// HandleAPI serves the programmatic API (app/api) under /v1/, behind the
// same host, origin and token checks as the rest.
func (s *Server) HandleAPI(h http.Handler) { s.api = h }

// sameSiteOnly refuses media requests that browsers mark as coming from
// another site's page (an <img> elsewhere could show the live camera).
func sameSiteOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("Sec-Fetch-Site") {
		case "cross-site", "same-site":
			http.Error(w, "cross-origin requests are refused", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// MaxUpload bounds the body of one upload request: its files together.
const MaxUpload = app.MaxUploadBytes

// UploadResponse is the body of a successful upload.
type UploadResponse struct {
	Results []app.MediaResult `json:"results"`
}

// upload adds the "file" parts of a multipart/form-data body to the input's
// media. A file that cannot be added (not media, corrupt, over a limit) gets
// its error in its result; the request fails only when it is malformed or
// over MaxUpload.
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	if s.uploads == nil {
		writeJSON(w, http.StatusNotFound, APIError{"uploads are not served here"})
		return
	}
	if r.ContentLength > MaxUpload {
		writeJSON(w, http.StatusRequestEntityTooLarge, APIError{tooLarge(r.ContentLength)})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxUpload)
	mr, err := r.MultipartReader()
	if err != nil {
		writeJSON(w, http.StatusUnsupportedMediaType, APIError{"send the files as multipart/form-data, each in a part named \"file\": " + err.Error()})
		return
	}
	res := UploadResponse{Results: []app.MediaResult{}}
	defer func() {
		if len(res.Results) > 0 {
			s.uploads.Done()
		}
	}()
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				writeJSON(w, http.StatusRequestEntityTooLarge, APIError{tooLarge(-1)})
				return
			}
			writeJSON(w, http.StatusBadRequest, APIError{"malformed upload: " + err.Error()})
			return
		}
		if part.FormName() != "file" || part.FileName() == "" {
			part.Close()
			continue
		}
		name := part.FileName()
		cr := &countingReader{r: part}
		result := s.uploads.Add(name, cr)
		part.Close()
		var mbe *http.MaxBytesError
		if errors.As(cr.err, &mbe) {
			writeJSON(w, http.StatusRequestEntityTooLarge, APIError{tooLarge(-1)})
			return
		}
		s.log.WithFields(logrus.Fields{"file": name, "bytes": cr.n, "error": result.Error}).Debug("upload")
		res.Results = append(res.Results, result)
	}
	if len(res.Results) == 0 {
		writeJSON(w, http.StatusBadRequest, APIError{"no file in the upload: send each file in a part named \"file\""})
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func tooLarge(n int64) string {
	if n > 0 {
		return fmt.Sprintf("the upload is %.1f MB, over the limit of %d MB: send fewer or smaller files", float64(n)/1e6, MaxUpload>>20)
	}
	return fmt.Sprintf("the upload is over the limit of %d MB: send fewer or smaller files", MaxUpload>>20)
}

// countingReader counts bytes and keeps the first read error.
type countingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil && err != io.EOF && c.err == nil {
		c.err = err
	}
	return n, err
}

// ServeHTTP checks the host, the origin and the token, and routes the
// request. The checks look at the path as the router sees it (escaped,
// cleaned, then unescaped a segment at a time) as well as at the cleaned
// path, so /api/%2e%2e/x is as guarded as /api/x.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	top := routedTop(r.URL)
	isMCP := underMCP(r.URL.Path) || top == "mcp"
	v1 := underV1(r.URL.Path) || top == "v1" || isMCP // /mcp is refused as the API is
	if h := requestHost(r.Host); !s.hosts[h] {
		w.Header().Set("Connection", "close")
		s.log.WithField("host", r.Host).Warn("request for another host refused")
		msg := fmt.Sprintf("host %q is not served here: open the address that verdict serve printed", r.Host)
		if v1 {
			api.WriteErrorFor(w, r.URL.Path, http.StatusMisdirectedRequest, api.CodeMisdirected, msg)
			return
		}
		http.Error(w, msg, http.StatusMisdirectedRequest)
		return
	}
	if !sameOrigin(r) {
		w.Header().Set("Connection", "close")
		if v1 {
			api.WriteErrorFor(w, r.URL.Path, http.StatusForbidden, api.CodeForbidden, "cross-origin requests are refused: the API is for programs, not other sites' pages")
			return
		}
		http.Error(w, "cross-origin requests are refused", http.StatusForbidden)
		return
	}
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if !guarded(r.URL.Path) && top != "api" && top != "media" && !v1 {
		s.mux.ServeHTTP(w, r) // the page and its assets
		return
	}
	_, route := s.mux.Handler(r)
	if !s.authorized(r, !v1 && (route == routeEvents || route == routeMedia)) {
		// Refused before any of the body is read, and the connection with it:
		// the body is never read.
		w.Header().Set("Connection", "close")
		msg := "missing or wrong access token: open the address that verdict serve printed (it ends in #token=...)"
		if v1 {
			api.WriteErrorFor(w, r.URL.Path, http.StatusUnauthorized, api.CodeUnauthorized, "missing or wrong access token: send the token that verdict serve printed (after #token=) as Authorization: Bearer TOKEN or X-Verdict-Token")
			return
		}
		writeJSON(w, http.StatusUnauthorized, APIError{msg})
		return
	}
	defer serving(r)()
	if isMCP {
		s.serveMCP(w, r)
		return
	}
	if v1 {
		if s.api == nil {
			api.WriteErrorFor(w, r.URL.Path, http.StatusNotFound, api.CodeNotFound, "the API is not served here")
			return
		}
		s.api.ServeHTTP(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// routedTop is the first segment of u's path as http.ServeMux routes it:
// the escaped path cleaned, then unescaped ("/api/%2e%2e/x" is under api).
func routedTop(u *url.URL) string {
	p := path.Clean("/" + u.EscapedPath())
	seg, _, _ := strings.Cut(p[1:], "/")
	if s, err := url.PathUnescape(seg); err == nil {
		return s
	}
	return seg
}

// underV1 reports whether path is the programmatic API's.
func underV1(p string) bool {
	p = path.Clean("/" + p)
	return p == "/v1" || strings.HasPrefix(p, "/v1/")
}

// guarded reports whether the cleaned path is the API's or the media's: the
// page and its assets hold nothing private.
func guarded(p string) bool {
	p = path.Clean("/" + p)
	return p == "/api" || strings.HasPrefix(p, "/api/") || p == "/media" || strings.HasPrefix(p, "/media/") || underV1(p) || underMCP(p)
}

// authorized reports whether r carries the token in a header (ours or
// Authorization: Bearer) or, where query is true, in its query.
func (s *Server) authorized(r *http.Request, query bool) bool {
	t := r.Header.Get(TokenHeader)
	if t == "" {
		t = bearer(r.Header.Get("Authorization"))
	}
	if t == "" && query {
		t = r.URL.Query().Get(TokenParam)
	}
	return t != "" && subtle.ConstantTimeCompare([]byte(t), []byte(s.token)) == 1
}

// bearer is the credentials of an Authorization header of the Bearer scheme,
// whose name is case-insensitive (RFC 7235), else "".
func bearer(h string) string {
	scheme, cred, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(cred)
}

// requestHost is the host name of a Host header, without port and brackets,
// lower case.
func requestHost(hostport string) string {
	h, _, err := net.SplitHostPort(hostport)
	if err != nil {
		h = hostport // no port
	}
	return normalHost(h)
}

func normalHost(h string) string {
	return strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"))
}

// sameOrigin refuses requests another site's page makes to this server (the
// API can open folders and read files on this machine).
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

// APIError is the body of a failed call.
type APIError struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

var errType = reflect.TypeFor[error]()

func (s *Server) call(w http.ResponseWriter, r *http.Request) {
	svc, name := r.PathValue("service"), r.PathValue("method")
	m, ok := s.methods[svc][name]
	if !ok {
		writeJSON(w, http.StatusNotFound, APIError{fmt.Sprintf("no method %s.%s", svc, name)})
		return
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		writeJSON(w, http.StatusUnsupportedMediaType, APIError{"send the arguments as application/json"})
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, APIError{err.Error()})
		return
	}
	if len(body) > MaxBody {
		writeJSON(w, http.StatusRequestEntityTooLarge, APIError{fmt.Sprintf("request body exceeds %d bytes", MaxBody)})
		return
	}
	var raw []json.RawMessage
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := json.Unmarshal(body, &raw); err != nil {
			writeJSON(w, http.StatusBadRequest, APIError{"the body must be a JSON array of arguments: " + err.Error()})
			return
		}
	}
	mt := m.Type()
	if len(raw) != mt.NumIn() {
		writeJSON(w, http.StatusBadRequest, APIError{fmt.Sprintf("%s.%s takes %d arguments, got %d", svc, name, mt.NumIn(), len(raw))})
		return
	}
	args := make([]reflect.Value, len(raw))
	for i, a := range raw {
		p := reflect.New(mt.In(i))
		if err := json.Unmarshal(a, p.Interface()); err != nil {
			writeJSON(w, http.StatusBadRequest, APIError{fmt.Sprintf("argument %d of %s.%s: %v", i+1, svc, name, err)})
			return
		}
		args[i] = p.Elem()
	}
	start := time.Now()
	out := m.Call(args)
	s.log.WithFields(logrus.Fields{"call": svc + "." + name, "ms": time.Since(start).Milliseconds()}).Trace("api call")
	var result any
	for _, o := range out {
		if o.Type() == errType {
			if !o.IsNil() {
				writeJSON(w, http.StatusUnprocessableEntity, APIError{o.Interface().(error).Error()})
				return
			}
			continue
		}
		result = o.Interface()
	}
	writeJSON(w, http.StatusOK, result)
}

func (s *Server) bindings(w http.ResponseWriter, r *http.Request) {
	out := map[string][]string{}
	for svc, ms := range s.methods {
		for m := range ms {
			out[svc] = append(out[svc], m)
		}
		sort.Strings(out[svc])
	}
	writeJSON(w, http.StatusOK, out)
}

// KeepAlive is the time between two comment lines on an idle event stream.
const KeepAlive = 15 * time.Second

func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	ch, cancel := s.hub.Subscribe()
	defer cancel()
	io.WriteString(w, "retry: 1000\n: connected\n\n")
	fl.Flush()
	t := time.NewTicker(KeepAlive)
	defer t.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case msg, ok := <-ch:
			if !ok {
				return
			}
			if _, err := fmt.Fprintf(w, "data: %s\n\n", msg); err != nil {
				return
			}
			fl.Flush()
		case <-t.C:
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil {
				return
			}
			fl.Flush()
		}
	}
}

// placeholder is served when the frontend has not been built.
const placeholder = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Verdict</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:40em;margin:4em auto;color:#222}code{background:#eee;padding:.1em .3em}</style>
</head><body><h1>Verdict</h1><p>The user interface has not been built into this binary.</p>
<p>Build the frontend and the binary again: <code>bash build/run.sh serve</code>
(or <code>cd frontend &amp;&amp; npm ci &amp;&amp; npm run build</code>, then <code>go build .</code>).</p>
<p>The JSON API is available under <code>/api/</code>.</p></body></html>`

func (s *Server) static(w http.ResponseWriter, r *http.Request) {
	if !s.built {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, placeholder)
		return
	}
	p := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
	if p == "" {
		p = "index.html"
	}
	if st, err := fs.Stat(s.assets, p); err != nil || st.IsDir() {
		if strings.HasPrefix(p, "assets/") || path.Ext(p) != "" {
			http.NotFound(w, r)
			return
		}
		p = "index.html" // a page path: the app itself
	}
	if p == "index.html" {
		w.Header().Set("Cache-Control", "no-store")
	}
	http.ServeFileFS(w, r, s.assets, p)
}

// Hub fans events out to the connected event streams. It is an app.Emitter.
type Hub struct {
	mu   sync.Mutex
	subs map[chan []byte]struct{}
	log  *logrus.Logger
}

// HubBuffer is how many events a slow stream may fall behind before events
// are dropped for it.
const HubBuffer = 1024

// NewHub returns a hub with no subscribers.
func NewHub(log *logrus.Logger) *Hub { return &Hub{subs: map[chan []byte]struct{}{}, log: log} }

// Emit sends the event to every stream.
func (h *Hub) Emit(name string, data any) {
	b, err := json.Marshal(struct {
		Name string `json:"name"`
		Data any    `json:"data"`
	}{name, data})
	if err != nil {
		h.log.WithError(err).WithField("event", name).Error("event not encodable")
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- b:
		default: // this logger's hook must not log here: it would recurse
		}
	}
}

// Subscribe returns a stream of encoded events and its cancel function.
func (h *Hub) Subscribe() (<-chan []byte, func()) {
	ch := make(chan []byte, HubBuffer)
	h.mu.Lock()
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		if _, ok := h.subs[ch]; ok {
			delete(h.subs, ch)
			close(ch)
		}
		h.mu.Unlock()
	}
}

// Subscribers is the number of connected streams.
func (h *Hub) Subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}
