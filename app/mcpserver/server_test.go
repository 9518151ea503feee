package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/sirupsen/logrus"

	"verdict/app"
	"verdict/app/server"
	"verdict/engine/models"
	"verdict/engine/session"
	"verdict/media/availability"
	"verdict/media/capture"
)

var (
	builtinOnce sync.Once
	builtin     *session.Session
	builtinErr  error
)

// needTokenizer skips a test that runs the model when no tokenizer.json is
// found, unless VERDICT_REQUIRE_TOKENIZER=1 makes that a failure.
func needTokenizer(t *testing.T) {
	t.Helper()
	if _, err := models.LoadTokenizer(""); err != nil {
		if os.Getenv("VERDICT_REQUIRE_TOKENIZER") == "1" {
			t.Fatal(err)
		}
		t.Skipf("%v", err)
	}
}

// model is the built-in model's session, shared by the tests.
func model(t *testing.T) *session.Session {
	t.Helper()
	needTokenizer(t)
	builtinOnce.Do(func() {
		builtin, builtinErr = session.Open(context.Background(), models.Builtin, models.Options{CacheDir: "off"})
	})
	if builtinErr != nil {
		t.Fatal(builtinErr)
	}
	return builtin
}

// fixed lends s to every call.
func fixed(s *session.Session) Source {
	return func(ctx context.Context) (Model, context.Context, func(), error) {
		return Model{Session: s, Name: s.Info().Name, RandomWeights: true}, ctx, func() {}, nil
	}
}

