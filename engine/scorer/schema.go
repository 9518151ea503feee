// Package scorer is Verdict's decision scorer: one shared prompt prefix, one
// branch per primitive decision, and full probability distributions from the
// likelihoods of complete JSON values.
//
// Fields never see one another's answers: every branch continues the same
// prefix. Tasks whose answers depend on each other need a sequence of
// requests, each carrying the earlier answers in its input.
package scorer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Kind is a field's output contract.
type Kind string

// The output contracts.
const (
	Choice      Kind = "choice"      // one of the options: winner and distribution
	Independent Kind = "independent" // each label true or false on its own
	Bool        Kind = "bool"        // JSON true or false
	Score       Kind = "score"       // one of ordered numeric levels
	Catalog     Kind = "catalog"     // exactly K distinct entries, decoded through a token trie
)

// Limits of the serving configuration.
const (
	MaxFields      = 32
	MaxDecisions   = 128
	MaxInputTokens = 8192
)

// Option is a named choice, label or level with its description (criteria).
type Option struct {
	Name        string
	Description string
	// Value is a score level's numeric value.
	Value float64
}

// Field is one question of a schema.
type Field struct {
	Name     string
	Question string
	Kind     Kind
	// Options are the categories (Choice), labels (Independent), ordered
	// levels (Score) or entries (Catalog); empty for Bool.
	Options []Option
	// K is the number of distinct entries a Catalog field names.
	K int
}

// Schema is the set of questions asked about one input.
type Schema struct {
	// Instructions open the prompt; InputLabel names the input in it.
	Instructions string
	InputLabel   string
	Fields       []Field
	// Layout orders the prompt (LayoutInputFirst when empty).
	Layout string
}

// Prompt layouts. Input first: the instructions, the input, then the
// fields' questions. Fields first: the instructions and the questions, then
// the input, so that every input of a dataset shares all of the prompt
// before it (its keys and values computed once, see package prefix). The
// two are different prompts: their scores differ.
const (
	LayoutInputFirst  = "input-first"
	LayoutFieldsFirst = "fields-first"
)

// CheckLayout reports whether l names a layout ("" is the default).
func CheckLayout(l string) error {
	switch l {
	case "", LayoutInputFirst, LayoutFieldsFirst:
		return nil
	}
	return fmt.Errorf("layout %q: want %s or %s", l, LayoutInputFirst, LayoutFieldsFirst)
}

// FieldsFirst reports whether the questions come before the input.
func (s *Schema) FieldsFirst() bool { return s.Layout == LayoutFieldsFirst }

// Default prompt wording.
const (
	DefaultInstructions = "Read the input and answer every field in JSON."
	DefaultInputLabel   = "Input"
)

// SchemaError is a schema that cannot be scored, with the reason.
type SchemaError struct {
	Field string // empty for the schema as a whole
	Msg   string
}

func (e *SchemaError) Error() string {
	if e.Field == "" {
		return "schema: " + e.Msg
	}
	return fmt.Sprintf("schema: field %q: %s", e.Field, e.Msg)
}

// LimitError is an input or schema over one of the limits.
type LimitError struct {
	What       string
	Value, Max int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s: %d exceeds the limit of %d", e.What, e.Value, e.Max)
}

// Decisions is the number of primitive decisions (branches) of the schema:
// one per field, and one per label of an Independent field.
func (s *Schema) Decisions() int {
	n := 0
	for _, f := range s.Fields {
		if f.Kind == Independent {
			n += len(f.Options)
		} else {
			n++ // a Catalog field is one decode
		}
	}
	return n
}

