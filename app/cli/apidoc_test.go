package cli

import (
	"bytes"
	"context"
	"encoding/binary"
	"image"
	"image/color"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// asVerdict makes the test binary run as the verdict command (for the
// documented commands that start it).
const asVerdict = "VERDICT_TEST_AS_VERDICT"

func TestMain(m *testing.M) {
	if os.Getenv(asVerdict) == "1" {
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// shBlock finds the ```sh blocks of a Markdown page.
var shBlock = regexp.MustCompile("(?s)```sh\n(.*?)```")

// TestAPIDocCommands runs the commands of docs/api.md as they are written,
// in one shell, with the test binary as verdict (on a free port instead of
// 8177), a PNG too big for a command line and a WAV file in the current
// folder, and checks what each answers.
func TestAPIDocCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a server and every documented request (-short)")
	}
	for _, tool := range []string{"bash", "curl", "base64", "grep", "tr"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	if _, err := os.Stat(os.Getenv("VERDICT_TOKENIZER")); err != nil {
		t.Skipf("no tokenizer at $VERDICT_TOKENIZER: %v", err)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := shBlock.FindAllStringSubmatch(string(doc), -1)
	if len(blocks) < 6 {
		t.Fatalf("docs/api.md has %d sh blocks", len(blocks))
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	wrapper := "#!/bin/sh\n" + asVerdict + "=1 exec '" + exe + "' \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "verdict"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	writePNG(t, filepath.Join(work, "photo.png"), 200, 200)
	if fi, _ := os.Stat(filepath.Join(work, "photo.png")); fi.Size() < 100_000 {
		t.Fatalf("photo.png has %d bytes: too small to test the command line's limit", fi.Size())
	}
	writeWAV(t, filepath.Join(work, "clip.wav"), 16000, 1)

	// Each block's output follows a line of its own.
	const mark = "@@@ block "
	var script strings.Builder
	script.WriteString("trap 'kill $(jobs -p) 2>/dev/null' EXIT\n")
	for i, b := range blocks {
		cmd := strings.Replace(b[1], "verdict serve ", "verdict serve --addr 127.0.0.1:0 ", 1)
		script.WriteString("echo; echo '" + mark + strings.Repeat("x", i) + "'\n" + cmd)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = work
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "HOME="+home, "XDG_CONFIG_HOME="+home, "XDG_CACHE_HOME="+home)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the commands fail: %v\n%s", err, tail(out))
	}
	parts := strings.Split(string(out), mark)[1:]
	if len(parts) != len(blocks) {
		t.Fatalf("%d outputs for %d blocks:\n%s", len(parts), len(blocks), tail(out))
	}
	checked := 0
	for i, b := range blocks {
		got := strings.TrimLeft(parts[i], "x")
		if strings.Contains(got, "Argument list too long") {
			t.Errorf("block %d does not run: %s", i+1, got)
		}
		var want string
		switch code := b[1]; {
		case strings.Contains(code, "verdict serve"):
			continue
		case strings.Contains(code, "/v1/chat/completions") && strings.Contains(code, `"n": 2`):
			want = `"type":"invalid_request_error","param":"n"`
		case strings.Contains(code, "/v1/chat/completions") && strings.Contains(code, "json_schema"):
			want = `"verdict":{"score":`
		case strings.Contains(code, "/v1/chat/completions") && strings.Contains(code, "select_tools"):
			want = `"finish_reason":"tool_calls"`
		case strings.Contains(code, "/v1/chat/completions"):
			want = `"object":"chat.completion"`
		case strings.Contains(code, "/v1/completions"):
			want = `"token_logprobs":[null,`
		case strings.Contains(code, `"max_token"`):
			want = `"code":"invalid_request"`
		case strings.Contains(code, `"stream": true`):
			want = "event: done"
		case strings.Contains(code, "/v1/verdict/score"):
			want = `"answer":`
		case strings.Contains(code, "/v1/verdict/generate"):
			want = `"text":`
		case strings.Contains(code, "/v1/verdict/models"):
			want = `"state":"ready"`
		default:
			t.Errorf("block %d: no check for\n%s", i+1, code)
			continue
		}
		checked++
		if !strings.Contains(got, want) {
			t.Errorf("block %d answers %.300q, want %q in it; the block:\n%s", i+1, got, want, b[1])
		}
	}
	if checked < 10 {
		t.Errorf("%d blocks checked", checked)
	}
}

// tail is the end of a command's output.
func tail(b []byte) string {
	return string(b[max(0, len(b)-4000):])
}

// writePNG writes a w×h image of noise (it does not compress).
func writePNG(t *testing.T, path string, w, h int) {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	r := rand.New(rand.NewPCG(1, 2))
	for y := range h {
		for x := range w {
			img.Set(x, y, color.RGBA{uint8(r.IntN(256)), uint8(r.IntN(256)), uint8(r.IntN(256)), 255})
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeWAV writes secs seconds of a 440 Hz tone as 16-bit mono PCM.
func writeWAV(t *testing.T, path string, rate, secs int) {
	t.Helper()
	n := rate * secs
	var buf bytes.Buffer
	le := func(v any) { binary.Write(&buf, binary.LittleEndian, v) }
	buf.WriteString("RIFF")
	le(uint32(36 + 2*n))
	buf.WriteString("WAVEfmt ")
	le(uint32(16))
	le(uint16(1)) // PCM
	le(uint16(1)) // mono
	le(uint32(rate))
	le(uint32(2 * rate))
	le(uint16(2))
	le(uint16(16))
	buf.WriteString("data")
	le(uint32(2 * n))
	for i := range n {
		le(int16(8000 * math.Sin(2*math.Pi*440*float64(i)/float64(rate))))
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