// connect serves src's tools over in-memory transports and returns the
// client's session.
func connect(t *testing.T, src Source) *mcp.ClientSession {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := New(src).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool and returns its result; a protocol error fails the
// test.
func call(t *testing.T, cs *mcp.ClientSession, name string, args any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

// text is a result's text content.
func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// structured decodes a successful result's structured content into v and
// checks that its text content is the same JSON.
func structured(t *testing.T, name string, res *mcp.CallToolResult, v any) {
	t.Helper()
	if res.IsError {
		t.Fatalf("%s: tool error %s", name, text(res))
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v\n%s", name, err, b)
	}
	var fromText any
	if err := json.Unmarshal([]byte(text(res)), &fromText); err != nil {
		t.Fatalf("%s: the text content is not the JSON result: %v", name, err)
	}
	var fromStruct any
	json.Unmarshal(b, &fromStruct)
	tb, _ := json.Marshal(fromText)
	sb, _ := json.Marshal(fromStruct)
	if !bytes.Equal(tb, sb) {
		t.Errorf("%s: text content %s, structured content %s", name, tb, sb)
	}
}

// TestTools: tools/list has the three tools, each with a description and an
// input schema of type object with its properties described.
func TestTools(t *testing.T) {
	cs := connect(t, func(ctx context.Context) (Model, context.Context, func(), error) {
		return Model{}, nil, nil, errors.New("no model here")
	})
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" {
			t.Errorf("%s has no description", tool.Name)
		}
		var s struct {
			Type       string
			Required   []string
			Properties map[string]struct{ Description string }
		}
		b, _ := json.Marshal(tool.InputSchema)
		if err := json.Unmarshal(b, &s); err != nil || s.Type != "object" || len(s.Required) == 0 {
			t.Errorf("%s: input schema %s", tool.Name, b)
		}
		for p, d := range s.Properties {
			if d.Description == "" && p != "name" {
				t.Errorf("%s: property %s has no description", tool.Name, p)
			}
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{ToolGenerate, ToolScore, ToolSelect}) {
		t.Errorf("tools %v", names)
	}
	// Without a model every call is a tool error with the reason.
	r := call(t, cs, ToolGenerate, map[string]any{"prompt": "hi"})
	if !r.IsError || !strings.Contains(text(r), "no model here") {
		t.Errorf("generate without a model: error %v, %q", r.IsError, text(r))
	}
}

const ticketSchema = `{"fields": [
  {"name": "urgent", "question": "Is this urgent?", "type": "bool"},
  {"name": "team", "question": "Which team?", "type": "choice", "options": {"billing": "payments", "tech": "bugs"}},
  {"name": "tools", "question": "Which tools?", "type": "catalog", "entries": {"refund_order": "Refund an order", "reset_password": "Reset a password", "escalate": "Escalate to a human"}, "k": 2}]}`

// TestScore: score answers a schema as verdict score does; each decision a
// distribution that sums to 1; the same answer for the same input.
func TestScore(t *testing.T) {
	cs := connect(t, fixed(model(t)))
	args := map[string]any{"schema": json.RawMessage(ticketSchema), "text": "The site is down and we lose money!"}
	type out struct {
		Model         string `json:"model"`
		RandomWeights bool   `json:"random_weights"`
		Backend       string `json:"backend"`
		Answer        map[string]any
		Fields        []struct {
			Name      string
			Names     []string
			Decisions []struct {
				Candidates []struct{ Probability float64 }
			}
		}
		Timings map[string]any
	}
	var a, b out
	structured(t, "score", call(t, cs, ToolScore, args), &a)
	if a.Backend != "json" || !a.RandomWeights || a.Model == "" || len(a.Timings) == 0 || len(a.Answer) != 3 || len(a.Fields) != 3 {
		t.Fatalf("score: %+v", a)
	}
	for _, f := range a.Fields {
		for _, d := range f.Decisions {
			sum := 0.0
			for _, c := range d.Candidates {
				sum += c.Probability
			}
			if math.Abs(sum-1) > 1e-9 {
				t.Errorf("field %s: candidates sum to %v", f.Name, sum)
			}
		}
	}
	if tools := a.Fields[2].Names; len(tools) != 2 || tools[0] == tools[1] {
		t.Errorf("catalog field: %v", tools)
	}
	args["backend"], args["temperature"] = "cached", 2
	structured(t, "score cached", call(t, cs, ToolScore, args), &b)
	if b.Backend != "cached" {
		t.Errorf("backend %q", b.Backend)
	}
}

// TestScoreImage: an image as base64 and as a data: URL goes through the
// vision tower into the prompt.
func TestScoreImage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the vision tower (-short)")
	}
	cs := connect(t, fixed(model(t)))
	img := image.NewRGBA(image.Rect(0, 0, 32, 32))
	for i := range img.Pix {
		img.Pix[i] = uint8(i * 7)
	}
	img.Set(3, 3, color.White)
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString(buf.Bytes())
	var out struct {
		PromptTokens int `json:"prompt_tokens"`
		Answer       map[string]any
	}
	structured(t, "score image", call(t, cs, ToolScore, map[string]any{
		"schema": json.RawMessage(`{"fields":[{"name":"cat","question":"Is there a cat?","type":"bool"}]}`),
		"images": []string{b64, "data:image/png;base64," + b64}}), &out)
	if out.PromptTokens < 2*model(t).Info().ImageTokens || len(out.Answer) != 1 {
		t.Errorf("score with two images: %d prompt tokens (an image is %d), answer %v", out.PromptTokens, model(t).Info().ImageTokens, out.Answer)
	}
}

var testCatalog = []map[string]string{
	{"name": "refund_order", "description": "Refund a customer's order"},
	{"name": "reset_password", "description": "Reset a user's password"},
	{"name": "escalate", "description": "Escalate to a human agent"},
	{"name": "track_package", "description": "Track a package"},
	{"name": "cancel_subscription", "description": "Cancel a subscription"},
	{"name": "update_address", "description": "Change the shipping address"},
}

