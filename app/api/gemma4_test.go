package api

import (
	"context"
	"encoding/json"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	logtest "github.com/sirupsen/logrus/hooks/test"

	"verdict/app"
	"verdict/engine/fixture/testmodel"
	"verdict/engine/tokenizer"
	"verdict/media/availability"
	"verdict/media/capture"
)

// gemma4Folder is the tiny dense Gemma 4 fixture (text only, a 512-token
// vocabulary) unpacked into a folder of the test's, with engine/gemma4's
// test tokenizer beside it as tokenizer.json, the way a user's checkpoint
// folder holds its own.
func gemma4Folder(t *testing.T) string {
	t.Helper()
	src := testmodel.Dir(t, "gemma4-synthetic-tiny.tar.gz")
	dir := filepath.Join(t.TempDir(), "gemma4-synthetic-tiny")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile := func(from, to string) {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		copyFile(filepath.Join(src, e.Name()), filepath.Join(dir, e.Name()))
	}
	copyFile(filepath.Join(filepath.Dir(testmodel.Testdata("x")), "..", "engine", "gemma4", "testdata", "tokenizer.json"), filepath.Join(dir, "tokenizer.json"))
	return dir
}

// newGemma4API serves the API of fresh services with the Gemma 4 folder
// dir loaded, as `verdict serve --model DIR` does.
func newGemma4API(t *testing.T, dir string) *httptest.Server {
	t.Helper()
	log, _ := logtest.NewNullLogger()
	svc := app.New(app.Options{Emitter: app.EmitterFunc(func(string, any) {}), Logger: log, Capture: "synthetic",
		CheckMedia: func(context.Context, *capture.Devices) availability.Report { return availability.Report{} }})
	t.Cleanup(svc.Shutdown)
	if _, err := svc.Models.Open(dir); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for svc.Models.Info().State == app.ModelLoading && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if info := svc.Models.Info(); info.State != app.ModelReady || info.Family != "gemma4" {
		t.Fatalf("model %s (family %q): %s", info.State, info.Family, info.Error)
	}
	ts := httptest.NewServer(New(svc, log))
	t.Cleanup(ts.Close)
	return ts
}

