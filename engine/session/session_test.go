package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"verdict/engine/gemma3n"
	"verdict/engine/models"
	"verdict/engine/scorer"
	"verdict/engine/tokenizer"
)

var (
	builtinOnce sync.Once
	builtin     *Session
	builtinErr  error
)

// open returns the built-in model's session (shared by the tests), skipping
// when no tokenizer.json is found unless VERDICT_REQUIRE_TOKENIZER=1.
func open(t *testing.T) *Session {
	t.Helper()
	if _, err := models.LoadTokenizer(""); err != nil {
		if os.Getenv("VERDICT_REQUIRE_TOKENIZER") == "1" {
			t.Fatal(err)
		}
		t.Skipf("%v", err)
	}
	builtinOnce.Do(func() {
		builtin, builtinErr = Open(context.Background(), models.Builtin, models.Options{CacheDir: "off"})
	})
	if builtinErr != nil {
		t.Fatal(builtinErr)
	}
	return builtin
}

func schema(t *testing.T) *scorer.Schema {
	t.Helper()
	s, err := scorer.ParseSchema([]byte(`{"fields":[{"name":"sentiment","question":"How does the writer feel?","type":"choice","options":["positive","negative"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// count is how many times id occurs in ids.
func count(ids []int32, id int) int {
	n := 0
	for _, x := range ids {
		if x == int32(id) {
			n++
		}
	}
	return n
}

func TestInfo(t *testing.T) {
	s := open(t)
	in := s.Info()
	sp := s.m.Chat().Media
	if !in.Builtin || in.Name != s.m.Name || in.Layers != s.m.Config().Layers || in.Vocab != s.m.Config().Vocab || in.Params != s.m.Params() {
		t.Errorf("Info %+v does not describe the model %q (%d layers, vocab %d)", in, s.m.Name, s.m.Config().Layers, s.m.Config().Vocab)
	}
	if in.ImageTokens != sp.VisionTokens || in.AudioTokens != sp.AudioTokens {
		t.Errorf("soft tokens %d/%d, want %d/%d", in.ImageTokens, in.AudioTokens, sp.VisionTokens, sp.AudioTokens)
	}
	if _, err := New(nil); err == nil {
		t.Error("New(nil) gave no error")
	}
}

func TestEncodePromptKinds(t *testing.T) {
	s := open(t)
	sp := s.m.Chat().Media
	sc := schema(t)
	chat := func(turns ...tokenizer.Turn) []int32 { return s.tok.EncodeChat(turns, true) }
	media := &scorer.Media{Captions: []string{"", "Video frame at 0:01:"}}
	media.Audio = []float32{}
	withMedia, err := ChatPrompt(s.m.Chat(), media, "", "Describe.").Encode(s.tok, sp)
	if err != nil {
		t.Fatal(err)
	}
	schemaIDs, err := sc.MediaPrompt("I loved it", nil, false, s.m.Chat()).Encode(s.tok, sp)
	if err != nil {
		t.Fatal(err)
	}
	schemaMedia, err := sc.MediaPrompt("I loved it", media.Captions, true, s.m.Chat()).Encode(s.tok, sp)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  Request
		want []int32
		err  string
	}{
		{"chat", Request{Kind: PromptChat, Input: "Hello there"}, chat(tokenizer.Turn{Role: "user", Content: "Hello there"}), ""},
		{"chat trims white space", Request{Kind: PromptChat, Input: "  Hello there \n"}, chat(tokenizer.Turn{Role: "user", Content: "Hello there"}), ""},
		{"chat with a system message", Request{Kind: PromptChat, System: "Be brief.", Input: "Hello"},
			chat(tokenizer.Turn{Role: "system", Content: "Be brief."}, tokenizer.Turn{Role: "user", Content: "Hello"}), ""},
		{"chat with media", Request{Kind: PromptChat, Input: "Describe.", Media: media}, withMedia, ""},
		{"schema", Request{Kind: PromptSchema, Input: "I loved it", Schema: sc}, schemaIDs, ""},
		{"schema with media", Request{Kind: PromptSchema, Input: "I loved it", Schema: sc, Media: media}, schemaMedia, ""},
		{"schema without a schema", Request{Kind: PromptSchema, Input: "x"}, nil, "a schema prompt needs a schema"},
		{"unknown kind", Request{Kind: "poem", Input: "x"}, nil, `unknown prompt kind "poem"`},
		{"no kind", Request{Input: "x"}, nil, `unknown prompt kind ""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Encode(tc.req)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("ids %v\nwant %v", got, tc.want)
			}
		})
	}
	// The media prompt holds one run of soft tokens per caption and one for
	// the audio, each between its begin and end tokens.
	if n := count(withMedia, sp.Image); n != 2*sp.VisionTokens {
		t.Errorf("%d image soft tokens, want 2×%d", n, sp.VisionTokens)
	}
	if n := count(withMedia, sp.Audio); n != sp.AudioTokens {
		t.Errorf("%d audio soft tokens, want %d", n, sp.AudioTokens)
	}
	if n := count(withMedia, sp.BOI); n != 2 {
		t.Errorf("%d start-of-image tokens, want 2", n)
	}
	if text := s.tok.Decode(withMedia); !strings.Contains(text, "Video frame at 0:01:") || !strings.HasSuffix(text, "Describe.<end_of_turn>\n<start_of_turn>model\n") {
		t.Errorf("media chat prompt decodes to %q", text)
	}
}