// TestSelectTools: select_tools picks exactly k distinct names of the
// catalog, each pick's distribution sums to 1 and names only entries not
// picked before; the path probability is the product of the picks'; the
// names are those of the session's catalog decode.
func TestSelectTools(t *testing.T) {
	s := model(t)
	cs := connect(t, fixed(s))
	for _, k := range []int{1, 3, len(testCatalog)} {
		var out SelectOutput
		structured(t, "select_tools", call(t, cs, ToolSelect, map[string]any{
			"catalog": testCatalog, "request": "I was charged twice and want my money back", "k": k}), &out)
		if len(out.Names) != k || len(out.Picks) != k {
			t.Fatalf("k=%d: %d names %v, %d picks", k, len(out.Names), out.Names, len(out.Picks))
		}
		seen := map[string]bool{}
		path := 1.0
		for i, p := range out.Picks {
			if p.Name != out.Names[i] || seen[p.Name] || !slices.ContainsFunc(testCatalog, func(e map[string]string) bool { return e["name"] == p.Name }) {
				t.Errorf("k=%d: pick %d %q of %v", k, i, p.Name, out.Names)
			}
			seen[p.Name] = true
			if !(p.Probability > 0 && p.Probability <= 1) {
				t.Errorf("k=%d: pick %s has probability %v", k, p.Name, p.Probability)
			}
			sum, mine := 0.0, false
			for _, a := range p.Distribution {
				sum += a.Probability
				for _, n := range a.Names {
					if seen[n] && n != p.Name {
						t.Errorf("k=%d: pick %d's distribution names %s, picked before", k, i, n)
					}
					mine = mine || n == p.Name && len(a.Names) == 1 && a.Probability == p.Probability
				}
			}
			if math.Abs(sum-1) > 1e-9 || !mine {
				t.Errorf("k=%d: pick %d's distribution sums to %v (has its own entry: %v): %+v", k, i, sum, mine, p.Distribution)
			}
			path *= p.Probability
		}
		if math.Abs(path-out.PathProbability) > 1e-12 {
			t.Errorf("k=%d: path probability %v, picks' product %v", k, out.PathProbability, path)
		}
		if len(out.Steps) != out.Timings.Tokens || out.PromptTokens == 0 {
			t.Errorf("k=%d: %d steps, %d tokens, %d prompt tokens", k, len(out.Steps), out.Timings.Tokens, out.PromptTokens)
		}
		for _, st := range out.Steps {
			sum := 0.0
			for _, tp := range st.Tokens {
				sum += tp.P
			}
			if math.Abs(sum-1) > 1e-9 || st.Pick < 0 || st.Pick >= k {
				t.Errorf("k=%d: step %+v sums to %v", k, st, sum)
			}
		}
	}
}

// TestGenerate: generate's text, finish reason and counts; the same seed
// gives the same text.
func TestGenerate(t *testing.T) {
	cs := connect(t, fixed(model(t)))
	args := map[string]any{"prompt": "Say hi.", "system": "Be brief.", "max_tokens": 6, "temperature": 0.8, "seed": 7}
	var a, b GenerateOutput
	structured(t, "generate", call(t, cs, ToolGenerate, args), &a)
	structured(t, "generate again", call(t, cs, ToolGenerate, args), &b)
	if a.Tokens < 1 || a.Tokens > 6 || a.PromptTokens == 0 || (a.FinishReason != "stop" && a.FinishReason != "length") || a.Timings.TotalMs <= 0 {
		t.Errorf("generate: %+v", a)
	}
	if a.Text != b.Text || a.Tokens != b.Tokens {
		t.Errorf("the same seed: %q, then %q", a.Text, b.Text)
	}
}

