package gemma4

import (
	"regexp"
	"strings"
	"testing"

	"verdict/engine/model"
)

// The lines of Gemma 4's chat templates that write its markup, as they
// read in Ollama's copies (github.com/ollama/ollama at fb30760,
// model/renderers/testdata/gemma4_e2b_chat_template.jinja2 and
// gemma4_31b_chat_template.jinja2, "Published: 2026-07-09"; chat.go says
// which line is which).
const (
	tplSystemOpen = `    {{- '<|turn>system\n' -}}`                       // both, line 191
	tplSystemEnd  = `    {{- '<turn|>\n' -}}`                             // both, line 215
	tplTurnOpen   = `        {{- '<|turn>' + role + '\n' }}`              // both, line 234
	tplTurnEnd    = `            {{- '<turn|>\n' -}}`                     // both, line 373
	tplImage      = `                        {{- '<|image|>' -}}`         // both, line 339
	tplAudio      = `                        {{- '<|audio|>' -}}`         // both, line 341
	tplGenSmall   = `        {{- '<|turn>model\n' -}}`                    // both, line 383
	tplGenThought = `            {{- '<|channel>thought\n<channel|>' -}}` // 31B only, line 385
)

// jinjaStrings are the single-quoted string literals of a template line,
// their escapes read ("\n").
func jinjaStrings(line string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`'((?:[^'\\]|\\.)*)'`).FindAllStringSubmatch(line, -1) {
		out = append(out, strings.NewReplacer(`\n`, "\n", `\'`, "'", `\\`, `\`).Replace(m[1]))
	}
	return out
}

// TestChatFormatMatchesTemplate: the chat format's markers are the
// templates' literals, and a conversation written with them is what the
// templates render for a system message, a user turn with an image and an
// audio clip, a model turn and the generation prompt.
func TestChatFormatMatchesTemplate(t *testing.T) {
	small, err := ChatFormat(TemplateSmall, Media)
	if err != nil {
		t.Fatal(err)
	}
	large, err := ChatFormat(TemplateLarge, Media)
	if err != nil {
		t.Fatal(err)
	}
	// A line's literals joined by what the template puts between them
	// (the role, in the turn header).
	lit := func(sep string, lines ...string) string {
		var parts []string
		for _, l := range lines {
			s := jinjaStrings(l)
			if len(s) == 0 {
				t.Fatalf("no string literal in %q", l)
			}
			parts = append(parts, strings.Join(s, sep))
		}
		return strings.Join(parts, "")
	}
	for _, tc := range []struct {
		what, got, want string
	}{
		{"system turn", small.Open(small.System), lit("", tplSystemOpen)},
		{"system turn's end", small.Close(), lit("", tplSystemEnd)},
		{"user turn header", small.Open(small.User), lit("user", tplTurnOpen)},
		{"model turn header", small.Open(small.Assistant), lit("model", tplTurnOpen)},
		{"turn end", small.Close(), lit("", tplTurnEnd)},
		{"image placeholder", ImageToken, lit("", tplImage)},
		{"audio placeholder", AudioToken, lit("", tplAudio)},
		{"generation prompt (E2B, E4B)", small.Generation(), lit("", tplGenSmall)},
		{"generation prompt (26B, 31B)", large.Generation(), lit("", tplGenSmall, tplGenThought)},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %q, the template writes %q", tc.what, tc.got, tc.want)
		}
	}

	// The templates' rendering (bos_token, the system turn, the turns with
	// their trimmed text, the media placeholders where the content puts
	// them, the generation prompt), written with the format's pieces.
	render := func(c model.Chat) string {
		return c.BOS + c.Open(c.System) + "Be brief." + c.Close() +
			c.Open(c.User) + ImageToken + AudioToken + "What is this?" + c.Close() +
			c.Open(c.Assistant) + "A cat." + c.Close() +
			c.Open(c.User) + "Sure?" + c.Close() + c.Generation()
	}
	const conversation = "<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\n<|image|><|audio|>What is this?<turn|>\n" +
		"<|turn>model\nA cat.<turn|>\n<|turn>user\nSure?<turn|>\n<|turn>model\n"
	if got := render(small); got != conversation {
		t.Errorf("E2B/E4B conversation\n got %q\nwant %q", got, conversation)
	}
	if got, want := render(large), conversation+"<|channel>thought\n<channel|>"; got != want {
		t.Errorf("26B/31B conversation\n got %q\nwant %q", got, want)
	}
	// The processor expands a placeholder to begin, soft tokens, end with
	// nothing around them; Gemma 3n's writes "\n\n" on each side.
	if small.MediaPad != "" || large.MediaPad != "" {
		t.Errorf("media padding %q, %q: Gemma 4's processor writes none", small.MediaPad, large.MediaPad)
	}
	if small.Media != Media {
		t.Errorf("media tokens %+v, want %+v", small.Media, Media)
	}
}

// TestChatFormatRefuses: an unknown template is an error naming it.
func TestChatFormatRefuses(t *testing.T) {
	if _, err := ChatFormat(Template(7), Media); err == nil || !strings.Contains(err.Error(), "unknown chat template 7") {
		t.Errorf("error %v, want one naming template 7", err)
	}
}

// TestTemplateOf: checkpoints with per-layer inputs (E2B, E4B) carry the
// small template, the others (26B-A4B, 31B) the large one.
func TestTemplateOf(t *testing.T) {
	for _, tc := range []struct {
		name     string
		perLayer int
		want     Template
	}{
		{"E2B", 256, TemplateSmall},
		{"E4B", 256, TemplateSmall},
		{"26B-A4B", 0, TemplateLarge},
		{"31B", 0, TemplateLarge},
	} {
		if got := TemplateOf(&Config{PerLayerInput: tc.perLayer}); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