func TestMediaTokensInTextAreRefused(t *testing.T) {
	s := open(t)
	sp := s.m.Chat().Media
	// The gemma3 tokenizer names Gemma 3n's end-of-image and
	// start-of-audio ids (its soft-token ids are past its vocabulary).
	soft := s.tok.TokenText(int32(sp.EOI))
	audio := s.tok.TokenText(int32(sp.BOA))
	if len(soft) < 3 || len(audio) < 3 {
		t.Fatalf("the tokenizer names the soft tokens %q and %q", soft, audio)
	}
	media := &scorer.Media{Captions: []string{""}}
	for _, tc := range []struct {
		name string
		req  Request
		want string // the token the error names
	}{
		{"chat input", Request{Kind: PromptChat, Input: "look: " + soft}, soft},
		{"chat system", Request{Kind: PromptChat, System: audio, Input: "hi"}, audio},
		{"chat input with media", Request{Kind: PromptChat, Input: soft, Media: media}, soft},
		{"schema input", Request{Kind: PromptSchema, Schema: schema(t), Input: "a " + audio}, audio},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ids, err := s.Encode(tc.req)
			if err == nil {
				t.Fatalf("no error; ids %v", ids)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "attached as media") {
				t.Errorf("error %q does not name %s as a media token", err, tc.want)
			}
			called := false
			tc.req.OnPrompt = func(int) { called = true }
			tc.req.Sampling.MaxTokens = 1
			if _, gerr := s.Generate(context.Background(), tc.req, func(Token) error {
				t.Error("a refused prompt generated a token")
				return nil
			}); gerr == nil || gerr.Error() != err.Error() {
				t.Errorf("Generate error %v, want %v", gerr, err)
			}
			if called {
				t.Error("OnPrompt was called for a refused prompt")
			}
		})
	}
	// Plain text with "<" that names no media token passes.
	if _, err := s.Encode(Request{Kind: PromptChat, Input: "a <b> tag and <start_of_turn>"}); err != nil {
		t.Errorf("plain text refused: %v", err)
	}
}

func TestTokenLimit(t *testing.T) {
	s := open(t)
	long := strings.Repeat("word ", MaxInputTokens)
	for _, tc := range []struct {
		name string
		req  Request
		over bool
	}{
		{"chat over", Request{Kind: PromptChat, Input: long}, true},
		{"schema over", Request{Kind: PromptSchema, Schema: schema(t), Input: long}, true},
		{"chat within", Request{Kind: PromptChat, Input: long[:len(long)/2]}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ids, err := s.Encode(tc.req)
			if !tc.over {
				if err != nil || len(ids) > MaxInputTokens || len(ids) < MaxInputTokens/4 {
					t.Fatalf("%d ids, %v", len(ids), err)
				}
				return
			}
			var le *scorer.LimitError
			if !errors.As(err, &le) {
				t.Fatalf("error %v (%d ids), want a LimitError", err, len(ids))
			}
			if le.Max != MaxInputTokens || le.Value <= MaxInputTokens {
				t.Errorf("limit error %+v", le)
			}
			msg := err.Error()
			if !strings.Contains(msg, strconv.Itoa(le.Value)) || !strings.Contains(msg, strconv.Itoa(MaxInputTokens)) || !strings.Contains(msg, "input tokens") {
				t.Errorf("error %q does not name the count %d and the limit %d", msg, le.Value, MaxInputTokens)
			}
			if _, gerr := s.Generate(context.Background(), tc.req, nil); !errors.As(gerr, &le) {
				t.Errorf("Generate error %v, want the limit error", gerr)
			}
		})
	}
}

