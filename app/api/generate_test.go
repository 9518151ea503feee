package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// sseEvent is one server-sent event.
type sseEvent struct{ name, data string }

// readEvents parses a server-sent event stream until it ends.
func readEvents(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.name != "" || cur.data != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data += strings.TrimPrefix(line, "data: ")
		default:
			t.Errorf("unexpected line %q", line)
		}
	}
	return out
}

// TestGenerate: for the same seed, the streamed pieces put together are the
// text of the generation that does not stream, with the same finish; the
// stream is asked for by "stream" or by the Accept header.
func TestGenerate(t *testing.T) {
	ts, _, _ := newAPI(t, true)
	for _, c := range []struct {
		name, body string
	}{
		{"sampled", `"prompt":"Tell me a story.","max_tokens":24,"temperature":0.9,"top_k":40,"top_p":0.9,"seed":7`},
		{"greedy, messages", `"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello"}],"max_tokens":12`},
		{"one token", `"prompt":"x","max_tokens":1,"seed":3,"temperature":1`},
	} {
		resp, b := call(t, "POST", ts.URL+"/v1/generate", "{"+c.body+"}", nil)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: %d %s %s", c.name, resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
		var one GenerateResponse
		if err := json.Unmarshal(b, &one); err != nil {
			t.Fatal(err)
		}
		if one.Tokens == 0 || one.PromptTokens == 0 || one.Timings.TotalMs <= 0 || !one.RandomWeights {
			t.Errorf("%s: %+v", c.name, one)
		}
		if one.FinishReason != FinishStop && one.FinishReason != FinishLength {
			t.Errorf("%s: finish %q", c.name, one.FinishReason)
		}
		for _, how := range []struct {
			body   string
			header map[string]string
		}{
			{"{" + c.body + `,"stream":true}`, nil},
			{"{" + c.body + "}", map[string]string{"Accept": "text/event-stream"}},
		} {
			req, _ := http.NewRequest("POST", ts.URL+"/v1/generate", strings.NewReader(how.body))
			req.Header.Set("Content-Type", "application/json")
			for k, v := range how.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("%s stream: %d %s", c.name, resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			events := readEvents(t, resp.Body)
			resp.Body.Close()
			var text strings.Builder
			var done *Done
			for i, ev := range events {
				switch ev.name {
				case "token":
					var p Piece
					if err := json.Unmarshal([]byte(ev.data), &p); err != nil || p.Text == "" {
						t.Errorf("%s: token event %q: %v", c.name, ev.data, err)
					}
					text.WriteString(p.Text)
				case "done":
					if i != len(events)-1 {
						t.Errorf("%s: done is event %d of %d", c.name, i+1, len(events))
					}
					done = &Done{}
					if err := json.Unmarshal([]byte(ev.data), done); err != nil {
						t.Fatal(err)
					}
				default:
					t.Errorf("%s: event %q %s", c.name, ev.name, ev.data)
				}
			}
			if done == nil {
				t.Fatalf("%s: no done event in %v", c.name, events)
			}
			if text.String() != one.Text || done.FinishReason != one.FinishReason || done.Tokens != one.Tokens || done.PromptTokens != one.PromptTokens {
				t.Errorf("%s: streamed %q (%s, %d tokens), not streamed %q (%s, %d tokens)", c.name, text.String(), done.FinishReason, done.Tokens, one.Text, one.FinishReason, one.Tokens)
			}
		}
	}
}

// TestGenerateDisconnect: a client that goes away stops its generation,
// streamed or not: the request ends soon after, long before max_tokens
// (4096 tokens take seconds on the built-in model) could be reached.
func TestGenerateDisconnect(t *testing.T) {
	ts, _, hook := newAPI(t, true)
	for _, stream := range []bool{true, false} {
		hook.Reset()
		ctx, cancel := context.WithCancel(context.Background())
		body := fmt.Sprintf(`{"prompt":"Go on forever.","max_tokens":4096,"temperature":1,"stream":%v}`, stream)
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/generate", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		got := make(chan error, 1)
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				got <- err
				return
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			for {
				line, err := br.ReadString('\n')
				if err != nil || strings.HasPrefix(line, "event: token") {
					got <- err
					return
				}
			}
		}()
		if stream {
			if err := <-got; err != nil {
				t.Fatalf("stream ended before a token: %v", err)
			}
		} else {
			// Without a stream nothing comes back before the end: wait
			// until the request holds the run slot (the log says so), and
			// a little more.
			for started, t1 := false, time.Now(); !started; time.Sleep(2 * time.Millisecond) {
				for _, e := range hook.AllEntries() {
					started = started || e.Message == "program request started"
				}
				if time.Since(t1) > 3*time.Second {
					for _, e := range hook.AllEntries() {
						t.Log(e.Message)
					}
					t.Fatal("the request did not start")
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		t0 := time.Now()
		cancel()
		for ended := false; !ended; time.Sleep(2 * time.Millisecond) {
			for _, e := range hook.AllEntries() {
				ended = ended || e.Message == "program request ended"
			}
			if !ended && time.Since(t0) > 2*time.Second {
				t.Fatalf("stream %v: the request still runs 2 s after the client went away", stream)
			}
		}
		freed := time.Since(t0)
		tokens := -1
		for _, e := range hook.AllEntries() {
			if e.Message == "generation stopped: the client went away" {
				tokens = e.Data["tokens"].(int)
			}
		}
		if tokens < 1 || tokens >= 4096 {
			t.Errorf("stream %v: the log says the stopped generation had %d tokens", stream, tokens)
		}
		t.Logf("stream %v: ended %v after the client went away, at %d tokens", stream, freed, tokens)
	}
}
