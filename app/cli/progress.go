package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"verdict/app/inputs"
	"verdict/engine/models"
	"verdict/engine/session"
)

// bar draws one line of progress on a terminal, redrawn in place; on
// anything else (a pipe, a file, a test's buffer) it writes nothing.
type bar struct {
	w   io.Writer
	on  bool
	now func() time.Time

	mu     sync.Mutex
	label  string
	start  time.Time // when label began
	drawn  time.Time
	active bool // a line is on screen
}

// barWidth is the width of the bar itself, in cells.
const barWidth = 24

// newBar returns a bar on w, drawn only when w is a terminal.
func newBar(w io.Writer) *bar { return &bar{w: w, on: isTerminal(w), now: time.Now} }

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// show draws label with done of total (total 0: no count), at most ten
// times a second and whenever the label changes or the work is complete.
func (b *bar) show(label string, done, total int64, unit string) {
	if b == nil || !b.on {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if label != b.label {
		b.label, b.start = label, now
	} else if now.Sub(b.drawn) < 100*time.Millisecond && (total == 0 || done < total) {
		return
	}
	b.drawn, b.active = now, true
	fmt.Fprintf(b.w, "\r%s\x1b[K", barLine(label, done, total, unit, now.Sub(b.start)))
}

// clear removes the line, if one is drawn.
func (b *bar) clear() {
	if b == nil || !b.on {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.active {
		fmt.Fprint(b.w, "\r\x1b[K")
		b.active, b.label = false, ""
	}
}

// barLine is one progress line: "label [#####.....] 42% 3 of 7 blocks ·
// 12 s, about 16 s left".
func barLine(label string, done, total int64, unit string, elapsed time.Duration) string {
	var s strings.Builder
	s.WriteString(label)
	if total > 0 {
		f := min(1, max(0, float64(done)/float64(total)))
		n := int(f * barWidth)
		fmt.Fprintf(&s, " [%s%s] %3.0f%% %s of %s", strings.Repeat("#", n), strings.Repeat(".", barWidth-n), 100*f, count(done, total, unit), count(total, total, unit))
		if unit != "" {
			s.WriteString(" " + unit)
		}
	}
	fmt.Fprintf(&s, " · %s", elapsed.Round(time.Second))
	if total > 0 && done > 0 && done < total && elapsed > time.Second {
		left := time.Duration(float64(elapsed) * float64(total-done) / float64(done))
		fmt.Fprintf(&s, ", about %s left", left.Round(time.Second))
	}
	return s.String()
}

// count writes n of total: in G or M when total is that large (weights,
// bytes), as it is otherwise (blocks).
func count(n, total int64, unit string) string {
	switch {
	case unit == "blocks" || total < 10_000_000:
		return fmt.Sprint(n)
	case total >= 1e9:
		return fmt.Sprintf("%.2f G", float64(n)/1e9)
	}
	return fmt.Sprintf("%.0f M", float64(n)/1e6)
}

// loadProgress is models.Options.Progress drawing on b.
func loadProgress(b *bar) func(stage string, done, total int64) {
	return func(stage string, done, total int64) {
		unit := ""
		switch stage {
		case session.StagePacking:
			unit = "weights"
		case session.StageChecking:
			unit = "bytes"
		}
		b.show("loading: "+stage, done, total, unit)
	}
}

// towerProgress is inputs.Progress drawing on b.
func towerProgress(b *bar) inputs.Progress {
	return func(st inputs.Step) {
		if st.What == "" {
			b.clear()
			return
		}
		what := fmt.Sprintf("towers: %s (%d of %d)", st.What, st.Done+1, st.Total)
		if st.Loading {
			what += ", loading the tower"
		}
		b.show(what, int64(st.Block), int64(st.Blocks), "blocks")
	}
}

// prefillProgress is a prefill's OnPrefill drawing on b, cleared after
// the last layer.
func prefillProgress(b *bar) func(done, total int) {
	return func(done, total int) {
		b.show("prefill", int64(done), int64(total), "layers")
		if done >= total {
			b.clear()
		}
	}
}

// openModel opens spec with opt, stopped by ctx, with a progress bar on
// stderr when it is a terminal.
func openModel(ctx context.Context, spec string, opt models.Options, stderr io.Writer) (*models.Model, error) {
	b := newBar(stderr)
	defer b.clear()
	opt.Progress = loadProgress(b)
	return models.OpenContext(ctx, spec, opt)
}

// interrupts turns the first signal from sig into cancel (with a note on
// stderr) and the second into exit(130): a stuck or slow command always
// ends at the second Ctrl-C. It returns when done is closed.
func interrupts(sig <-chan os.Signal, done <-chan struct{}, cancel func(), stderr io.Writer, exit func(int)) {
	select {
	case <-sig:
	case <-done:
		return
	}
	fmt.Fprintln(stderr, "\nverdict: interrupted, stopping (press Ctrl-C again to quit at once)")
	cancel()
	select {
	case <-sig:
		fmt.Fprintln(stderr, "verdict: interrupted again, quitting")
		exit(130)
	case <-done:
	}
}
