package cli

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"verdict/app/inputs"
	"verdict/engine/session"
)

// TestProgressBar: the bar draws nothing off a terminal; on one it redraws
// a line with the share done and the time left, throttled, then clears it.
func TestProgressBar(t *testing.T) {
	var off bytes.Buffer
	b := newBar(&off)
	loadProgress(b)(session.StagePacking, 5, 10)
	towerProgress(b)(inputs.Step{What: "image 1", Total: 1, Block: 3, Blocks: 10})
	b.clear()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if off.Len() != 0 || isTerminal(w) || isTerminal(&off) {
		t.Errorf("off a terminal: wrote %q, pipe is a terminal: %v", off.String(), isTerminal(w))
	}

	var on bytes.Buffer
	now := time.Unix(1000, 0)
	b = &bar{w: &on, on: true, now: func() time.Time { return now }}
	p := loadProgress(b)
	p(session.StagePacking, 0, 4_000_000_000)
	now = now.Add(50 * time.Millisecond)
	p(session.StagePacking, 1_000_000_000, 4_000_000_000) // too soon: not drawn
	now = now.Add(10 * time.Second)
	p(session.StagePacking, 1_000_000_000, 4_000_000_000)
	lines := strings.Split(on.String(), "\r")
	if len(lines) != 3 {
		t.Fatalf("drew %d lines, want 2: %q", len(lines)-1, on.String())
	}
	last := lines[2]
	for _, want := range []string{"loading: packing weights to 4 bits", "[######..................]", "25%", "1.00 G of 4.00 G weights", "· 10s", "about 30s left", "\x1b[K"} {
		if !strings.Contains(last, want) {
			t.Errorf("line %q lacks %q", last, want)
		}
	}
	on.Reset()
	towerProgress(b)(inputs.Step{What: "audio", Done: 1, Total: 2, Block: 1, Blocks: 3})
	if got := on.String(); !strings.Contains(got, "towers: audio (2 of 2)") || !strings.Contains(got, "1 of 3 blocks") {
		t.Errorf("tower line %q", got)
	}
	on.Reset()
	towerProgress(b)(inputs.Step{Done: 2, Total: 2})
	if on.String() != "\r\x1b[K" {
		t.Errorf("the end of the towers wrote %q, want the line cleared", on.String())
	}
	on.Reset()
	p2 := prefillProgress(b)
	p2(1, 30)
	p2(30, 30)
	if got := on.String(); !strings.Contains(got, "prefill [") || !strings.Contains(got, "1 of 30 layers") || !strings.HasSuffix(got, "30 of 30 layers · 0s\x1b[K\r\x1b[K") {
		t.Errorf("prefill lines %q", got)
	}
}

// TestInterrupts: the first Ctrl-C cancels the command and says how to
// quit; the second exits at once with status 130.
func TestInterrupts(t *testing.T) {
	sig := make(chan os.Signal, 2)
	done := make(chan struct{})
	cancelled := make(chan struct{})
	exited := make(chan int, 1)
	var errOut bytes.Buffer
	ended := make(chan struct{})
	go func() {
		interrupts(sig, done, func() { close(cancelled) }, &errOut, func(code int) { exited <- code })
		close(ended)
	}()
	sig <- os.Interrupt
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the first interrupt did not cancel")
	}
	select {
	case code := <-exited:
		t.Fatalf("exited (%d) at the first interrupt", code)
	case <-time.After(50 * time.Millisecond):
	}
	sig <- os.Interrupt
	select {
	case code := <-exited:
		if code != 130 {
			t.Errorf("exit status %d, want 130", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second interrupt did not exit")
	}
	<-ended
	if !strings.Contains(errOut.String(), "Ctrl-C again") {
		t.Errorf("stderr %q", errOut.String())
	}
	// A command that ends first stops the watcher.
	done2 := make(chan struct{})
	close(done2)
	interrupts(make(chan os.Signal), done2, func() { t.Error("cancelled without a signal") }, &errOut, func(int) { t.Error("exited") })
}

// TestCount: a count is written in the unit its total is written in.
func TestCount(t *testing.T) {
	for _, tc := range []struct {
		n, total int64
		unit     string
		want     string
	}{
		{4_194_304, 17_000_000, "weights", "4 M"},
		{17_000_000, 17_000_000, "weights", "17 M"},
		{250_000_000, 4_000_000_000, "weights", "0.25 G"},
		{12, 84, "blocks", "12"},
		{5, 10, "bytes", "5"},
	} {
		if got := count(tc.n, tc.total, tc.unit); got != tc.want {
			t.Errorf("count(%d, %d, %s) = %q, want %q", tc.n, tc.total, tc.unit, got, tc.want)
		}
	}
}
