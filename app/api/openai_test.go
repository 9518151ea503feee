package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sirupsen/logrus"

	"verdict/engine/catalog"
	"verdict/engine/scorer"
	"verdict/engine/session"
)

// chatResp is a chat completion as a test reads it: the verdict field's
// score as generic JSON (its durations do not decode back).
type chatResp struct {
	ChatCompletion
	Verdict *struct {
		Score      map[string]any  `json:"score"`
		Selection  *ToolSelection  `json:"selection"`
		Generation *GenerationInfo `json:"generation"`
	} `json:"verdict"`
}

// post sends body to path and decodes the JSON answer into v (when the
// status is 200); it returns the status and the body.
func post(t *testing.T, url, body string, v any) (int, []byte) {
	t.Helper()
	resp, b := call(t, "POST", url, body, nil)
	if resp.StatusCode == 200 && v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
	}
	return resp.StatusCode, b
}

// openAIErrorOf decodes an error in OpenAI's shape, exactly its four keys.
func openAIErrorOf(t *testing.T, b []byte) OpenAIErrorInfo {
	t.Helper()
	var raw map[string]map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil || len(raw) != 1 || len(raw["error"]) != 4 {
		t.Fatalf("not an OpenAI error: %s", b)
	}
	var e OpenAIErrorBody
	json.Unmarshal(b, &e)
	return e.Error
}

// streamData reads an OpenAI event stream: each "data:" line's JSON, and
// whether it ended with [DONE].
func streamData(t *testing.T, url, body string) ([]json.RawMessage, bool) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := readAll(resp)
		t.Fatalf("stream: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	var out []json.RawMessage
	done := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || done {
			t.Fatalf("unexpected line %q (after [DONE]: %v)", line, done)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		out = append(out, json.RawMessage(data))
	}
	return out, done
}

func readAll(resp *http.Response) ([]byte, error) {
	var b bytes.Buffer
	_, err := b.ReadFrom(resp.Body)
	return b.Bytes(), err
}

