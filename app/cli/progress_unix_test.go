//go:build unix

package cli

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"verdict/engine/fixture/testmodel"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestCtrlCStopsACommand: an interrupt stops a running command at once and
// says so: generate keeps what it generated and exits 0, any other command
// exits with status 130.
func TestCtrlCStopsACommand(t *testing.T) {
	testmodel.Tokenizer(t)
	for _, c := range []struct {
		args          []string
		running, want string // a sign it runs; what it says once stopped
		code          int
	}{
		{[]string{"generate", "--model", "builtin", "--prompt", "hi", "--max-tokens", "100000", "--temperature", "1"},
			"", "interrupted after", 0},
		{[]string{"bench", "catalog", "--model", "builtin", "--batches", "1,1,1,1,1,1,1,1"},
			"builtin: measuring", "verdict bench: stopped", 130},
	} {
		var out, errOut syncBuffer
		code := make(chan int, 1)
		go func() { code <- Main(c.args, &out, &errOut) }()
		deadline := time.Now().Add(60 * time.Second)
		for (c.running == "" && out.String() == "") || (c.running != "" && !strings.Contains(errOut.String(), c.running)) {
			if time.Now().After(deadline) {
				t.Fatalf("%v: not running; stderr %q", c.args, errOut.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		sent := time.Now()
		if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-code:
			if got != c.code || !strings.Contains(errOut.String(), "Ctrl-C again") || !strings.Contains(errOut.String(), c.want) {
				t.Errorf("%v: exit %d, stderr %q", c.args, got, errOut.String())
			}
			if d := time.Since(sent); d > 2*time.Second {
				t.Errorf("%v: stopped %v after the interrupt", c.args, d)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%v: the interrupt did not stop the command", c.args)
		}
	}
}