func TestGenerateStreamsDecodedPieces(t *testing.T) {
	s := open(t)
	stops := s.tok.StopIDs()
	for _, tc := range []struct {
		name string
		req  Request
	}{
		{"greedy chat", Request{Kind: PromptChat, Input: "Tell me a story.", Sampling: Sampling{MaxTokens: 16}}},
		{"sampled chat", Request{Kind: PromptChat, Input: "Hi", Sampling: Sampling{MaxTokens: 32, Temperature: 1.5, Seed: 3}}},
		{"sampled schema", Request{Kind: PromptSchema, Schema: schema(t), Input: "great", Sampling: Sampling{MaxTokens: 24, Temperature: 1, TopK: 50, TopP: 0.9, Seed: 11}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := s.Encode(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			prompted := -1
			tc.req.OnPrompt = func(n int) { prompted = n }
			var ids []int32
			var text strings.Builder
			res, err := s.Generate(context.Background(), tc.req, func(tk Token) error {
				if prompted != len(want) {
					t.Errorf("token %d before OnPrompt(%d) (got %d)", tk.Index, len(want), prompted)
				}
				if tk.Index != len(ids) {
					t.Errorf("token index %d, want %d", tk.Index, len(ids))
				}
				if stop := slices.Contains(stops, tk.ID); tk.Stop != stop || (stop && tk.Piece != "") {
					t.Errorf("token %d: stop %v, piece %q", tk.ID, tk.Stop, tk.Piece)
				}
				if !utf8.ValidString(tk.Piece) {
					t.Errorf("token %d: piece %q is not whole characters", tk.ID, tk.Piece)
				}
				ids = append(ids, tk.ID)
				text.WriteString(tk.Piece)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ids, res.IDs) || res.PromptTokens != len(want) {
				t.Fatalf("streamed %v, result %v (prompt %d, want %d)", ids, res.IDs, res.PromptTokens, len(want))
			}
			if len(ids) == 0 || (!res.Stopped && len(ids) != tc.req.Sampling.MaxTokens) {
				t.Fatalf("%d tokens, stopped %v", len(ids), res.Stopped)
			}
			text.WriteString(res.Tail)
			plain := slices.DeleteFunc(slices.Clone(ids), func(id int32) bool { return slices.Contains(stops, id) })
			if got, dec := text.String(), s.tok.Decode(plain); got != dec {
				t.Errorf("pieces give %q, the tokenizer decodes %q", got, dec)
			}
		})
	}
}

func TestGenerateStops(t *testing.T) {
	s := open(t)
	req := Request{Kind: PromptChat, Input: "Hi", Sampling: Sampling{MaxTokens: 8}}
	ctx, cancel := context.WithCancel(context.Background())
	stopEmit := errors.New("enough")
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		sample Sampling
		emit   func(Token) error
		err    error
		tokens int
	}{
		{"emit error", context.Background(), req.Sampling, func(Token) error { return stopEmit }, stopEmit, 1},
		{"cancelled while decoding", ctx, req.Sampling, func(tk Token) error {
			if tk.Index == 2 {
				cancel()
			}
			return nil
		}, context.Canceled, 3},
		{"no max tokens", context.Background(), Sampling{}, nil, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := req
			r.Sampling = tc.sample
			res, err := s.Generate(tc.ctx, r, tc.emit)
			switch {
			case tc.err != nil && !errors.Is(err, tc.err):
				t.Fatalf("error %v, want %v", err, tc.err)
			case tc.err == nil && (err == nil || !strings.Contains(err.Error(), "max tokens must be positive")):
				t.Fatalf("error %v, want one about max tokens", err)
			}
			if len(res.IDs) != tc.tokens {
				t.Errorf("%d tokens, want %d", len(res.IDs), tc.tokens)
			}
		})
	}
	// A context done before the prompt gives its error and no prompt.
	prompted := false
	r := req
	r.OnPrompt = func(int) { prompted = true }
	if _, err := s.Generate(ctx, r, nil); !errors.Is(err, context.Canceled) || prompted {
		t.Errorf("cancelled before: error %v, prompted %v", err, prompted)
	}
}