// chatChunks reads a chat stream: the content put together, the chunks,
// and the finish reason.
func chatChunks(t *testing.T, url, body string) (string, []chatChunk, string) {
	t.Helper()
	data, done := streamData(t, url, body)
	if !done {
		t.Fatal("the stream did not end with [DONE]")
	}
	var text strings.Builder
	var chunks []chatChunk
	finish := ""
	for i, d := range data {
		var c chatChunk
		if err := json.Unmarshal(d, &c); err != nil {
			t.Fatalf("chunk %s: %v", d, err)
		}
		if c.Object != "chat.completion.chunk" || c.ID == "" || (i > 0 && c.ID != chunks[0].ID) {
			t.Errorf("chunk %s", d)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				text.WriteString(*ch.Delta.Content)
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
		chunks = append(chunks, c)
	}
	if len(chunks) == 0 || len(chunks[0].Choices) != 1 || chunks[0].Choices[0].Delta.Role != "assistant" {
		t.Errorf("the first chunk does not give the role: %+v", chunks)
	}
	return text.String(), chunks, finish
}

// chatChunk is a chunk as a test reads it.
type chatChunk struct {
	ChatChunk
	Verdict *struct {
		Score      map[string]any  `json:"score"`
		Selection  *ToolSelection  `json:"selection"`
		Generation *GenerationInfo `json:"generation"`
	} `json:"verdict"`
}

// TestChatCompletions: the answer is in OpenAI's shape; the stream's
// pieces put together are the answer without streaming (same seed), with
// the usage in a last chunk when asked; logprobs come with every token;
// stop sequences end the text before them, streamed or not.
func TestChatCompletions(t *testing.T) {
	ts, _, _ := newAPI(t, true)
	url := ts.URL + "/v1/chat/completions"
	for _, c := range []struct {
		name, body string
	}{
		{"greedy", `"messages":[{"role":"user","content":"Say hi."}],"max_tokens":12,"temperature":0`},
		{"sampled", `"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Tell me a story."}],"max_completion_tokens":16,"temperature":0.9,"top_p":0.9,"seed":7`},
		{"conversation", `"messages":[{"role":"developer","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"}]},{"role":"assistant","content":"Hello."},{"role":"user","content":"And now?"}],"max_tokens":8,"seed":-3`},
		{"logprobs", `"messages":[{"role":"user","content":"Count."}],"max_tokens":10,"temperature":0,"logprobs":true,"top_logprobs":3`},
	} {
		var one chatResp
		if st, b := post(t, url, `{"model":"builtin",`+c.body+`}`, &one); st != 200 {
			t.Fatalf("%s: %d %s", c.name, st, b)
		}
		ch := one.Choices[0]
		if one.Object != "chat.completion" || !strings.HasPrefix(one.ID, "chatcmpl-") || one.Model != "builtin" || len(one.Choices) != 1 ||
			ch.Message.Role != "assistant" || ch.Message.Content == nil || (ch.FinishReason != FinishStop && ch.FinishReason != FinishLength) {
			t.Fatalf("%s: %+v", c.name, one)
		}
		if u := one.Usage; u == nil || u.PromptTokens == 0 || u.CompletionTokens == 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
			t.Errorf("%s: usage %+v", c.name, one.Usage)
		}
		if v := one.Verdict; v == nil || v.Generation == nil || !v.Generation.RandomWeights || v.Generation.Timings.TotalMs <= 0 {
			t.Errorf("%s: verdict %+v", c.name, one.Verdict)
		}
		content := *ch.Message.Content
		if strings.Contains(c.body, "logprobs") {
			lp := ch.Logprobs
			if lp == nil || len(lp.Content) != one.Usage.CompletionTokens-btoi(ch.FinishReason == FinishStop) {
				t.Fatalf("%s: logprobs %+v for %d tokens", c.name, lp, one.Usage.CompletionTokens)
			}
			var joined []byte
			for i, e := range lp.Content {
				for _, x := range e.Bytes {
					joined = append(joined, byte(x))
				}
				if len(e.TopLogprobs) != 3 || e.Logprob > 0 || e.TopLogprobs[0].Token != e.Token || e.TopLogprobs[0].Logprob != e.Logprob {
					t.Errorf("%s: token %d: %+v (greedy: the first alternative)", c.name, i, e)
				}
			}
			if string(joined) != content && utf8.Valid(joined) {
				t.Errorf("%s: the tokens' bytes make %q, the content is %q", c.name, joined, content)
			}
		} else if ch.Logprobs != nil {
			t.Errorf("%s: logprobs without asking", c.name)
		}
		if !strings.Contains(c.body, `"seed"`) && !strings.Contains(c.body, `"temperature":0`) {
			continue // a random seed: the stream answers otherwise
		}
		streamed, chunks, finish := chatChunks(t, url, `{"model":"builtin",`+c.body+`,"stream":true,"stream_options":{"include_usage":true}}`)
		if streamed != content || finish != ch.FinishReason {
			t.Errorf("%s: streamed %q (%s), without streaming %q (%s)", c.name, streamed, finish, content, ch.FinishReason)
		}
		last := chunks[len(chunks)-1]
		if last.Usage == nil || *last.Usage != *one.Usage || len(last.Choices) != 0 {
			t.Errorf("%s: last chunk %+v, want the usage %+v and no choices", c.name, last, one.Usage)
		}
		if fin := chunks[len(chunks)-2]; fin.Verdict == nil || fin.Verdict.Generation == nil {
			t.Errorf("%s: the finishing chunk has no verdict field", c.name)
		}
	}

	// Stop sequences: the greedy text cut before a stop taken from it.
	body := `"messages":[{"role":"user","content":"Write."}],"max_tokens":24,"temperature":0`
	var full chatResp
	if st, b := post(t, url, `{"model":"builtin",`+body+`}`, &full); st != 200 {
		t.Fatalf("%d %s", st, b)
	}
	text := *full.Choices[0].Message.Content
	runes := []rune(text)
	if len(runes) < 8 {
		t.Fatalf("the greedy text %q is too short to cut", text)
	}
	stop := string(runes[4:7])
	want := text[:strings.Index(text, stop)]
	for _, stops := range []string{`"` + stop + `"`, `["zzzq", "` + stop + `"]`} {
		b := `{"model":"builtin",` + body + `,"stop":` + stops + `}`
		var cut chatResp
		if st, out := post(t, url, b, &cut); st != 200 {
			t.Fatalf("%d %s", st, out)
		}
		if got := *cut.Choices[0].Message.Content; got != want || cut.Choices[0].FinishReason != FinishStop {
			t.Errorf("stop %s: %q (%s), want %q (stop)", stops, got, cut.Choices[0].FinishReason, want)
		}
		streamed, _, finish := chatChunks(t, url, strings.TrimSuffix(b, "}")+`,"stream":true}`)
		if streamed != want || finish != FinishStop {
			t.Errorf("stop %s, streamed: %q (%s), want %q (stop)", stops, streamed, finish, want)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// pngDataURL is a small image as a data URL.
func pngDataURL() string {
	img := image.NewRGBA(image.Rect(0, 0, 32, 32))
	img.Set(16, 16, color.RGBA{255, 0, 0, 255})
	var buf bytes.Buffer
	png.Encode(&buf, img)
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(buf.Bytes())
}

// TestChatImage: an image_url part with a data URL reaches the model, in
// generation and in structured output.
func TestChatImage(t *testing.T) {
	ts, _, _ := newAPI(t, true)
	msg := `"messages":[{"role":"user","content":[{"type":"text","text":"What is it?"},{"type":"image_url","image_url":{"url":"` + pngDataURL() + `","detail":"low"}}]}]`
	var one chatResp
	if st, b := post(t, ts.URL+"/v1/chat/completions", `{"model":"builtin",`+msg+`,"max_tokens":3}`, &one); st != 200 {
		t.Fatalf("%d %s", st, b)
	}
	if one.Usage.PromptTokens < 32 {
		t.Errorf("prompt of %d tokens: the image's soft tokens are missing", one.Usage.PromptTokens)
	}
	var scored chatResp
	rf := `"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"red":{"type":"boolean"}}}}}`
	if st, b := post(t, ts.URL+"/v1/chat/completions", `{"model":"builtin",`+msg+`,`+rf+`}`, &scored); st != 200 {
		t.Fatalf("%d %s", st, b)
	}
	if scored.Usage.PromptTokens < 32 {
		t.Errorf("scored prompt of %d tokens: the image is missing", scored.Usage.PromptTokens)
	}
}

// TestChatErrors: refusals in OpenAI's shape, with the status, the type,
// the code and the param that is wrong, and a message that names it.
func TestChatErrors(t *testing.T) {
	ts, _, _ := newAPI(t, true)
	bare, _, _ := newAPI(t, false)
	user := `"messages":[{"role":"user","content":"hi"}]`
	schema := func(props string) string {
		return user + `,"response_format":{"type":"json_schema","json_schema":{"name":"a","schema":{"type":"object","properties":` + props + `}}}`
	}
	tools := `"tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"b"}}]`
	for _, c := range []struct {
		name, path, body string
		status           int
		typ, code, param string
		msg              string
		bare             bool
	}{
		{"unknown model", "chat/completions", `"model":"gpt-4o",` + user, 404, "not_found_error", CodeUnknownModel, "", `"gpt-4o"`, false},
		{"unknown field", "chat/completions", user + `,"temprature":1`, 400, "invalid_request_error", CodeBadRequest, "temprature", `unknown field`, false},
		{"n", "chat/completions", user + `,"n":2`, 400, "invalid_request_error", CodeBadRequest, "n", `n = 1`, false},
		{"no messages", "chat/completions", `"messages":[]`, 400, "invalid_request_error", CodeBadRequest, "messages", `at least one user message`, false},
		{"assistant last", "chat/completions", `"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]`, 400, "invalid_request_error", CodeBadRequest, "messages", `the last message must be the user's`, false},
		{"tool message", "chat/completions", `"messages":[{"role":"tool","content":"a","tool_call_id":"x"}]`, 400, "invalid_request_error", CodeBadRequest, "messages[0].role", `does not run tools`, false},
		{"bad role", "chat/completions", `"messages":[{"role":"robot","content":"a"}]`, 400, "invalid_request_error", CodeBadRequest, "messages[0].role", `"robot"`, false},
		{"late system", "chat/completions", `"messages":[{"role":"user","content":"a"},{"role":"system","content":"b"},{"role":"user","content":"c"}]`, 400, "invalid_request_error", CodeBadRequest, "messages[1].role", `at the start`, false},
		{"image URL", "chat/completions", `"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]`, 400, "invalid_request_error", CodeBadRequest, "messages[0].content[0].image_url.url", `does not fetch URLs`, false},
		{"not an image", "chat/completions", `"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,aGVsbG8="}}]}]`, 400, "invalid_request_error", CodeBadMedia, "messages[0].content[0].image_url", `messages[0].content[0].image_url`, false},
		{"part type", "chat/completions", `"messages":[{"role":"user","content":[{"type":"file","text":"a"}]}]`, 400, "invalid_request_error", CodeBadRequest, "messages[0].content[0].type", `"file"`, false},
		{"max_tokens over", "chat/completions", user + `,"max_tokens":5000`, 400, "invalid_request_error", CodeBadRequest, "max_tokens", `5000 is outside 1..4096`, false},
		{"max_completion_tokens over", "chat/completions", user + `,"max_completion_tokens":0`, 400, "invalid_request_error", CodeBadRequest, "max_completion_tokens", `outside`, false},
		{"temperature over", "chat/completions", user + `,"temperature":9`, 400, "invalid_request_error", CodeBadRequest, "temperature", `temperature`, false},
		{"top_logprobs without logprobs", "chat/completions", user + `,"top_logprobs":2`, 400, "invalid_request_error", CodeBadRequest, "top_logprobs", `only with "logprobs": true`, false},
		{"top_logprobs over", "chat/completions", user + `,"logprobs":true,"top_logprobs":21`, 400, "invalid_request_error", CodeBadRequest, "top_logprobs", `0..20`, false},
		{"five stops", "chat/completions", user + `,"stop":["a","b","c","d","e"]`, 400, "invalid_request_error", CodeBadRequest, "stop", `at most 4`, false},
		{"stop number", "chat/completions", user + `,"stop":3`, 400, "invalid_request_error", CodeBadRequest, "stop", `a string or a list`, false},
		{"penalty", "chat/completions", user + `,"presence_penalty":0.5`, 400, "invalid_request_error", CodeBadRequest, "presence_penalty", `not supported`, false},
		{"stream options alone", "chat/completions", user + `,"stream_options":{"include_usage":true}`, 400, "invalid_request_error", CodeBadRequest, "stream_options", `only with "stream": true`, false},
		{"json_object", "chat/completions", user + `,"response_format":{"type":"json_object"}`, 400, "invalid_request_error", CodeBadRequest, "response_format.type", `json_schema`, false},
		{"string property", "chat/completions", schema(`{"name":{"type":"string"}}`), 400, "invalid_request_error", CodeBadRequest, "response_format.json_schema.schema.properties.name",
			`response_format.json_schema.schema.properties.name: type "string" without enum is not a decision Verdict can score`, false},
		{"nested object", "chat/completions", schema(`{"a":{"type":"object","properties":{"b":{"type":"boolean"}}}}`), 400, "invalid_request_error", CodeBadRequest, "response_format.json_schema.schema.properties.a", `nested object`, false},
		{"schema limit", "chat/completions", schema(`{` + manyBools(33) + `}`), 400, "invalid_request_error", CodeLimit, "", `32`, false},
		{"logprobs with a schema", "chat/completions", schema(`{"a":{"type":"boolean"}}`) + `,"logprobs":true`, 400, "invalid_request_error", CodeBadRequest, "logprobs", `verdict`, false},
		{"tools alone", "chat/completions", user + `,` + tools, 400, "invalid_request_error", CodeBadRequest, "tools", `"select_tools": K`, false},
		{"too many tools asked", "chat/completions", user + `,` + tools + `,"verdict":{"select_tools":3}`, 400, "invalid_request_error", CodeBadRequest, "verdict.select_tools", `1..2`, false},
		{"tool_choice none", "chat/completions", user + `,` + tools + `,"verdict":{"select_tools":1},"tool_choice":"none"`, 400, "invalid_request_error", CodeBadRequest, "tool_choice", `none`, false},
		{"duplicate tool", "chat/completions", user + `,"tools":[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"a"}}],"verdict":{"select_tools":1}`, 400, "invalid_request_error", CodeBadRequest, "tools[1].function.name", `twice`, false},
		{"tools over the limit", "chat/completions", user + `,` + manyTools(catalog.MaxEntries+1, 0) + `,"verdict":{"select_tools":1}`, 400, "invalid_request_error", CodeLimit, "tools", `4097 entries, over the limit of 4096`, false},
		{"tool bytes over the limit", "chat/completions", user + `,` + manyTools(2, catalog.MaxBytes/2) + `,"verdict":{"select_tools":1}`, 400, "invalid_request_error", CodeLimit, "tools", `bytes of names and descriptions, over the limit`, false},
		{"no model loaded", "chat/completions", user, 503, "server_error", CodeNoModel, "", `no model is loaded`, true},
		{"completion: no prompt", "completions", `"max_tokens":2`, 400, "invalid_request_error", CodeBadRequest, "prompt", `required`, false},
		{"completion: max_tokens 0", "completions", `"prompt":"a","max_tokens":0`, 400, "invalid_request_error", CodeBadRequest, "max_tokens", `echo`, false},
		{"completion: logprobs over", "completions", `"prompt":"a","logprobs":6`, 400, "invalid_request_error", CodeBadRequest, "logprobs", `0..5`, false},
		{"completion: two prompts", "completions", `"prompt":["a","b"]`, 400, "invalid_request_error", CodeBadRequest, "prompt", `one prompt`, false},
		{"completion: token ids", "completions", `"prompt":[1,2]`, 400, "invalid_request_error", CodeBadRequest, "prompt", `token ids`, false},
		{"completion: best_of", "completions", `"prompt":"a","best_of":3`, 400, "invalid_request_error", CodeBadRequest, "best_of", `best_of = 1`, false},
		{"completion: suffix", "completions", `"prompt":"a","suffix":"b"`, 400, "invalid_request_error", CodeBadRequest, "suffix", `not supported`, false},
		{"completion: media token", "completions", `"prompt":"a <start_of_image>"`, 400, "invalid_request_error", CodeBadRequest, "", `attached as media`, false},
		{"completion: unknown model", "completions", `"model":"davinci","prompt":"a"`, 404, "not_found_error", CodeUnknownModel, "", `"davinci"`, false},
	} {
		base := ts.URL
		if c.bare {
			base = bare.URL
		}
		body := "{" + c.body + "}"
		if !strings.Contains(c.body, `"model"`) {
			body = `{"model":"builtin",` + c.body + "}"
		}
		resp, b := call(t, "POST", base+"/v1/"+c.path, body, nil)
		if resp.StatusCode != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, resp.StatusCode, b, c.status)
			continue
		}
		e := openAIErrorOf(t, b)
		param := ""
		if e.Param != nil {
			param = *e.Param
		}
		if e.Type != c.typ || e.Code != c.code || param != c.param || !strings.Contains(e.Message, c.msg) {
			t.Errorf("%s: %s; want %s %s param %q, message with %q", c.name, b, c.typ, c.code, c.param, c.msg)
		}
	}
	// Wrong methods and routes of OpenAI's paths answer in its shape.
	resp, b := call(t, "POST", ts.URL+"/v1/models", "{}", nil)
	if e := openAIErrorOf(t, b); resp.StatusCode != 405 || e.Code != CodeMethod || resp.Header.Get("Allow") != "GET" {
		t.Errorf("POST /v1/models: %d %s", resp.StatusCode, b)
	}
}

// manyTools: "tools" with n functions, each with a description of desc bytes.
func manyTools(n, desc int) string {
	d := strings.Repeat("x", desc)
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`{"type":"function","function":{"name":"t%d","description":%q}}`, i, d)
	}
	return `"tools":[` + strings.Join(parts, ",") + `]`
}