// Validate checks the schema and the limits.
func (s *Schema) Validate() error {
	if len(s.Fields) == 0 {
		return &SchemaError{Msg: "no fields"}
	}
	if len(s.Fields) > MaxFields {
		return &LimitError{"named fields", len(s.Fields), MaxFields}
	}
	seen := map[string]bool{}
	for _, f := range s.Fields {
		bad := func(format string, a ...any) error {
			return &SchemaError{Field: f.Name, Msg: fmt.Sprintf(format, a...)}
		}
		if strings.TrimSpace(f.Name) == "" {
			return &SchemaError{Msg: "a field has an empty name"}
		}
		if seen[f.Name] {
			return bad("duplicate field name")
		}
		seen[f.Name] = true
		if strings.TrimSpace(f.Question) == "" {
			return bad("empty question")
		}
		if strings.ContainsAny(f.Name, "\n\r\t") {
			return bad("name contains a line break or tab")
		}
		names := map[string]bool{}
		for _, o := range f.Options {
			if strings.TrimSpace(o.Name) == "" {
				return bad("an option has an empty name")
			}
			if strings.ContainsAny(o.Name, "\n\r\t") {
				return bad("option %q contains a line break or tab", o.Name)
			}
			if names[o.Name] {
				return bad("duplicate option %q", o.Name)
			}
			names[o.Name] = true
		}
		switch f.Kind {
		case Choice:
			if len(f.Options) < 2 {
				return bad("a choice needs at least 2 options, has %d", len(f.Options))
			}
		case Independent:
			if len(f.Options) < 1 {
				return bad("an independent field needs at least 1 label")
			}
		case Bool:
			if len(f.Options) != 0 {
				return bad("a bool field takes no options")
			}
		case Score:
			if len(f.Options) < 2 {
				return bad("a score needs at least 2 levels, has %d", len(f.Options))
			}
			for i, o := range f.Options {
				if math.IsNaN(o.Value) || math.IsInf(o.Value, 0) {
					return bad("level %q has no finite value", o.Name)
				}
				if i > 0 && o.Value <= f.Options[i-1].Value {
					return bad("levels must be in increasing order of value (%q after %q)", o.Name, f.Options[i-1].Name)
				}
			}
		case Catalog:
			if len(f.Options) < 1 {
				return bad("a catalog needs at least 1 entry")
			}
			if f.K < 1 || f.K > len(f.Options) {
				return bad("k = %d, but the catalog has %d entries (k must be 1..%d)", f.K, len(f.Options), len(f.Options))
			}
		case "":
			return bad("missing type (one of choice, independent, bool, score, catalog)")
		default:
			return bad("unknown type %q (one of choice, independent, bool, score, catalog)", f.Kind)
		}
	}
	if d := s.Decisions(); d > MaxDecisions {
		return &LimitError{"primitive decisions", d, MaxDecisions}
	}
	return nil
}