func TestSchemaPrompt(t *testing.T) {
	s := open(t)
	sc := schema(t)
	text, n, err := s.SchemaPrompt(sc, "fine", []string{""}, true)
	if err != nil {
		t.Fatal(err)
	}
	media := &scorer.Media{Captions: []string{""}}
	media.Audio = []float32{}
	ids, err := s.Encode(Request{Kind: PromptSchema, Schema: sc, Input: "fine", Media: media})
	if err != nil {
		t.Fatal(err)
	}
	if n != len(ids) || !strings.Contains(text, "<image 1>") || !strings.Contains(text, "<audio>") {
		t.Errorf("SchemaPrompt = %q, %d tokens; the generation prompt has %d", text, n, len(ids))
	}
	sp := s.m.Chat().Media
	if got := SchemaPromptText(sc, "fine", []string{""}, true, sp.VisionTokens, sp.AudioTokens); got != text {
		t.Errorf("without a model: %q\nwith: %q", got, text)
	}
}

func TestStreamerPieces(t *testing.T) {
	s := open(t)
	tok := s.tok
	byteIDs := func(text string) []int32 {
		var ids []int32
		for _, b := range []byte(text) {
			id, ok := tok.Lookup(fmt.Sprintf("<0x%02X>", b))
			if !ok {
				t.Fatalf("no byte token for %#x", b)
			}
			ids = append(ids, id)
		}
		return ids
	}
	eos, eot := int32(tok.EOS()), int32(tok.EndOfTurn())
	for _, tc := range []struct {
		name   string
		ids    []int32
		pieces []string // "" where a token adds no text yet
		tail   string
	}{
		{"words", tok.Encode("Hello world"), nil, ""},
		{"a character in byte tokens", append(tok.Encode("a"), byteIDs("é")...), []string{"a", "", "é"}, ""},
		{"an emoji split, then a stop", append(byteIDs("😀"), eot), []string{"", "", "", "😀", ""}, ""},
		{"end of text", append(tok.Encode("ok"), eos), []string{"ok", ""}, ""},
		{"an incomplete character at the end", append(tok.Encode("x"), byteIDs("é")[:1]...), []string{"x", ""}, "\uFFFD"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := s.newStreamer()
			var got []string
			var text strings.Builder
			for i, id := range tc.ids {
				tk := st.token(i, id)
				if tk.Index != i || tk.ID != id || tk.Stop != (id == eos || id == eot) {
					t.Errorf("token %+v for id %d at %d", tk, id, i)
				}
				got = append(got, tk.Piece)
				text.WriteString(tk.Piece)
			}
			tail := st.dec.Flush()
			if tail != tc.tail {
				t.Errorf("tail %q, want %q", tail, tc.tail)
			}
			if tc.pieces != nil && !slices.Equal(got, tc.pieces) {
				t.Errorf("pieces %q, want %q", got, tc.pieces)
			}
			plain := slices.DeleteFunc(slices.Clone(tc.ids), func(id int32) bool { return id == eos || id == eot })
			if all := text.String() + tail; all != tok.Decode(plain) {
				t.Errorf("pieces and tail %q, decode %q", all, tok.Decode(plain))
			}
		})
	}
}

func TestResident(t *testing.T) {
	s := open(t)
	r := s.Info().Resident
	if r.Weights != s.m.Weights() || r.WeightBytes != s.m.WeightBytes() || r.WeightBytes <= 0 {
		t.Errorf("resident weights %s %d B, want %s %d B", r.Weights, r.WeightBytes, s.m.Weights(), s.m.WeightBytes())
	}
	if pos, b := s.m.KVPool(); r.KVPositions != pos || r.KVBytes != b || r.KVPositions < gemma3n.DefaultKVPositions || b <= 0 {
		t.Errorf("resident KV pool %d positions %d B, the model's %d and %d B", r.KVPositions, r.KVBytes, pos, b)
	}
	if v, a := s.Towers(); v || a {
		t.Fatalf("towers loaded before any input: vision %v, audio %v", v, a)
	}
	if _, _, err := s.AudioTokens(context.Background(), make([]float32, 16000), nil); err != nil {
		t.Fatal(err)
	}
	if v, a := s.Towers(); v || !a {
		t.Errorf("after an audio clip: vision %v, audio %v; want only audio", v, a)
	}
}