func manyBools(n int) string {
	var parts []string
	for i := range n {
		parts = append(parts, `"b`+strings.Repeat("x", i)+`":{"type":"boolean"}`)
	}
	return strings.Join(parts, ",")
}

// TestBusy: a full queue is 503 with Retry-After, an OpenAI server_error.
func TestBusy(t *testing.T) {
	h := &Handler{log: logrus.New()}
	w := httptest.NewRecorder()
	h.failOpenAI(w, errors.Join(errors.New("x"), session.ErrQueueFull))
	e := openAIErrorOf(t, w.Body.Bytes())
	if w.Code != 503 || w.Header().Get("Retry-After") != "1" || e.Code != CodeBusy || e.Type != "server_error" {
		t.Errorf("%d %v %s", w.Code, w.Header(), w.Body)
	}
}

// TestStructuredOutput: a json_schema is answered by the scorer: the content
// follows the JSON Schema (types, an array of the labels), is the scorer's
// answer for the equivalent Verdict schema, and the verdict field holds its
// distributions; streamed, the same content and a verdict in the last
// chunk.
func TestStructuredOutput(t *testing.T) {
	ts, _, _ := newAPI(t, true)
	js := `{"type":"object","additionalProperties":false,"required":["team","urgent","anger","issues","tools","size"],
	 "$defs":{"Team":{"type":"string","enum":["billing","tech"],"title":"Team"}},
	 "properties":{
	  "team":{"$ref":"#/$defs/Team","description":"Which team?"},
	  "urgent":{"type":"boolean","description":"Is this urgent?"},
	  "anger":{"type":"integer","minimum":1,"maximum":5,"description":"How angry, 1 to 5?"},
	  "issues":{"type":"array","items":{"type":"string","enum":["late","broken","refund"]},"uniqueItems":true,"description":"Which problems?"},
	  "tools":{"type":"array","items":{"enum":["a","b","c"]},"minItems":2,"maxItems":2,"description":"Which two tools?"},
	  "size":{"anyOf":[{"const":"small","description":"under 1 kg"},{"const":"large","description":"over 1 kg"}],"title":"Parcel size"}}}`
	verdictSchema := `{"instructions":"You sort tickets.","fields":[
	 {"name":"team","question":"Which team?","type":"choice","options":["billing","tech"]},
	 {"name":"urgent","question":"Is this urgent?","type":"bool"},
	 {"name":"anger","question":"How angry, 1 to 5?","type":"score","levels":["1","2","3","4","5"]},
	 {"name":"issues","question":"Which problems?","type":"independent","labels":["late","broken","refund"]},
	 {"name":"tools","question":"Which two tools?","type":"catalog","entries":["a","b","c"],"k":2},
	 {"name":"size","question":"Parcel size","type":"choice","options":{"small":"under 1 kg","large":"over 1 kg"}}]}`
	text := "My parcel is late and broken!"
	body := `{"model":"builtin","messages":[{"role":"system","content":"You sort tickets."},{"role":"user","content":"` + text + `"}],
	 "response_format":{"type":"json_schema","json_schema":{"name":"ticket","strict":true,"schema":` + js + `}}}`
	var one chatResp
	if st, b := post(t, ts.URL+"/v1/chat/completions", body, &one); st != 200 {
		t.Fatalf("%d %s", st, b)
	}
	content := *one.Choices[0].Message.Content
	var answer struct {
		Team   string   `json:"team"`
		Urgent *bool    `json:"urgent"`
		Anger  int      `json:"anger"`
		Issues []string `json:"issues"`
		Tools  []string `json:"tools"`
		Size   string   `json:"size"`
	}
	dec := json.NewDecoder(strings.NewReader(content))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&answer); err != nil || answer.Urgent == nil || answer.Anger < 1 || answer.Anger > 5 || answer.Issues == nil ||
		len(answer.Tools) != 2 || answer.Tools[0] == answer.Tools[1] || (answer.Size != "small" && answer.Size != "large") {
		t.Fatalf("content %s does not follow the schema: %v", content, err)
	}
	if one.Choices[0].FinishReason != FinishStop || one.Usage.CompletionTokens == 0 || one.Verdict == nil || one.Verdict.Score == nil || one.Verdict.Score["answer"] == nil {
		t.Fatalf("%+v", one)
	}
	var direct map[string]any
	if st, b := post(t, ts.URL+"/v1/verdict/score", `{"schema":`+verdictSchema+`,"input":{"text":"`+text+`"}}`, &direct); st != 200 {
		t.Fatalf("%d %s", st, b)
	}
	got, want := one.Verdict.Score, direct
	gotFields, wantFields := got["fields"].([]any), want["fields"].([]any)
	if len(gotFields) != len(wantFields) || got["prompt_tokens"] != want["prompt_tokens"] {
		t.Fatalf("verdict %v, the scorer's %v", got, want)
	}
	for i := range gotFields {
		g, w := gotFields[i].(map[string]any), wantFields[i].(map[string]any)
		for _, k := range []string{"elapsed_ms", "catalog_timing"} {
			delete(g, k)
			delete(w, k)
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("field %d: %v, the scorer's %v", i, g, w)
		}
	}
	wantAnswer := want["answer"].(map[string]any)
	var yes []string
	for _, l := range wantFields[3].(map[string]any)["labels"].([]any) {
		if l := l.(map[string]any); l["p_yes"].(float64) > 0.5 {
			yes = append(yes, l["label"].(string))
		}
	}
	if answer.Team != wantAnswer["team"] || *answer.Urgent != wantAnswer["urgent"] || float64(answer.Anger) != wantAnswer["anger"] ||
		strings.Join(answer.Issues, ",") != strings.Join(yes, ",") || answer.Size != wantAnswer["size"] {
		t.Errorf("content %s, the scorer's answer %v", content, wantAnswer)
	}

	streamed, chunks, finish := chatChunks(t, ts.URL+"/v1/chat/completions", strings.TrimSuffix(body, "}")+`,"stream":true}`)
	if streamed != content || finish != FinishStop || chunks[len(chunks)-1].Verdict == nil || chunks[len(chunks)-1].Verdict.Score == nil {
		t.Errorf("streamed %q (%s), without streaming %q", streamed, finish, content)
	}
}

