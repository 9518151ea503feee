package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestTooLongForModel: a prompt longer than the model's positions (the
// built-in model's 4096) is the request's fault: 400 limit_exceeded with
// the sizes, on every route that runs one, not a 500 engine_error.
func TestTooLongForModel(t *testing.T) {
	ts, _, _ := newAPI(t, true)
	long := strings.Repeat("word ", 6000) // about 6000 tokens
	q, _ := json.Marshal(long)
	tools := make([]string, 3)
	for i := range tools {
		tools[i] = fmt.Sprintf(`{"type":"function","function":{"name":"t%d","description":%s}}`, i, q)
	}
	for _, c := range []struct {
		name, path, body string
		openAI           bool
	}{
		{"chat", "/v1/chat/completions", `{"messages":[{"role":"user","content":` + string(q) + `}],"max_tokens":2}`, true},
		{"completions", "/v1/completions", `{"prompt":` + string(q) + `,"max_tokens":2}`, true},
		{"scored prompt", "/v1/completions", `{"prompt":` + string(q) + `,"max_tokens":0,"echo":true,"logprobs":1}`, true},
		{"tool choice", "/v1/chat/completions", `{"messages":[{"role":"user","content":"pick"}],"tools":[` + strings.Join(tools, ",") + `],"verdict":{"select_tools":1}}`, true},
		{"score", "/v1/verdict/score", `{"schema":` + boolSchema + `,"input":{"text":` + string(q) + `}}`, false},
		{"generate", "/v1/verdict/generate", `{"prompt":` + string(q) + `,"max_tokens":2}`, false},
	} {
		status, b := post(t, ts.URL+c.path, c.body, nil)
		code, msg := "", ""
		if c.openAI {
			e := openAIErrorOf(t, b)
			code, msg = e.Code, e.Message
		} else {
			e := errorOf(t, b)
			code, msg = e.Code, e.Message
		}
		if status != 400 || code != CodeLimit || !strings.Contains(msg, "4096") {
			t.Errorf("%s: %d %s %q, want 400 %s naming the model's 4096 positions", c.name, status, code, msg, CodeLimit)
		}
	}
}
