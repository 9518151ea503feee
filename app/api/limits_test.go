package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
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

// TestStreamDisconnectFrees: clients of the OpenAI routes that go away
// mid-stream leave nothing behind in the model's scheduler: once their
// requests end, no request runs or waits (their key/value blocks are
// released with them), and a new request is answered.
func TestStreamDisconnectFrees(t *testing.T) {
	ts, svc, _ := newAPI(t, true)
	d, _, err := svc.Runs.Direct(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	s := d.Session
	d.Close()
	for _, c := range []struct{ name, path, body string }{
		{"chat", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Go on forever."}],"max_tokens":4096,"stream":true,"logprobs":true,"top_logprobs":5}`},
		{"completions", "/v1/completions", `{"prompt":"Go on forever.","max_tokens":4096,"stream":true,"logprobs":5}`},
	} {
		const clients = 8
		before := s.SchedStats().Rows
		var wg sync.WaitGroup
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+c.path, strings.NewReader(c.body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Errorf("%s: %v", c.name, err)
					return
				}
				defer resp.Body.Close()
				br := bufio.NewReader(resp.Body)
				for n := 0; n < 3; { // a few chunks, then away
					line, err := br.ReadString('\n')
					if err != nil {
						t.Errorf("%s: the stream ended early: %v", c.name, err)
						return
					}
					if strings.HasPrefix(line, "data: ") {
						n++
					}
				}
			}()
		}
		wg.Wait()
		st := s.SchedStats()
		for deadline := time.Now().Add(20 * time.Second); (st.Running > 0 || st.Waiting > 0) && time.Now().Before(deadline); st = s.SchedStats() {
			time.Sleep(5 * time.Millisecond)
		}
		if st.Running != 0 || st.Waiting != 0 {
			t.Fatalf("%s: %d requests still run and %d wait after their %d clients went away", c.name, st.Running, st.Waiting, clients)
		}
		// Generations run to the end would have taken 4096 rows each.
		if rows := st.Rows - before; rows >= clients*4096/2 {
			t.Errorf("%s: %d rows run for %d clients that went away after 3 chunks: the generations went on", c.name, rows, clients)
		}
		if status, b := post(t, ts.URL+c.path, strings.Replace(strings.Replace(c.body, `"stream":true`, `"stream":false`, 1), "4096", "2", 1), nil); status != 200 {
			t.Fatalf("%s: a request after the disconnects: %d %s", c.name, status, b)
		}
	}
}
