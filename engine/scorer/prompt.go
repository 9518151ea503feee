package scorer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"verdict/engine/model"
	"verdict/engine/prompt"
)

// promptTail is the text after the prompt's last special token, the end of
// chat format c's generation prompt after its last control token (a chat
// format writes its control tokens as "<...>"): the tokenizer splits at
// special tokens, so what follows the prompt only ever merges with this
// tail ("model\n" in Gemma 3n's format, "" after a closing "<channel|>").
func promptTail(c model.Chat) string {
	g := c.Generation()
	return g[strings.LastIndexByte(g, '>')+1:]
}

// jsonString writes s as a JSON string without HTML escaping.
func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

// Prompt builds the shared prefix for an input in chat format c: a user
// turn with the instructions, the input (media placeholders, then text) and
// every question with its criteria, then the generation prompt; with the
// fields-first layout the questions come before the input.
func (s *Schema) Prompt(input string, c model.Chat) string {
	return s.MediaPrompt(input, nil, false, c).String()
}

// MediaPrompt is Prompt with media placeholders under the input label: one
// per image, each after its caption when it has one (video frames carry
// their time), then the audio clip, then the text.
func (s *Schema) MediaPrompt(input string, captions []string, audio bool, c model.Chat) prompt.Prompt {
	return s.promptWith(input, captions, audio, c, (*Field).criteria)
}

// promptWith is MediaPrompt with each field's allowed answers described by
// criteria (the cached backend lists answer codes).
func (s *Schema) promptWith(input string, captions []string, audio bool, ch model.Chat, criteria func(*Field) string) prompt.Prompt {
	instr, label := s.Instructions, s.InputLabel
	if instr == "" {
		instr = DefaultInstructions
	}
	if label == "" {
		label = DefaultInputLabel
	}
	// Only the chat markup is the builder's: the schema's instructions,
	// labels, questions and option names, the captions and the input are
	// the user's, their special tokens tokenized as text.
	var fields strings.Builder
	fields.WriteString("Fields:")
	for i := range s.Fields {
		f := &s.Fields[i]
		fmt.Fprintf(&fields, "\n- %s: %s %s", jsonString(f.Name), strings.TrimSpace(f.Question), criteria(f))
	}
	var p prompt.Prompt
	p.Text(ch.BOS + ch.Open(ch.User))
	if s.FieldsFirst() {
		p.User(fmt.Sprintf("%s\n\n%s\n\n%s:\n", strings.TrimSpace(instr), fields.String(), label))
	} else {
		p.User(fmt.Sprintf("%s\n\n%s:\n", strings.TrimSpace(instr), label))
	}
	for i, c := range captions {
		if c != "" {
			p.User(c)
		}
		p.ChatImage(ch, fmt.Sprintf("image %d", i+1))
	}
	if audio {
		p.ChatAudio(ch, "audio")
	}
	if s.FieldsFirst() {
		p.User(strings.TrimSpace(input))
	} else {
		p.User(strings.TrimSpace(input) + "\n\n" + fields.String())
	}
	p.Text(ch.Close() + ch.Generation())
	return p
}

// criteria describes the allowed answers of a field.
func (f *Field) criteria() string {
	list := func(render func(Option) string) string {
		parts := make([]string, len(f.Options))
		for i, o := range f.Options {
			parts[i] = render(o)
			if d := strings.TrimSpace(o.Description); d != "" {
				parts[i] += " (" + d + ")"
			}
		}
		return strings.Join(parts, ", ")
	}
	quoted := func(o Option) string { return jsonString(o.Name) }
	switch f.Kind {
	case Choice:
		return "One of: " + list(quoted) + "."
	case Bool:
		return "true or false."
	case Catalog:
		return fmt.Sprintf("Exactly %d of these, one per line: %s.", f.K, list(quoted))
	case Independent:
		return "An object with a true/false value for each of: " + list(quoted) + "."
	case Score:
		if lo, hi, ok := f.integerRange(); ok {
			s := fmt.Sprintf("An integer from %d to %d", lo, hi)
			var desc []string
			for _, o := range f.Options {
				if d := strings.TrimSpace(o.Description); d != "" {
					desc = append(desc, o.Name+" = "+d)
				}
			}
			if len(desc) > 0 {
				s += ": " + strings.Join(desc, ", ")
			}
			return s + "."
		}
		return "One of, from lowest to highest: " + list(func(o Option) string { return levelText(o) }) + "."
	}
	return ""
}

// integerRange reports whether the levels are the consecutive integers
// lo..hi, each written as itself.
func (f *Field) integerRange() (lo, hi int, ok bool) {
	for i, o := range f.Options {
		v, err := strconv.Atoi(o.Name)
		if err != nil || float64(v) != o.Value || (i > 0 && v != hi+1) {
			return 0, 0, false
		}
		if i == 0 {
			lo = v
		}
		hi = v
	}
	return lo, hi, true
}

// levelText is a level as its JSON value: a number literal when its name is
// a JSON number, else a string.
func levelText(o Option) string {
	if isNumber(o.Name) {
		return o.Name
	}
	return jsonString(o.Name)
}

// decision is one primitive decision: a branch of the prompt.
type decision struct {
	field  int    // index in Schema.Fields
	label  int    // Independent: index of the label; else -1
	name   string // "field" or "field.label"
	key    string // JSON text before the value, e.g. {"issues": {"late delivery":
	values []string
	texts  []string // candidate JSON values with their leading space
}

// decisions expands the schema into its primitive decisions.
func (s *Schema) decisions() []decision {
	var out []decision
	boolean := func(d decision) decision {
		d.values, d.texts = []string{"true", "false"}, []string{" true", " false"}
		return d
	}
	for i, f := range s.Fields {
		key := "{" + jsonString(f.Name) + ":"
		d := decision{field: i, label: -1, name: f.Name, key: key}
		switch f.Kind {
		case Choice:
			for _, o := range f.Options {
				d.values = append(d.values, o.Name)
				d.texts = append(d.texts, " "+jsonString(o.Name))
			}
			out = append(out, d)
		case Score:
			for _, o := range f.Options {
				d.values = append(d.values, o.Name)
				d.texts = append(d.texts, " "+levelText(o))
			}
			out = append(out, d)
		case Bool:
			out = append(out, boolean(d))
		case Catalog: // decoded through its trie (see catalogFields)
		case Independent:
			for j, o := range f.Options {
				out = append(out, boolean(decision{
					field: i, label: j, name: f.Name + "." + o.Name,
					key: key + " {" + jsonString(o.Name) + ":",
				}))
			}
		}
	}
	return out
}