// TestSchemaMapping: how JSON Schemas map onto scorer fields, and what is
// refused, naming the part.
func TestSchemaMapping(t *testing.T) {
	const root = "response_format.json_schema.schema"
	for _, c := range []struct {
		name, schema string
		kinds        string // the fields' kinds, with their options
		err          string
	}{
		{"enum", `{"type":"object","properties":{"a":{"type":"string","enum":["x","y"]}}}`, "a:choice[x y]", ""},
		{"enum without type", `{"properties":{"a":{"enum":["x","y"]}}}`, "a:choice[x y]", ""},
		{"bool", `{"type":"object","properties":{"a":{"type":"boolean"}}}`, "a:bool[]", ""},
		{"range", `{"type":"object","properties":{"a":{"type":"integer","minimum":0,"maximum":3}}}`, "a:score[0 1 2 3]", ""},
		{"exclusive range", `{"type":"object","properties":{"a":{"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":3}}}`, "a:score[1 2]", ""},
		{"integer enum, sorted", `{"type":"object","properties":{"a":{"type":"integer","enum":[5,1,3]}}}`, "a:score[1 3 5]", ""},
		{"number enum", `{"type":"object","properties":{"a":{"type":"number","enum":[0.5,0.25]}}}`, "a:score[0.25 0.5]", ""},
		{"labels", `{"type":"object","properties":{"a":{"type":"array","items":{"type":"string","enum":["x","y"]}}}}`, "a:independent[x y]", ""},
		{"exactly k", `{"type":"object","properties":{"a":{"type":"array","items":{"enum":["x","y","z"]},"minItems":2,"maxItems":2,"uniqueItems":true}}}`, "a:catalog[x y z]", ""},
		{"anyOf consts", `{"type":"object","properties":{"a":{"oneOf":[{"const":"x","description":"ex"},{"const":"y"}]}}}`, "a:choice[x y]", ""},
		{"ref", `{"type":"object","properties":{"a":{"$ref":"#/definitions/E"}},"definitions":{"E":{"type":"string","enum":["x","y"]}}}`, "a:choice[x y]", ""},
		{"order kept", `{"type":"object","properties":{"z":{"type":"boolean"},"a":{"type":"boolean"}}}`, "z:bool[] a:bool[]", ""},
		{"string", `{"type":"object","properties":{"name":{"type":"string"}}}`, "", root + `.properties.name: type "string" without enum is not a decision Verdict can score`},
		{"number", `{"type":"object","properties":{"p":{"type":"number"}}}`, "", root + `.properties.p: type "number" without enum`},
		{"open integer", `{"type":"object","properties":{"p":{"type":"integer","minimum":0}}}`, "", root + `.properties.p: type "integer" needs minimum and maximum`},
		{"huge range", `{"type":"object","properties":{"p":{"type":"integer","minimum":0,"maximum":1000}}}`, "", "2 to 101 integer levels"},
		{"nullable", `{"type":"object","properties":{"p":{"type":["string","null"],"enum":["a","b"]}}}`, "", root + `.properties.p.type: ["string","null"]`},
		{"anyOf null", `{"type":"object","properties":{"p":{"anyOf":[{"const":"a"},{"type":"null"}]}}}`, "", root + `.properties.p.anyOf[1]: null is not a decision`},
		{"pattern", `{"type":"object","properties":{"p":{"type":"string","pattern":"a+"}}}`, "", root + `.properties.p: keyword "pattern"`},
		{"one value", `{"type":"object","properties":{"p":{"enum":["a"]}}}`, "", root + `.properties.p.enum: one value`},
		{"bounded labels", `{"type":"object","properties":{"p":{"type":"array","items":{"enum":["a","b","c"]},"maxItems":2}}}`, "", root + `.properties.p: minItems 0, maxItems 2`},
		{"array of strings", `{"type":"object","properties":{"p":{"type":"array","items":{"type":"string"}}}}`, "", root + `.properties.p.items: type "string" without enum`},
		{"dangling ref", `{"type":"object","properties":{"p":{"$ref":"#/$defs/Nope"}}}`, "", root + `.properties.p.$ref: "#/$defs/Nope" does not resolve`},
		{"not an object", `{"type":"array","items":{"type":"boolean"}}`, "", root + `.type: "array"`},
		{"no properties", `{"type":"object","properties":{}}`, "", root + `.properties: no properties`},
		{"open object", `{"type":"object","properties":{"a":{"type":"boolean"}},"additionalProperties":{"type":"string"}}`, "", root + `.additionalProperties`},
		// Hostile schemas: a $ref cycle through anyOf (it recursed until the
		// stack overflowed, killing the server), anyOf nested deep, enums
		// longer than any prompt, more properties than fields.
		{"ref cycle through anyOf", `{"type":"object","properties":{"p":{"$ref":"#/$defs/A"}},"$defs":{"A":{"anyOf":[{"$ref":"#/$defs/A"}]}}}`, "", "nested more than 8 deep"},
		{"ref cycle in items", `{"type":"object","properties":{"p":{"type":"array","items":{"$ref":"#/$defs/A"}}},"$defs":{"A":{"oneOf":[{"const":"x"},{"$ref":"#/$defs/A"}]}}}`, "", "nested more than 8 deep"},
		{"anyOf 8 deep", `{"type":"object","properties":{"p":` + nestedAnyOf(8) + `}}`, "p:choice[x y]", ""},
		{"anyOf 9 deep", `{"type":"object","properties":{"p":` + nestedAnyOf(9) + `}}`, "", "nested more than 8 deep"},
		{"enum at the limit", `{"type":"object","properties":{"p":{"enum":` + enumOf(maxOptions, `"o%d"`) + `}}}`, "p:choice[" + optionNames(maxOptions) + "]", ""},
		{"enum over the limit", `{"type":"object","properties":{"p":{"enum":` + enumOf(maxOptions+1, `"o%d"`) + `}}}`, "", root + `.properties.p.enum[8192]: more than 8192 options`},
		{"labels over the limit", `{"type":"object","properties":{"p":{"type":"array","items":{"enum":` + enumOf(maxOptions+1, `"o%d"`) + `}}}}`, "", "more than 8192 options"},
		{"levels over the limit", `{"type":"object","properties":{"p":{"type":"integer","enum":` + enumOf(maxOptions+1, `%d`) + `}}}`, "", root + `.properties.p.enum: 8193 levels, more than 8192`},
		{"duplicate far apart", `{"type":"object","properties":{"p":{"enum":` + strings.TrimSuffix(enumOf(100, `"o%d"`), "]") + `,"o7"]}}}`, "", root + `.properties.p.enum[100]: "o7" is listed twice`},
		// Past 2^53 v++ leaves v as it is: the range was counted out forever.
		{"range past 2^53", `{"type":"object","properties":{"p":{"type":"integer","minimum":1e17,"maximum":100000000000000064}}}`, "", root + `.properties.p: minimum 1e+17, maximum 1.0000000000000006e+17: the bounds must lie within ±(2^53 - 1)`},
		{"exclusive range past 2^53", `{"type":"object","properties":{"p":{"type":"integer","exclusiveMinimum":-100000000000000064,"maximum":-1e17}}}`, "", "within ±(2^53 - 1)"},
		{"range up to 2^53 - 1", `{"type":"object","properties":{"p":{"type":"integer","minimum":9007199254740989,"maximum":9007199254740991}}}`, "p:score[9007199254740989 9007199254740990 9007199254740991]", ""},
		{"range up to 2^53", `{"type":"object","properties":{"p":{"type":"integer","minimum":9007199254740990,"maximum":9007199254740992}}}`, "", "within ±(2^53 - 1)"},
		{"too many properties", `{"type":"object","properties":{` + manyProps(scorer.MaxFields+1) + `}}`, "", "named fields: 33 exceeds the limit of 32"},
	} {
		s, _, err := mapJSONSchema(json.RawMessage(c.schema), "")
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want one with %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var got []string
		for _, f := range s.Fields {
			var opts []string
			for _, o := range f.Options {
				opts = append(opts, o.Name)
			}
			got = append(got, f.Name+":"+string(f.Kind)+"["+strings.Join(opts, " ")+"]")
		}
		if strings.Join(got, " ") != c.kinds {
			t.Errorf("%s: %s, want %s", c.name, strings.Join(got, " "), c.kinds)
		}
	}
}