// TestErrors: bad arguments are tool errors (isError) naming the problem,
// and the server goes on serving.
func TestErrors(t *testing.T) {
	cs := connect(t, fixed(model(t)))
	schema := json.RawMessage(`{"fields":[{"name":"a","question":"Is it?","type":"bool"}]}`)
	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{ToolScore, map[string]any{"text": "x"}, "schema"},
		{ToolScore, map[string]any{"schema": schema}, "the input is empty"},
		{ToolScore, map[string]any{"schema": json.RawMessage(`{"fields":[{"name":"a","question":"Is it?","type":"colour"}]}`), "text": "x"}, `unknown type "colour"`},
		{ToolScore, map[string]any{"schema": json.RawMessage(`[1]`), "text": "x"}, "schema"},
		{ToolScore, map[string]any{"schema": schema, "text": "x", "backend": "magic"}, "backend"},
		{ToolScore, map[string]any{"schema": schema, "text": "x", "temperature": 0}, "temperature"},
		{ToolScore, map[string]any{"schema": schema, "text": "x", "extra": 1}, "extra"},
		{ToolScore, map[string]any{"schema": schema, "images": []string{"not base64!"}}, `"images[0]"`},
		{ToolScore, map[string]any{"schema": schema, "images": []string{base64.StdEncoding.EncodeToString([]byte("plain text, no image"))}}, `"images[0]"`},
		{ToolScore, map[string]any{"schema": schema, "audio": "data:audio/wav,abc"}, "must be base64"},
		{ToolScore, map[string]any{"schema": schema, "text": "x <image_soft_token> y"}, "image_soft_token"},
		{ToolSelect, map[string]any{"catalog": testCatalog, "request": "x", "k": 7}, "k = 7, but the catalog has 6 entries"},
		{ToolSelect, map[string]any{"catalog": testCatalog, "request": "x", "k": 0}, "k"},
		{ToolSelect, map[string]any{"catalog": []any{}, "request": "x", "k": 1}, "catalog"},
		{ToolSelect, map[string]any{"catalog": []map[string]string{{"name": "a"}, {"name": "a"}}, "request": "x", "k": 1}, `same name "a"`},
		{ToolSelect, map[string]any{"catalog": []map[string]string{{"name": "a"}, {"name": "  "}}, "request": "x", "k": 1}, "only white space"},
		{ToolSelect, map[string]any{"catalog": testCatalog, "request": "   ", "k": 1}, "the request is empty"},
		{ToolSelect, map[string]any{"catalog": testCatalog, "k": 1}, "request"},
		{ToolGenerate, map[string]any{"prompt": "hi", "max_tokens": 5000}, "max_tokens"},
		{ToolGenerate, map[string]any{"prompt": "hi", "temperature": -1}, "temperature"},
		{ToolGenerate, map[string]any{"prompt": ""}, "prompt"},
		{ToolGenerate, map[string]any{"prompt": "hi", "max_token": 5}, "max_token"},
	} {
		res := call(t, cs, c.tool, c.args)
		if !res.IsError || !strings.Contains(text(res), c.want) {
			t.Errorf("%s %v: error %v %q, want %q in it", c.tool, c.args, res.IsError, text(res), c.want)
		}
	}
	// Still serving.
	var g GenerateOutput
	structured(t, "generate", call(t, cs, ToolGenerate, map[string]any{"prompt": "hi", "max_tokens": 2}), &g)
}

// TestLoading: calls wait for a background load, and a failed load is
// every call's error.
func TestLoading(t *testing.T) {
	s := model(t)
	release := make(chan struct{})
	l := Load(func(ctx context.Context) (*session.Session, error) {
		<-release
		return s, nil
	})
	cs := connect(t, l.Source())
	done := make(chan *mcp.CallToolResult)
	go func() {
		res, _ := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: ToolGenerate, Arguments: map[string]any{"prompt": "hi", "max_tokens": 2}})
		done <- res
	}()
	select {
	case <-done:
		t.Fatal("a call ran before the model loaded")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if res := <-done; res == nil || res.IsError {
		t.Fatalf("after the load: %v", res)
	}
	// Close would close the shared session: only stop waiting here.
	if err := l.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}

	bad := Load(func(ctx context.Context) (*session.Session, error) { return nil, errors.New("no such folder") })
	defer bad.Close()
	res := call(t, connect(t, bad.Source()), ToolSelect, map[string]any{"catalog": testCatalog, "request": "x", "k": 1})
	if !res.IsError || !strings.Contains(text(res), "the model did not load: no such folder") {
		t.Errorf("after a failed load: %v %q", res.IsError, text(res))
	}
}

