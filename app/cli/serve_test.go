package cli

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestServe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- serveCmd(ctx, []string{"--addr", "127.0.0.1:0", "--model", "none", "--settings=", "--log-level", "warning"}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr)
	printed := strings.TrimSpace(strings.TrimPrefix(line, "Verdict is serving on "))
	url, token, ok := strings.Cut(printed, "#token=")
	if !ok || !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.HasSuffix(url, "/") || len(token) != 32 {
		t.Fatalf("first line %q", line)
	}
	call := func(token string) (int, string) {
		req, _ := http.NewRequest("POST", url+"api/Models/Info", strings.NewReader("[]"))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Verdict-Token", token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	if code, b := call(token); code != 200 || !strings.Contains(b, `"state":"none"`) {
		t.Errorf("Models.Info = %d %s", code, b)
	}
	if code, b := call(""); code != http.StatusUnauthorized {
		t.Errorf("Models.Info without the token = %d %s", code, b)
	}
	// The API for programs, with the token as a bearer token.
	req, _ := http.NewRequest("GET", url+"v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"id":"builtin"`) {
		t.Errorf("GET /v1/models = %d %s", resp.StatusCode, b)
	}
	// Without the token, a path the router takes under /api/ is refused from
	// its header and the connection closed: the announced body is not
	// waited for.
	host := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/")
	raw, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	io.WriteString(raw, "POST /api/%2e%2e/x HTTP/1.1\r\nHost: "+host+"\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n[")
	raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(raw)
	if err != nil || !strings.HasPrefix(string(got), "HTTP/1.1 401") || !strings.Contains(string(got), "Connection: close") {
		t.Errorf("POST /api/%%2e%%2e/x without the token: %v %.200q", err, got)
	}
	// An open event stream does not hold up the shutdown.
	ev, err := http.Get(url + "api/events?token=" + token)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Body.Close()
	if ev.StatusCode != 200 {
		t.Errorf("events: %d", ev.StatusCode)
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

func TestServeUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"--log-level", "loud"}, "loud"},
		{[]string{"--device", "tpu", "--model", "none", "--settings="}, `--device: setting device: "tpu" is not one of auto, cpu, cuda`},
		{[]string{"--addr", "256.0.0.1:99999", "--model", "none", "--settings="}, "invalid port"},
		// Other machines only with an explicit flag.
		{[]string{"--addr", "0.0.0.0:0", "--model", "none", "--settings="}, "not a loopback address: pass --allow-remote"},
		{[]string{"--addr", ":0", "--model", "none", "--settings="}, "not a loopback address: pass --allow-remote"},
	} {
		err := serveCmd(context.Background(), c.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("serve %v: %v, want %q", c.args, err, c.want)
		}
	}
}

// TestServeHelp: --help names the API for programs and its documents.
func TestServeHelp(t *testing.T) {
	var out strings.Builder
	err := serveCmd(context.Background(), []string{"--help"}, io.Discard, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("serve --help: %v", err)
	}
	for _, want := range []string{"POST /v1/verdict/score", "POST /v1/verdict/generate", "GET  /v1/verdict/models", "POST /v1/chat/completions", "Authorization: Bearer", "docs/api.md", "docs/openapi.json", "-allow-remote"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("serve --help lacks %q:\n%s", want, out.String())
		}
	}
}

func TestServeURLAndHosts(t *testing.T) {
	bound := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4242}
	for _, c := range []struct{ addr, want string }{
		{"127.0.0.1:0", "http://127.0.0.1:4242/#token=T"},
		{"localhost:0", "http://localhost:4242/#token=T"},
		{"[::1]:0", "http://[::1]:4242/#token=T"},
		{"0.0.0.0:0", "http://127.0.0.1:4242/#token=T"},
		{":0", "http://127.0.0.1:4242/#token=T"},
	} {
		if got := serveURL(c.addr, bound, "T"); got != c.want {
			t.Errorf("serveURL(%s) = %s, want %s", c.addr, got, c.want)
		}
	}
	if hs := serveHosts("verdict.lan:8177", nil); len(hs) != 1 || hs[0] != "verdict.lan" {
		t.Errorf("hosts of a named address: %v", hs)
	}
	if hs := serveHosts("127.0.0.1:0", bound); len(hs) != 1 || hs[0] != "127.0.0.1" {
		t.Errorf("hosts of a loopback address: %v", hs)
	}
	if hs := serveHosts("0.0.0.0:8177", &net.TCPAddr{IP: net.IPv4zero}); len(hs) == 0 {
		t.Error("no hosts for all interfaces")
	}
}

// --device becomes the app's device setting, saved with the others.
func TestServeDevice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "settings.json")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- serveCmd(ctx, []string{"--addr", "127.0.0.1:0", "--model", "none", "--settings=" + path, "--log-level", "warning", "--device", "cpu"}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, pr)
	url, token, _ := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "Verdict is serving on ")), "#token=")
	req, _ := http.NewRequest("POST", url+"api/Settings/Get", strings.NewReader("[]"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Verdict-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"device":"cpu"`) {
		t.Errorf("Settings.Get = %s, want device cpu", b)
	}
	if f, err := os.ReadFile(path); err != nil || !strings.Contains(string(f), `"device": "cpu"`) {
		t.Errorf("settings file %s (%v), want device cpu", f, err)
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