// TestGemma4Chat: a Gemma 4 folder through the OpenAI-compatible routes.
// /v1/models lists it; /v1/chat/completions answers with logprobs on a
// prompt in Gemma 4's turn format. The chat's prompt is held against a
// hand-written Gemma 4 prompt given to /v1/completions as raw text: the
// same prompt token count, the same greedy tokens with the same logprobs
// (the model conditions on every prompt token, so any other prompt moves
// them: the same request in Gemma 3n's format is shown to differ), and the
// echoed prompt's tokens are <bos>, then <|turn> (105) and <turn|> (106)
// where the turns open and close. A json_schema response format is
// answered by the scorer on the same model.
func TestGemma4Chat(t *testing.T) {
	dir := gemma4Folder(t)
	ts := newGemma4API(t, dir)
	tok, err := tokenizer.Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("<|turn><turn|>"); len(got) != 2 || got[0] != 105 || got[1] != 106 {
		t.Fatalf("the test tokenizer's turn tokens are %v, want [105 106]", got)
	}

	resp, b := call(t, "GET", ts.URL+"/v1/models", "", nil)
	var list OpenAIModelList
	if err := json.Unmarshal(b, &list); err != nil || resp.StatusCode != 200 || len(list.Data) == 0 || list.Data[0].ID != dir {
		t.Fatalf("GET /v1/models: %d %s, want the Gemma 4 folder first", resp.StatusCode, b)
	}
	// Verdict's own list names each model's family.
	resp, b = call(t, "GET", ts.URL+"/v1/verdict/models", "", nil)
	var known ModelList
	if err := json.Unmarshal(b, &known); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /v1/verdict/models: %d %s", resp.StatusCode, b)
	}
	families := map[string]string{}
	for _, m := range known.Models {
		families[m.ID] = m.Family
	}
	if families[dir] != "gemma4" || families["builtin"] != "gemma3n" {
		t.Errorf("families %v, want the folder gemma4 and the built-in model gemma3n", families)
	}

	const n = 8
	sys, user := "Be brief.", "Is the printer jammed?"
	// Gemma 4's turns, written by hand (docs/gemma4.md, "Chat format"):
	// the system message is a turn of its own; <bos> is the route's.
	gemma4 := "<|turn>system\n" + sys + "<turn|>\n<|turn>user\n" + user + "<turn|>\n<|turn>model\n"
	gemma3n := "<start_of_turn>user\n" + sys + "\n\n" + user + "<end_of_turn>\n<start_of_turn>model\n"
	// By hand: <bos>, three <|turn> and two <turn|>, the text between them.
	if want := 1 + len(tok.Encode(gemma4)); want != 1+3+2+len(tok.Encode("system\n"+sys))+2*len(tok.Encode("\n"))+
		len(tok.Encode("user\n"+user))+len(tok.Encode("model\n")) {
		t.Fatalf("the hand count of %q does not add up (%d tokens)", gemma4, want)
	}

	var chat chatResp
	body := `{"model":` + jsonQuote(dir) + `,"messages":[{"role":"system","content":` + jsonQuote(sys) + `},{"role":"user","content":` + jsonQuote(user) + `}],` +
		`"max_tokens":` + itoa(n) + `,"temperature":0,"logprobs":true,"top_logprobs":2}`
	if st, b := post(t, ts.URL+"/v1/chat/completions", body, &chat); st != 200 {
		t.Fatalf("chat: %d %s", st, b)
	}
	ch := chat.Choices[0]
	if chat.Model != filepath.Base(dir) && chat.Model != dir {
		t.Errorf("chat: model %q, want the Gemma 4 folder's", chat.Model)
	}
	if ch.Message.Content == nil || ch.Logprobs == nil || chat.Usage == nil {
		t.Fatalf("chat: %+v", chat)
	}
	if want := 1 + len(tok.Encode(gemma4)); chat.Usage.PromptTokens != want {
		t.Errorf("chat: %d prompt tokens, want %d (<bos> and %q)", chat.Usage.PromptTokens, want, gemma4)
	}
	gen := ch.Logprobs.Content
	if len(gen) == 0 || len(gen) != chat.Usage.CompletionTokens-btoi(ch.FinishReason == FinishStop) {
		t.Fatalf("chat: %d logprobs for %d tokens (%s)", len(gen), chat.Usage.CompletionTokens, ch.FinishReason)
	}

	// complete scores prompt as a raw completion (echoed) with the chat's settings.
	complete := func(prompt string) Completion {
		t.Helper()
		var c Completion
		b := `{"model":` + jsonQuote(dir) + `,"prompt":` + jsonQuote(prompt) + `,"max_tokens":` + itoa(n) + `,"temperature":0,"logprobs":1,"echo":true}`
		if st, out := post(t, ts.URL+"/v1/completions", b, &c); st != 200 || c.Choices[0].Logprobs == nil {
			t.Fatalf("completion: %d %s", st, out)
		}
		return c
	}
	// worst is the largest logprob difference between the chat's tokens and
	// the completion's generated ones (+Inf when the tokens differ).
	worst := func(c Completion) float64 {
		lp := c.Choices[0].Logprobs
		prompt := c.Usage.PromptTokens
		if len(lp.Tokens)-prompt != len(gen) {
			return math.Inf(1)
		}
		d := 0.0
		for i, e := range gen {
			if lp.Tokens[prompt+i] != e.Token || lp.TokenLogprobs[prompt+i] == nil {
				return math.Inf(1)
			}
			d = max(d, math.Abs(*lp.TokenLogprobs[prompt+i]-e.Logprob))
		}
		return d
	}
	raw := complete(gemma4)
	if raw.Usage.PromptTokens != chat.Usage.PromptTokens {
		t.Errorf("the hand-written Gemma 4 prompt is %d tokens, the chat's %d", raw.Usage.PromptTokens, chat.Usage.PromptTokens)
	}
	if d := worst(raw); d > 1e-6 {
		t.Errorf("the chat's tokens and logprobs differ from the hand-written Gemma 4 prompt's by %g (tolerance 1e-6)", d)
	} else {
		t.Logf("the chat and the hand-written Gemma 4 prompt: the same %d tokens, logprobs within %g", len(gen), d)
	}
	toks := raw.Choices[0].Logprobs.Tokens[:raw.Usage.PromptTokens]
	opened, closed := 0, 0
	for _, s := range toks {
		opened += btoi(s == "<|turn>")
		closed += btoi(s == "<turn|>")
	}
	if toks[0] != "<bos>" || toks[1] != "<|turn>" || opened != 3 || closed != 2 || toks[len(toks)-1] != "\n" {
		t.Errorf("the echoed prompt's tokens %q: want <bos>, three <|turn> and two <turn|>", toks)
	}
	// The comparison can fail: the same request in Gemma 3n's format moves the logprobs.
	if d := worst(complete(gemma3n)); d <= 1e-6 {
		t.Errorf("the Gemma 3n-format prompt gives the chat's logprobs too (within %g): the check cannot tell the formats apart", d)
	}

	// Structured output: the scorer answers on the Gemma 4 model.
	js := `{"type":"object","additionalProperties":false,"required":["urgent","mood"],"properties":{` +
		`"urgent":{"type":"boolean","description":"Is it urgent?"},` +
		`"mood":{"type":"string","enum":["calm","angry","sad"],"description":"What is the mood?"}}}`
	var scored chatResp
	sbody := `{"model":` + jsonQuote(dir) + `,"messages":[{"role":"user","content":` + jsonQuote(user) + `}],` +
		`"response_format":{"type":"json_schema","json_schema":{"name":"note","strict":true,"schema":` + js + `}}}`
	if st, b := post(t, ts.URL+"/v1/chat/completions", sbody, &scored); st != 200 {
		t.Fatalf("structured: %d %s", st, b)
	}
	var answer struct {
		Urgent *bool  `json:"urgent"`
		Mood   string `json:"mood"`
	}
	content := *scored.Choices[0].Message.Content
	if err := json.Unmarshal([]byte(content), &answer); err != nil || answer.Urgent == nil || !strings.Contains("calm angry sad", answer.Mood) || answer.Mood == "" {
		t.Fatalf("structured: content %s: %v", content, err)
	}
	if scored.Verdict == nil || scored.Verdict.Score == nil {
		t.Fatalf("structured: no verdict field: %+v", scored)
	}
	fields, _ := scored.Verdict.Score["fields"].([]any)
	if len(fields) != 2 {
		t.Fatalf("structured: fields %v", scored.Verdict.Score["fields"])
	}
	for _, f := range fields {
		f := f.(map[string]any)
		for _, d := range f["decisions"].([]any) {
			sum, cands := 0.0, d.(map[string]any)["candidates"].([]any)
			for _, c := range cands {
				sum += c.(map[string]any)["probability"].(float64)
			}
			if len(cands) < 2 || math.Abs(sum-1) > 1e-6 {
				t.Errorf("structured: field %v: %d candidates whose probabilities sum to %v", f["name"], len(cands), sum)
			}
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