// ParseSchema reads a schema from JSON:
//
//	{"instructions": "...", "input_label": "Ticket", "layout": "input-first", "fields": [
//	  {"name": "priority", "question": "How urgent?", "type": "choice",
//	   "options": {"low": "can wait", "high": "today"}},
//	  {"name": "issues", "question": "Which problems?", "type": "independent",
//	   "labels": {"late delivery": "", "damaged item": ""}},
//	  {"name": "refund", "question": "Refund asked?", "type": "bool"},
//	  {"name": "anger", "question": "How angry?", "type": "score",
//	   "levels": {"1": "calm", "5": "furious"}},
//	  {"name": "tools", "question": "Which tools?", "type": "catalog",
//	   "entries": {"refund_order": "Refund an order", ...}, "k": 2}]}
//
// Options, labels and levels keep the order of the file. A level named by a
// number takes that value; other levels are given as
// [{"name": "mild", "description": "...", "value": 1}, ...].
func ParseSchema(data []byte) (*Schema, error) {
	var raw struct {
		Instructions string `json:"instructions"`
		InputLabel   string `json:"input_label"`
		Layout       string `json:"layout"`
		Fields       []struct {
			Name     string          `json:"name"`
			Question string          `json:"question"`
			Type     Kind            `json:"type"`
			Options  json.RawMessage `json:"options"`
			Labels   json.RawMessage `json:"labels"`
			Levels   json.RawMessage `json:"levels"`
			Entries  json.RawMessage `json:"entries"`
			K        int             `json:"k"`
		} `json:"fields"`
	}
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] != '{' && json.Valid(t) {
		what := map[byte]string{'[': "an array", '"': "a string", 'n': "null", 't': "a boolean", 'f': "a boolean"}[t[0]]
		if what == "" {
			what = "a number"
		}
		return nil, &SchemaError{Msg: fmt.Sprintf(`the schema must be a JSON object like {"fields": [...]}, but it is %s`, what)}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, &SchemaError{Msg: "invalid JSON: " + err.Error()}
	}
	if err := CheckLayout(raw.Layout); err != nil {
		return nil, &SchemaError{Msg: err.Error()}
	}
	s := &Schema{Instructions: raw.Instructions, InputLabel: raw.InputLabel}
	if raw.Layout == LayoutFieldsFirst {
		s.Layout = LayoutFieldsFirst // the default is written as ""
	}
	for _, rf := range raw.Fields {
		f := Field{Name: rf.Name, Question: rf.Question, Kind: rf.Type, K: rf.K}
		if rf.Type != Catalog && rf.K != 0 {
			return nil, &SchemaError{Field: rf.Name, Msg: "k is for catalog fields only"}
		}
		src, key := rf.Options, "options"
		switch rf.Type {
		case Independent:
			src, key = rf.Labels, "labels"
			if len(src) == 0 {
				src, key = rf.Options, "options"
			}
		case Score:
			src, key = rf.Levels, "levels"
		case Catalog:
			src, key = rf.Entries, "entries"
		}
		if len(src) > 0 {
			opts, err := parseOptions(src, rf.Type == Score)
			if err != nil {
				return nil, &SchemaError{Field: rf.Name, Msg: key + ": " + err.Error()}
			}
			f.Options = opts
		}
		s.Fields = append(s.Fields, f)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// parseOptions reads an ordered name→description object, or an array of
// names or of {"name", "description", "value"} objects.
func parseOptions(b json.RawMessage, numeric bool) ([]Option, error) {
	var out []Option
	var given []bool // whether a value was given
	b = bytes.TrimSpace(b)
	switch {
	case len(b) > 0 && b[0] == '{':
		dec := json.NewDecoder(bytes.NewReader(b))
		if _, err := dec.Token(); err != nil {
			return nil, err
		}
		for dec.More() {
			t, err := dec.Token()
			if err != nil {
				return nil, err
			}
			var desc string
			if err := dec.Decode(&desc); err != nil {
				return nil, fmt.Errorf("description of %q must be a string", t)
			}
			out = append(out, Option{Name: t.(string), Description: desc})
			given = append(given, false)
		}
	case len(b) > 0 && b[0] == '[':
		var items []json.RawMessage
		if err := json.Unmarshal(b, &items); err != nil {
			return nil, err
		}
		for _, it := range items {
			var name string
			if json.Unmarshal(it, &name) == nil {
				out = append(out, Option{Name: name})
				given = append(given, false)
				continue
			}
			var o struct {
				Name        string   `json:"name"`
				Description string   `json:"description"`
				Value       *float64 `json:"value"`
			}
			if err := json.Unmarshal(it, &o); err != nil {
				return nil, errors.New("each entry must be a name or {\"name\", \"description\", \"value\"}")
			}
			opt := Option{Name: o.Name, Description: o.Description}
			if o.Value != nil {
				opt.Value = *o.Value
			}
			out = append(out, opt)
			given = append(given, o.Value != nil)
		}
	default:
		return nil, errors.New("must be an object of name → description or an array")
	}
	if numeric {
		for i := range out {
			if given[i] {
				continue
			}
			v, err := strconv.ParseFloat(out[i].Name, 64)
			if err != nil {
				return nil, fmt.Errorf("level %q is not a number and has no value", out[i].Name)
			}
			out[i].Value = v
		}
	}
	return out, nil
}

// isNumber reports whether a level name is written as a JSON number.
func isNumber(s string) bool {
	var v json.Number
	return json.Unmarshal([]byte(s), &v) == nil && s == strings.TrimSpace(s)
}