// nestedAnyOf is a choice of x and y written inside depth anyOfs.
func nestedAnyOf(depth int) string {
	s := `{"anyOf":[{"const":"x"},{"const":"y"}]}`
	for i := 1; i < depth; i++ {
		s = `{"anyOf":[` + s + `]}`
	}
	return s
}

// enumOf is a JSON list of n values, each format with its index.
func enumOf(n int, format string) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(format, i)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// optionNames are enumOf's strings' names, space-separated.
func optionNames(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("o%d", i)
	}
	return strings.Join(parts, " ")
}

// manyProps are n boolean properties.
func manyProps(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"b%d":{"type":"boolean"}`, i)
	}
	return strings.Join(parts, ",")
}

// TestToolSelection: with verdict.select_tools, the catalog decoder picks
// exactly k distinct tools, those session.Select (verdict catalog's decode)
// picks, answered as tool calls with each step's distribution in the
// verdict field; streamed, the same calls.
func TestToolSelection(t *testing.T) {
	ts, svc, _ := newAPI(t, true)
	names := []string{"refund_order", "track_parcel", "reset_password", "close_account", "talk_to_human"}
	var tools []string
	for _, n := range names {
		tools = append(tools, `{"type":"function","function":{"name":"`+n+`","description":"`+strings.ReplaceAll(n, "_", " ")+`","parameters":{"type":"object","properties":{}}}}`)
	}
	for k := 1; k <= 3; k++ {
		body := `{"model":"builtin","messages":[{"role":"user","content":"Where is my parcel? I want my money back."}],"tools":[` +
			strings.Join(tools, ",") + `],"tool_choice":"auto","verdict":{"select_tools":` + string(rune('0'+k)) + `}}`
		var one chatResp
		if st, b := post(t, ts.URL+"/v1/chat/completions", body, &one); st != 200 {
			t.Fatalf("%d %s", st, b)
		}
		ch := one.Choices[0]
		if ch.FinishReason != "tool_calls" || ch.Message.Content != nil || len(ch.Message.ToolCalls) != k {
			t.Fatalf("k=%d: %+v", k, ch)
		}
		seen := map[string]bool{}
		for _, tc := range ch.Message.ToolCalls {
			if seen[tc.Function.Name] || !strings.Contains(strings.Join(names, " "), tc.Function.Name) || tc.Function.Arguments != "{}" ||
				tc.Type != "function" || !strings.HasPrefix(tc.ID, "call_") || tc.Index != nil {
				t.Errorf("k=%d: call %+v", k, tc)
			}
			seen[tc.Function.Name] = true
		}
		f := one.Verdict.Selection
		if f == nil || len(f.Names) != k || len(f.Steps) == 0 || f.PathProbability <= 0 || f.PathProbability > 1 ||
			f.Steps[len(f.Steps)-1].Pick != k-1 || one.Usage.CompletionTokens != f.Timings.Tokens {
			t.Fatalf("k=%d: verdict field %+v", k, f)
		}
		for i, tc := range ch.Message.ToolCalls {
			if tc.Function.Name != f.Names[i] {
				t.Errorf("k=%d: call %d is %s, the selection's %s", k, i, tc.Function.Name, f.Names[i])
			}
		}
		d, ctx, err := svc.Runs.Direct(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		var entries []catalog.Entry
		for _, n := range names {
			entries = append(entries, catalog.Entry{Name: n, Description: strings.ReplaceAll(n, "_", " ")})
		}
		direct, err := d.Session.Select(ctx, entries, "Where is my parcel? I want my money back.", k)
		d.Close()
		if err != nil || !reflect.DeepEqual(direct.Names, f.Names) {
			t.Errorf("k=%d: session.Select names %v (%v), the route's %v", k, direct.Names, err, f.Names)
		}
		_, chunks, finish := chatChunks(t, ts.URL+"/v1/chat/completions", strings.TrimSuffix(body, "}")+`,"stream":true}`)
		calls := chunks[0].Choices[0].Delta.ToolCalls
		if finish != "tool_calls" || len(calls) != k {
			t.Fatalf("k=%d, streamed: %s %+v", k, finish, chunks)
		}
		for i, tc := range calls {
			if tc.Index == nil || *tc.Index != i || tc.Function.Name != ch.Message.ToolCalls[i].Function.Name {
				t.Errorf("k=%d: streamed call %d %+v", k, i, tc)
			}
		}
	}
}

// TestCompletions: the legacy route completes a raw prompt; streamed, the
// same text; echo with max_tokens 0 scores the prompt (its first token,
// <bos>, has null), and a generated token's logprob is its position's in
// the scored prompt and completion.
func TestCompletions(t *testing.T) {
	ts, _, _ := newAPI(t, true)
	url := ts.URL + "/v1/completions"
	body := `{"model":"builtin","prompt":"The capital of France is","max_tokens":6,"temperature":0,"logprobs":2}`
	var one Completion
	if st, b := post(t, url, body, &one); st != 200 {
		t.Fatalf("%d %s", st, b)
	}
	ch := one.Choices[0]
	if one.Object != "text_completion" || !strings.HasPrefix(one.ID, "cmpl-") || ch.FinishReason == nil || one.Usage.CompletionTokens == 0 ||
		ch.Logprobs == nil || len(ch.Logprobs.Tokens) == 0 || len(ch.Logprobs.TopLogprobs) != len(ch.Logprobs.Tokens) {
		t.Fatalf("%+v", one)
	}
	data, done := streamData(t, url, strings.TrimSuffix(body, "}")+`,"stream":true,"stream_options":{"include_usage":true}}`)
	var streamed strings.Builder
	for _, d := range data {
		var c Completion
		json.Unmarshal(d, &c)
		for _, x := range c.Choices {
			streamed.WriteString(x.Text)
		}
	}
	if !done || streamed.String() != ch.Text {
		t.Errorf("streamed %q (done %v), without streaming %q", streamed.String(), done, ch.Text)
	}

	// Echo: the prompt and the completion scored together.
	full := "The capital of France is" + ch.Text
	var echo Completion
	if st, b := post(t, url, `{"model":"builtin","prompt":`+jsonQuote(full)+`,"max_tokens":0,"echo":true,"logprobs":2}`, &echo); st != 200 {
		t.Fatalf("%d %s", st, b)
	}
	lp := echo.Choices[0].Logprobs
	if echo.Choices[0].Text != full || lp == nil || lp.Tokens[0] != "<bos>" || lp.TokenLogprobs[0] != nil || lp.TopLogprobs[0] != nil ||
		echo.Usage.CompletionTokens != 0 || echo.Usage.PromptTokens != len(lp.Tokens) {
		t.Fatalf("echo: %+v", echo)
	}
	for i := 1; i < len(lp.Tokens); i++ {
		if lp.TokenLogprobs[i] == nil || *lp.TokenLogprobs[i] > 0 || len(lp.TopLogprobs[i]) != 2 || lp.TextOffset[i] < lp.TextOffset[i-1] {
			t.Errorf("echo token %d: %q %v %v %d", i, lp.Tokens[i], lp.TokenLogprobs[i], lp.TopLogprobs[i], lp.TextOffset[i])
		}
	}
	gen := ch.Logprobs.TokenLogprobs
	if n := len(lp.Tokens); n >= len(gen) && strings.Join(lp.Tokens[n-len(gen):], "") == strings.Join(ch.Logprobs.Tokens, "") {
		for i, v := range gen {
			if e := lp.TokenLogprobs[n-len(gen)+i]; math.Abs(*e-*v) > 1e-4 {
				t.Errorf("token %d: generated with logprob %v, scored %v", i, *v, *e)
			}
		}
	} else {
		t.Logf("the completion does not tokenize back the same: %q / %q", lp.Tokens, ch.Logprobs.Tokens)
	}
	// Echo with generation: the prompt, then the completion.
	var both Completion
	if st, b := post(t, url, `{"model":"builtin","prompt":"Hello","max_tokens":3,"echo":true,"temperature":0}`, &both); st != 200 || !strings.HasPrefix(both.Choices[0].Text, "Hello") {
		t.Errorf("echo with generation: %d %s", st, b)
	}
}

func jsonQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestOpenAIModels: GET /v1/models lists the models in OpenAI's shape,
// and GET /v1/models/{id} gives one.
func TestOpenAIModels(t *testing.T) {
	ts, _, _ := newAPI(t, true)
	resp, b := call(t, "GET", ts.URL+"/v1/models", "", nil)
	var list OpenAIModelList
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&list); err != nil || resp.StatusCode != 200 || list.Object != "list" || len(list.Data) == 0 {
		t.Fatalf("%d %s %v", resp.StatusCode, b, err)
	}
	m := list.Data[0]
	if m.ID != "builtin" || m.Object != "model" || m.Created == 0 || m.OwnedBy == "" {
		t.Errorf("first model %+v, want the loaded built-in one", m)
	}
	var one OpenAIModel
	if resp, b := call(t, "GET", ts.URL+"/v1/models/builtin", "", nil); resp.StatusCode != 200 || json.Unmarshal(b, &one) != nil || one != m {
		t.Errorf("GET /v1/models/builtin: %d %s", resp.StatusCode, b)
	}
	resp, b = call(t, "GET", ts.URL+"/v1/models/gpt-4o", "", nil)
	if e := openAIErrorOf(t, b); resp.StatusCode != 404 || e.Code != CodeUnknownModel || e.Type != "not_found_error" {
		t.Errorf("GET /v1/models/gpt-4o: %d %s", resp.StatusCode, b)
	}
	// The earlier paths of Verdict's routes still answer.
	for _, path := range []string{"/v1/score", "/v1/verdict/score"} {
		if resp, b := call(t, "POST", ts.URL+path, `{"schema":`+boolSchema+`,"input":{"text":"hi"}}`, nil); resp.StatusCode != 200 {
			t.Errorf("%s: %d %s", path, resp.StatusCode, b)
		}
	}
}
