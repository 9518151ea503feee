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

// TestCtrlCStopsACommand: an interrupt stops a running command at once,
// which says so and exits with status 130.
func TestCtrlCStopsACommand(t *testing.T) {
	testmodel.Tokenizer(t)
	var out, errOut syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- Main([]string{"generate", "--model", "builtin", "--prompt", "hi", "--max-tokens", "100000", "--temperature", "1"}, &out, &errOut)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for out.String() == "" { // generating: the handler is in place
		if time.Now().After(deadline) {
			t.Fatalf("no output; stderr %q", errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	sent := time.Now()
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-code:
		if c != 130 || !strings.Contains(errOut.String(), "Ctrl-C again") || !strings.Contains(errOut.String(), "verdict generate: stopped") {
			t.Errorf("exit %d, stderr %q", c, errOut.String())
		}
		if d := time.Since(sent); d > 2*time.Second {
			t.Errorf("stopped %v after the interrupt", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the interrupt did not stop the command")
	}
}
