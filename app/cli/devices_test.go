package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"verdict/app"
	"verdict/engine/bench"
	"verdict/engine/fixture/testmodel"
)

// --devices names a replica's device on the commands that run one model,
// and refuses several there; with --device, or an unknown name, it is a
// usage error; all without a GPU runs on the CPU and says why.
func TestDevicesFlag(t *testing.T) {
	testmodel.Tokenizer(t)
	t.Setenv("VERDICT_CUDA_LIB", filepath.Join(t.TempDir(), "libverdict_cuda.so"))
	gen := []string{"generate", "--model", "builtin", "--prompt", "Hello", "--max-tokens", "2"}
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"--devices", "cpu"}, 0, ""},
		{[]string{"--devices", "all"}, 0, ""}, // the note goes to os.Stderr, as --device auto's
		{[]string{"--devices", "cpu,cpu"}, 2, "--devices cpu,cpu names 2 devices: this command runs one model replica (serve, score-file and bench serve"},
		{[]string{"--devices", "cpu", "--device", "cpu"}, 2, "give --device or --devices, not both"},
		{[]string{"--devices", "cuda:1"}, 2, "--devices cuda:1: cuda: no usable libverdict_cuda.so"},
		{[]string{"--devices", "tpu"}, 2, `unknown device "tpu"`},
		{[]string{"--devices", "cuda:0,cuda"}, 2, "cuda:0 twice"},
	} {
		code, out, errOut := run(append(gen, tc.args...)...)
		if code != tc.code || !strings.Contains(errOut, tc.stderr) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", tc.args, code, out, errOut)
		}
	}
	for _, c := range []string{"score", "score-file", "calibrate", "train-head", "generate", "catalog", "bench", "bench serve", "serve", "mcp"} {
		_, out, errOut := run(append(strings.Fields(c), "--help")...)
		if !strings.Contains(out+errOut, "-devices") {
			t.Errorf("%s --help lists no --devices", c)
		}
	}
	in := writeInput(t, t.TempDir())
	if code, out, errOut := run("score-file", "--schema", ticketSchema, "--input", in, "--output", filepath.Join(t.TempDir(), "o.jsonl"),
		"--devices", "all"); code != 0 || !strings.Contains(out, "scored 11") || !strings.Contains(errOut, "--devices all: using the CPU: cuda: no usable libverdict_cuda.so") {
		t.Errorf("score-file --devices all: exit %d, %s %s", code, out, errOut)
	}
	if code, _, errOut := run("score-file", "--schema", ticketSchema, "--input", in, "--output", filepath.Join(t.TempDir(), "o.jsonl"),
		"--devices", "cpu,cuda:x"); code != 2 || !strings.Contains(errOut, "want cuda:N") {
		t.Errorf("score-file --devices cpu,cuda:x: exit %d, %s", code, errOut)
	}
}

// TestScoreFileDevices: score-file on three replicas (fake devices: three
// CPU replicas) writes the log one device writes, record for record and
// bit for bit, each replica scoring some of the records.
func TestScoreFileDevices(t *testing.T) {
	testmodel.Tokenizer(t)
	dir := t.TempDir()
	in := writeInput(t, dir)
	base := []string{"score-file", "--model", "builtin", "--schema", ticketSchema, "--input", in}
	single := filepath.Join(dir, "single.jsonl")
	if code, out, errOut := run(append(base, "--output", single)...); code != 0 || !strings.Contains(out, "scored 11 (2 errors)") {
		t.Fatalf("one device: exit %d, %s %s", code, out, errOut)
	}
	if _, _, errOut := run(append(base, "--output", filepath.Join(dir, "again.jsonl"))...); strings.Contains(errOut, "replica") {
		t.Errorf("one device says replicas: %s", errOut)
	}
	for _, c := range []string{"0", "1"} {
		p := filepath.Join(dir, "replicas-"+c+".jsonl")
		code, out, errOut := run(append(base, "--output", p, "--devices", "cpu,cpu,cpu", "--concurrency", c)...)
		if code != 0 || !strings.Contains(out, "scored 11 (2 errors)") || !strings.Contains(errOut, "3 replicas of ") {
			t.Fatalf("--devices cpu,cpu,cpu --concurrency %s: exit %d, %s %s", c, code, out, errOut)
		}
		if got, want := stable(t, p), stable(t, single); got != want {
			t.Errorf("--concurrency %s: three replicas:\n%s\nwant (one device)\n%s", c, got, want)
		}
		// 9 records reach the scorer (the 2 bad ones do not): spread.
		total := 0
		for i, m := range regexp.MustCompile(`replica (\d) \(cpu\): (\d+) requests`).FindAllStringSubmatch(errOut, -1) {
			n, _ := strconv.Atoi(m[2])
			if m[1] != strconv.Itoa(i) || n == 0 {
				t.Errorf("--concurrency %s: %q: the records were not spread", c, m[0])
			}
			total += n
		}
		if total != 9 || strings.Count(errOut, "requests (") != 3 {
			t.Errorf("--concurrency %s: %d records over the replicas: %s", c, total, errOut)
		}
	}
}

