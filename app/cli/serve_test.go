package cli

import (
	"bufio"
	"context"
	"io"
	"net/http"
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
	url := strings.TrimSpace(strings.TrimPrefix(line, "Verdict is serving on "))
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("first line %q", line)
	}
	resp, err := http.Post(url+"api/Models/Info", "application/json", strings.NewReader("[]"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"state":"none"`) {
		t.Errorf("Models.Info = %s", b)
	}
	// An open event stream does not hold up the shutdown.
	ev, err := http.Get(url + "api/events")
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Body.Close()
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
	for _, args := range [][]string{{"extra"}, {"--log-level", "loud"}, {"--addr", "256.0.0.1:99999", "--model", "none", "--settings="}} {
		if err := serveCmd(context.Background(), args, io.Discard, io.Discard); err == nil {
			t.Errorf("serve %v: no error", args)
		}
	}
}