// TestHTTP: the tools at /mcp of the server behind its access checks: a
// client with the token lists and calls them; no token is 401, another
// origin 403, another host 421, another site's page 403; the app's model is
// lent to the calls (FromApp), and without one a call says why.
func TestHTTP(t *testing.T) {
	needTokenizer(t)
	log := logrus.New()
	log.SetOutput(io.Discard)
	hub := server.NewHub(log)
	svc := app.New(app.Options{Emitter: hub, Logger: log, Capture: "synthetic",
		CheckMedia: func(context.Context, *capture.Devices) availability.Report { return availability.Report{} }})
	t.Cleanup(svc.Shutdown)
	srv := server.New(svc.Bound(), hub, fstest.MapFS{}, log, server.Access{Token: "s3cret"})
	srv.HandleMCP(Handler(FromApp(svc)))
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)

	post := func(header map[string]string) (int, string) {
		req, _ := http.NewRequest("POST", ts.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		if h, ok := header["Host"]; ok {
			req.Host = h
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	bearer := "Bearer s3cret"
	for _, c := range []struct {
		name   string
		header map[string]string
		status int
		want   string
	}{
		{"no token", nil, 401, `"code":"unauthorized"`},
		{"wrong token", map[string]string{"Authorization": "Bearer nope"}, 401, `"code":"unauthorized"`},
		{"other origin", map[string]string{"Authorization": bearer, "Origin": "http://evil.example"}, 403, `"code":"forbidden"`},
		{"another site's page", map[string]string{"Authorization": bearer, "Sec-Fetch-Site": "cross-site"}, 403, `"code":"forbidden"`},
		{"rebound host", map[string]string{"Authorization": bearer, "Host": "evil.example"}, 421, `"code":"misdirected_request"`},
		{"token", map[string]string{"Authorization": bearer}, 200, `"tools"`},
		{"token header", map[string]string{server.TokenHeader: "s3cret"}, 200, `"tools"`},
	} {
		status, body := post(c.header)
		if status != c.status || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %.300s; want %d and %s", c.name, status, body, c.status, c.want)
		}
	}
	if status, body := func() (int, string) {
		req, _ := http.NewRequest("GET", ts.URL+"/mcp/x", nil)
		req.Header.Set("Authorization", bearer)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}(); status != 404 || !strings.Contains(body, "the MCP server is at /mcp") {
		t.Errorf("GET /mcp/x: %d %s", status, body)
	}

	// The SDK's client, with the token.
	client := &http.Client{Transport: bearerTransport{"s3cret"}}
	ctx := context.Background()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: ts.URL + "/mcp", HTTPClient: client}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	n := 0
	for _, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 3 {
		t.Errorf("%d tools", n)
	}
	res := call(t, cs, ToolGenerate, map[string]any{"prompt": "hi", "max_tokens": 2})
	if !res.IsError || !strings.Contains(text(res), "no model is loaded") {
		t.Errorf("without a model: %v %q", res.IsError, text(res))
	}
	if _, err := svc.Models.Open(models.Builtin); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Minute); svc.Models.Info().State == app.ModelLoading && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	var g GenerateOutput
	structured(t, "generate over HTTP", call(t, cs, ToolGenerate, map[string]any{"prompt": "hi", "max_tokens": 3}), &g)
	if g.Tokens < 1 || !g.RandomWeights {
		t.Errorf("generate over HTTP: %+v", g)
	}
	var sel SelectOutput
	structured(t, "select_tools over HTTP", call(t, cs, ToolSelect, map[string]any{"catalog": testCatalog, "request": "reset my password", "k": 2}), &sel)
	if len(sel.Names) != 2 || sel.Names[0] == sel.Names[1] {
		t.Errorf("select_tools over HTTP: %v", sel.Names)
	}
}

// bearerTransport sends the token as Authorization: Bearer.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestDecodeData: base64 padded or not, with line breaks, and data: URLs.
func TestDecodeData(t *testing.T) {
	for in, want := range map[string]string{
		"aGk=": "hi", "aGk": "hi", "aG\nk=": "hi", "data:text/plain;base64,aGk=": "hi", "data:;BASE64,aGk": "hi",
	} {
		got, err := decodeData(in)
		if err != nil || string(got) != want {
			t.Errorf("%q: %q %v", in, got, err)
		}
	}
	for _, in := range []string{"", "data:image/png,abc", "data:abc", "!!"} {
		if _, err := decodeData(in); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}