// TestBenchServeDevices: bench serve on two replicas reports each one's
// share of every level and of the mixed load, and their sum; one device's
// report has no such lines.
func TestBenchServeDevices(t *testing.T) {
	testmodel.Tokenizer(t)
	args := []string{"bench", "serve", "--model", "builtin", "--records", "12", "--concurrency", "1,4", "--clients", "4",
		"--duration", "300ms", "--gen-tokens", "4", "--check", "8"}
	code, out, errOut := run(append(args, "--devices", "cpu,cpu", "--json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var r bench.ServeReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	for _, l := range r.Levels {
		if len(l.Devices) != 2 || l.Devices[0].Requests+l.Devices[1].Requests != 12 || l.Devices[0].Requests == 0 || l.Devices[1].Requests == 0 {
			t.Errorf("concurrency %d: devices %+v", l.Concurrency, l.Devices)
		}
		if sum := l.Devices[0].PerSec + l.Devices[1].PerSec; sum < 0.99*l.RecordsPerSec || sum > 1.01*l.RecordsPerSec {
			t.Errorf("concurrency %d: the devices' rates add up to %.1f, the level's %.1f", l.Concurrency, sum, l.RecordsPerSec)
		}
	}
	if r.Mixed == nil || len(r.Mixed.Devices) != 2 || len(r.Replicas) != 2 || !strings.Contains(errOut, "the scheduler's check: 8 requests") {
		t.Errorf("mixed %+v, replicas %+v; stderr %s", r.Mixed, r.Replicas, errOut)
	}
	code, out, errOut = run(append(args, "--devices", "cpu,cpu")...)
	if code != 0 || strings.Count(out, "replica 0 (cpu)") != 3 || strings.Count(out, "sum of 2 devices") != 3 {
		t.Errorf("text report: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = run(args...)
	if code != 0 || strings.Contains(out, "replica") || strings.Contains(out, "sum of") {
		t.Errorf("one device: exit %d\n%s%s", code, out, errOut)
	}
}

// TestServeDevices: serve --devices loads a replica on each device (two
// CPU replicas here), the model's info lists them, and the API's requests
// are spread over them, answered as on one device.
func TestServeDevices(t *testing.T) {
	testmodel.Tokenizer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- serveCmd(ctx, []string{"--addr", "127.0.0.1:0", "--model", "builtin", "--settings=", "--log-level", "warning", "--devices", "cpu,cpu"}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr)
	url, token, _ := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "Verdict is serving on ")), "#token=")
	post := func(path, body string, header string) string {
		t.Helper()
		req, _ := http.NewRequest("POST", url+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(header, token)
		if header == "Authorization" {
			req.Header.Set(header, "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	var info app.ModelInfo
	for deadline := time.Now().Add(60 * time.Second); info.State != app.ModelReady; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the model is %s: %s", info.State, info.Error)
		}
		json.Unmarshal([]byte(post("api/Models/Info", "[]", "X-Verdict-Token")), &info)
	}
	if len(info.Replicas) != 2 || info.Replicas[1].Device.Requested != "cpu" || !info.Replicas[1].Up {
		t.Fatalf("replicas %+v", info.Replicas)
	}
	body := `{"schema": {"fields": [{"name": "urgent", "question": "Is this urgent?", "type": "bool"}]}, "input": {"text": "The site is down!"}}`
	var answers []string
	for range 4 {
		var r map[string]any
		json.Unmarshal([]byte(post("v1/verdict/score", body, "Authorization")), &r)
		delete(r, "timings")
		b, _ := json.Marshal(r["fields"].([]any)[0].(map[string]any)["decisions"])
		answers = append(answers, string(b))
	}
	for _, a := range answers[1:] {
		if a != answers[0] {
			t.Errorf("answers differ between replicas:\n%s\n%s", a, answers[0])
		}
	}
	json.Unmarshal([]byte(post("api/Models/Info", "[]", "X-Verdict-Token")), &info)
	if len(info.Replicas) != 2 || info.Replicas[0].Requests != 2 || info.Replicas[1].Requests != 2 {
		t.Errorf("after 4 requests: replicas %+v", info.Replicas)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
}
