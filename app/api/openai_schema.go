package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"verdict/app"
	"verdict/engine/scorer"
)

// A json_schema response format maps onto a scorer schema, one field per
// property of the top-level object:
//
//	{"type": "string", "enum": [...]}            choice
//	{"anyOf"/"oneOf": [{"const": ..., "description": ...}, ...]}
//	                                             choice, with the options' descriptions
//	{"type": "boolean"}                          bool
//	{"type": "integer", "minimum": a, "maximum": b}
//	                                             score, levels a..b (at most maxLevels)
//	{"type": "integer" or "number", "enum": [...]}
//	                                             score, the levels in increasing order
//	{"type": "array", "items": <a string enum>}  independent: each label yes or no; the
//	                                             answer lists the labels more likely yes
//	{"type": "array", "items": <a string enum>, "minItems": k, "maxItems": k}
//	                                             catalog: exactly k distinct entries
//
// A property's description (else its title, else its name) is the field's
// question. Local references ("#/$defs/Name", "#/definitions/Name") are
// followed; annotations (title, description, default, examples, $schema,
// $id, $comment) are read past; any other keyword, and any other shape,
// is refused with the path of the part.

// maxLevels bounds an integer range's levels.
const maxLevels = 101

// maxExactInt is the largest integer whose successor is a float64 too
// (2^53 - 1): past it, counting levels one by one stalls.
const maxExactInt = 1<<53 - 1

// maxOptions bounds one property's enum (or consts): every option is
// written in the scorer's prompt, which holds at most
// scorer.MaxInputTokens tokens, so a longer list could never be scored.
const maxOptions = scorer.MaxInputTokens

// maxNesting bounds how deep anyOf/oneOf branches and the $refs they
// follow may nest: a reference cycle through anyOf would otherwise recurse
// without end.
const maxNesting = 8

// schemaField is a scorer field and how its answer is written.
type schemaField struct {
	kind scorer.Kind
}

// jsonNode is a JSON Schema node, with the keywords Verdict reads.
type jsonNode struct {
	keys             map[string]json.RawMessage
	Type             string
	Enum             []json.RawMessage
	Const            json.RawMessage
	Items            json.RawMessage
	Properties       []prop
	Description      string
	Title            string
	Minimum, Maximum *float64
	ExclMin, ExclMax *float64
	MinItems         *int
	MaxItems         *int
	UniqueItems      *bool
	Ref              string
	AnyOf            []json.RawMessage
}

type prop struct {
	name string
	raw  json.RawMessage
}

// keywords Verdict reads, and annotations it reads past.
var (
	schemaKeywords = map[string]bool{"type": true, "enum": true, "const": true, "items": true, "properties": true,
		"required": true, "additionalProperties": true, "description": true, "title": true, "minimum": true,
		"maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true, "minItems": true, "maxItems": true,
		"uniqueItems": true, "$ref": true, "anyOf": true, "oneOf": true, "$defs": true, "definitions": true}
	schemaAnnotations = map[string]bool{"default": true, "examples": true, "$schema": true, "$id": true, "$comment": true,
		"propertyOrdering": true}
)

// schemaMapper maps a JSON Schema onto a scorer schema.
type schemaMapper struct {
	defs map[string]json.RawMessage // "#/$defs/Name" → its schema
}

// parseNode reads a node at path.
func parseNode(raw json.RawMessage, path string) (*jsonNode, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil || keys == nil {
		return nil, badParam(path, "not a JSON Schema object")
	}
	n := &jsonNode{keys: keys}
	for k, v := range keys {
		if schemaAnnotations[k] {
			continue
		}
		if !schemaKeywords[k] {
			return nil, badParam(path, "keyword %q is not one Verdict can score with (it reads type, enum, const, items, properties, required, minimum, maximum, minItems, maxItems, uniqueItems, anyOf, oneOf, $ref, $defs)", k)
		}
		var err error
		switch k {
		case "type":
			if err = json.Unmarshal(v, &n.Type); err != nil {
				return nil, badParam(path+".type", "%s: give one type (a value that may be null is not a decision)", v)
			}
		case "enum":
			err = json.Unmarshal(v, &n.Enum)
		case "const":
			n.Const = v
		case "items":
			n.Items = v
		case "properties":
			n.Properties, err = orderedProps(v)
		case "description":
			err = json.Unmarshal(v, &n.Description)
		case "title":
			err = json.Unmarshal(v, &n.Title)
		case "minimum":
			err = json.Unmarshal(v, &n.Minimum)
		case "maximum":
			err = json.Unmarshal(v, &n.Maximum)
		case "exclusiveMinimum":
			err = json.Unmarshal(v, &n.ExclMin)
		case "exclusiveMaximum":
			err = json.Unmarshal(v, &n.ExclMax)
		case "minItems":
			err = json.Unmarshal(v, &n.MinItems)
		case "maxItems":
			err = json.Unmarshal(v, &n.MaxItems)
		case "uniqueItems":
			err = json.Unmarshal(v, &n.UniqueItems)
		case "$ref":
			err = json.Unmarshal(v, &n.Ref)
		case "anyOf", "oneOf":
			if n.AnyOf != nil {
				return nil, badParam(path, "both anyOf and oneOf")
			}
			err = json.Unmarshal(v, &n.AnyOf)
		case "additionalProperties":
			var b bool
			if json.Unmarshal(v, &b) != nil {
				return nil, badParam(path+".additionalProperties", "give false (or true): the answer has exactly the properties listed")
			}
		}
		if err != nil {
			return nil, badParam(path+"."+k, "%s does not read: %v", v, err)
		}
	}
	return n, nil
}

// orderedProps reads a properties object in the order written.
func orderedProps(raw json.RawMessage) ([]prop, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("properties must be an object")
	}
	var out []prop
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, prop{t.(string), v})
	}
	return out, nil
}

// resolve follows n's $ref (a chain of at most 8).
func (sm *schemaMapper) resolve(n *jsonNode, path string) (*jsonNode, error) {
	for i := 0; n.Ref != ""; i++ {
		raw, ok := sm.defs[n.Ref]
		if !ok || i == 8 {
			return nil, badParam(path+".$ref", "%q does not resolve: Verdict follows #/$defs/NAME and #/definitions/NAME", n.Ref)
		}
		next, err := parseNode(raw, path+"("+n.Ref+")")
		if err != nil {
			return nil, err
		}
		if next.Description == "" {
			next.Description = n.Description
		}
		if next.Title == "" {
			next.Title = n.Title
		}
		n = next
	}
	return n, nil
}

// mapJSONSchema maps response_format.json_schema.schema onto a scorer
// schema, the system message as its instructions.
func mapJSONSchema(raw json.RawMessage, instructions string) (*scorer.Schema, []schemaField, error) {
	const root = "response_format.json_schema.schema"
	sm := &schemaMapper{defs: map[string]json.RawMessage{}}
	n, err := parseNode(raw, root)
	if err != nil {
		return nil, nil, err
	}
	for _, k := range []string{"$defs", "definitions"} {
		if v, ok := n.keys[k]; ok {
			var defs map[string]json.RawMessage
			if json.Unmarshal(v, &defs) != nil {
				return nil, nil, badParam(root+"."+k, "must be an object of schemas")
			}
			for name, d := range defs {
				sm.defs["#/"+k+"/"+name] = d
			}
		}
	}
	if n.Type != "object" && !(n.Type == "" && n.Properties != nil) {
		return nil, nil, badParam(root+".type", "%q: the answer must be an object whose properties are the decisions", n.Type)
	}
	if len(n.Properties) == 0 {
		return nil, nil, badParam(root+".properties", "no properties: give at least one decision")
	}
	if len(n.Properties) > scorer.MaxFields {
		// Refused before any is mapped, as Validate would refuse them after.
		return nil, nil, &scorer.LimitError{What: "named fields", Value: len(n.Properties), Max: scorer.MaxFields}
	}
	s := &scorer.Schema{Instructions: instructions}
	var shapes []schemaField
	for _, p := range n.Properties {
		path := root + ".properties." + p.name
		f, err := sm.field(p.name, p.raw, path)
		if err != nil {
			return nil, nil, err
		}
		s.Fields = append(s.Fields, f)
		shapes = append(shapes, schemaField{f.Kind})
	}
	if err := s.Validate(); err != nil {
		return nil, nil, err
	}
	return s, shapes, nil
}

// field maps one property.
func (sm *schemaMapper) field(name string, raw json.RawMessage, path string) (scorer.Field, error) {
	f := scorer.Field{Name: name}
	n, err := parseNode(raw, path)
	if err != nil {
		return f, err
	}
	if n, err = sm.resolve(n, path); err != nil {
		return f, err
	}
	f.Question = strings.TrimSpace(n.Description)
	if f.Question == "" {
		f.Question = strings.TrimSpace(n.Title)
	}
	if f.Question == "" {
		f.Question = name
	}
	switch n.Type {
	case "boolean":
		f.Kind = scorer.Bool
		return f, nil
	case "string", "":
		opts, err := sm.stringOptions(n, path)
		if err != nil {
			if n.Type == "" && n.AnyOf == nil && n.Enum == nil {
				return f, badParam(path, "no type: give a string enum, a boolean, an integer range or an array of a string enum")
			}
			return f, err
		}
		f.Kind, f.Options = scorer.Choice, opts
		if len(opts) < 2 {
			return f, badParam(path+".enum", "one value: nothing to decide (give at least 2)")
		}
		return f, nil
	case "integer", "number":
		f.Kind = scorer.Score
		f.Options, err = levels(n, path)
		return f, err
	case "array":
		if len(n.Items) == 0 {
			return f, badParam(path+".items", "required: an enum of strings, the labels")
		}
		items, err := parseNode(n.Items, path+".items")
		if err != nil {
			return f, err
		}
		if items, err = sm.resolve(items, path+".items"); err != nil {
			return f, err
		}
		if items.Type != "string" && items.Type != "" {
			return f, badParam(path+".items.type", "%q: the items must be an enum of strings", items.Type)
		}
		f.Options, err = sm.stringOptions(items, path+".items")
		if err != nil {
			return f, err
		}
		if n.UniqueItems != nil && !*n.UniqueItems {
			return f, badParam(path+".uniqueItems", "false: the answer names each label at most once")
		}
		lo, hi := 0, len(f.Options)
		if n.MinItems != nil {
			lo = *n.MinItems
		}
		if n.MaxItems != nil {
			hi = *n.MaxItems
		}
		switch {
		case n.MinItems != nil && n.MaxItems != nil && lo == hi && lo >= 1:
			// Exactly k: the catalog decoder.
			if lo > len(f.Options) {
				return f, badParam(path+".minItems", "%d, but the enum has %d values", lo, len(f.Options))
			}
			f.Kind, f.K = scorer.Catalog, lo
		case lo == 0 && hi >= len(f.Options):
			f.Kind = scorer.Independent
		default:
			return f, badParam(path, "minItems %d, maxItems %d: Verdict answers each label on its own (leave the bounds out) or exactly k of them (minItems = maxItems = k)", lo, hi)
		}
		return f, nil
	case "object":
		return f, badParam(path, "a nested object is not a decision Verdict can score: make its properties top-level properties")
	case "null":
		return f, badParam(path, "type \"null\" is not a decision")
	}
	return f, badParam(path+".type", "%q is not a JSON Schema type Verdict can score", n.Type)
}

// stringOptions are a string node's options: its enum, its const's, or the
// consts of its anyOf/oneOf (with their descriptions).
func (sm *schemaMapper) stringOptions(n *jsonNode, path string) ([]scorer.Option, error) {
	return sm.options(n, path, 0)
}

// options are stringOptions' at depth levels of anyOf/oneOf below the
// property.
func (sm *schemaMapper) options(n *jsonNode, path string, depth int) ([]scorer.Option, error) {
	var out []scorer.Option
	seen := map[string]bool{}
	add := func(raw json.RawMessage, desc, at string) error {
		var v string
		if err := json.Unmarshal(raw, &v); err != nil {
			return badParam(at, "%s is not a string: choices are strings", raw)
		}
		if seen[v] {
			return badParam(at, "%q is listed twice", v)
		}
		if len(out) == maxOptions {
			return badParam(at, "more than %d options: the scorer's prompt lists every one and holds at most %d tokens", maxOptions, scorer.MaxInputTokens)
		}
		seen[v] = true
		out = append(out, scorer.Option{Name: v, Description: desc})
		return nil
	}
	switch {
	case n.Enum != nil:
		for i, e := range n.Enum {
			if err := add(e, "", fmt.Sprintf("%s.enum[%d]", path, i)); err != nil {
				return nil, err
			}
		}
	case n.Const != nil:
		if err := add(n.Const, n.Description, path+".const"); err != nil {
			return nil, err
		}
	case n.AnyOf != nil:
		if depth == maxNesting {
			return nil, badParam(path, "anyOf/oneOf nested more than %d deep (through $ref or written out): give the options as one enum or one anyOf of consts", maxNesting)
		}
		for i, raw := range n.AnyOf {
			at := fmt.Sprintf("%s.anyOf[%d]", path, i)
			b, err := parseNode(raw, at)
			if err != nil {
				return nil, err
			}
			if b, err = sm.resolve(b, at); err != nil {
				return nil, err
			}
			if b.Type == "null" {
				return nil, badParam(at, "null is not a decision: leave it out (every field is answered)")
			}
			opts, err := sm.options(b, at, depth+1)
			if err != nil {
				return nil, err
			}
			for _, o := range opts {
				if o.Description == "" {
					o.Description = b.Description
				}
				q, _ := json.Marshal(o.Name)
				if err := add(q, o.Description, at); err != nil {
					return nil, err
				}
			}
		}
	default:
		t := n.Type
		if t == "" {
			t = "string"
		}
		return nil, badParam(path, "type %q without enum is not a decision Verdict can score", t)
	}
	return out, nil
}

// levels are a number node's score levels: its enum in increasing order,
// or the integers from minimum to maximum.
func levels(n *jsonNode, path string) ([]scorer.Option, error) {
	var out []scorer.Option
	if n.Enum != nil {
		if len(n.Enum) > maxOptions {
			return nil, badParam(path+".enum", "%d levels, more than %d: the scorer's prompt lists every one and holds at most %d tokens", len(n.Enum), maxOptions, scorer.MaxInputTokens)
		}
		for i, e := range n.Enum {
			var v float64
			if err := json.Unmarshal(e, &v); err != nil {
				return nil, badParam(fmt.Sprintf("%s.enum[%d]", path, i), "%s is not a number", e)
			}
			if n.Type == "integer" && v != math.Trunc(v) {
				return nil, badParam(fmt.Sprintf("%s.enum[%d]", path, i), "%s is not an integer", e)
			}
			out = append(out, scorer.Option{Name: strings.TrimSpace(string(e)), Value: v})
		}
		sort.SliceStable(out, func(a, b int) bool { return out[a].Value < out[b].Value })
		for i := 1; i < len(out); i++ {
			if out[i].Value == out[i-1].Value {
				return nil, badParam(path+".enum", "%s is listed twice", out[i].Name)
			}
		}
		if len(out) < 2 {
			return nil, badParam(path+".enum", "one value: nothing to decide (give at least 2)")
		}
		return out, nil
	}
	if n.Type != "integer" {
		return nil, badParam(path, "type \"number\" without enum is not a decision Verdict can score: give an integer with minimum and maximum, or an enum of numbers")
	}
	lo, hi := n.Minimum, n.Maximum
	if n.ExclMin != nil {
		v := math.Floor(*n.ExclMin) + 1
		lo = &v
	}
	if n.ExclMax != nil {
		v := math.Ceil(*n.ExclMax) - 1
		hi = &v
	}
	if lo == nil || hi == nil {
		return nil, badParam(path, "type \"integer\" needs minimum and maximum (or an enum): the levels Verdict scores")
	}
	a, b := math.Ceil(*lo), math.Floor(*hi)
	if math.Abs(a) > maxExactInt || math.Abs(b) > maxExactInt {
		// From 2^53 a float64 skips integers: v+1 == v, and the levels
		// would never be counted out.
		return nil, badParam(path, "minimum %v, maximum %v: the bounds must lie within ±(2^53 - 1) (integers a JSON number holds exactly)", *lo, *hi)
	}
	if b < a+1 || b-a+1 > maxLevels {
		return nil, badParam(path, "minimum %v, maximum %v: give 2 to %d integer levels", *lo, *hi, maxLevels)
	}
	for i := range int(b-a) + 1 {
		v := a + float64(i)
		out = append(out, scorer.Option{Name: strconv.FormatFloat(v, 'f', -1, 64), Value: v})
	}
	return out, nil
}

// schemaAnswer writes the scorer's answer as the JSON Schema asks: an
// independent field as the list of its labels more likely yes, the others
// as the scorer writes them.
func schemaAnswer(s *scorer.Schema, shapes []schemaField, res *scorer.Result) (string, error) {
	var answer map[string]json.RawMessage
	if err := json.Unmarshal(res.Answer, &answer); err != nil {
		return "", err
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range s.Fields {
		if i > 0 {
			b.WriteString(", ")
		}
		k, _ := json.Marshal(f.Name)
		b.Write(k)
		b.WriteString(": ")
		v := answer[f.Name]
		if shapes[i].kind == scorer.Independent {
			yes := []string{}
			for _, fr := range res.Fields {
				if fr.Name != f.Name {
					continue
				}
				for _, l := range fr.Labels {
					if l.PYes > 0.5 {
						yes = append(yes, l.Label)
					}
				}
			}
			var err error
			if v, err = marshalNoEscape(yes); err != nil {
				return "", err
			}
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.String(), nil
}

func marshalNoEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	err := enc.Encode(v)
	return bytes.TrimSpace(b.Bytes()), err
}

// chatScore answers a json_schema request with the scorer: the user
// message's text and media are its input, the system message its
// instructions.
func (h *Handler) chatScore(w http.ResponseWriter, r *http.Request, req *ChatRequest, in *chatInput) {
	if in.turns > 1 {
		h.failOpenAI(w, badParam("messages", "the scorer reads one user message (after system messages), not a conversation"))
		return
	}
	schema, shapes, err := mapJSONSchema(req.ResponseFormat.JSONSchema.Schema, in.system)
	if err != nil {
		h.failOpenAI(w, err)
		return
	}
	input := strings.Join(in.texts, "\n\n")
	if strings.TrimSpace(input) == "" && in.media == nil {
		h.failOpenAI(w, badParam("messages", "the user message is empty"))
		return
	}
	set := app.DefaultPreferences().Run.Scorer
	opt := scorer.Options{BranchBatch: set.BranchBatch, Temperature: set.Temperature}
	if v := req.Verdict; v != nil {
		opt.Normalize = v.Normalize
		if v.Temperature != nil {
			opt.Temperature = *v.Temperature
		}
	}
	d, ctx, err := h.svc.Runs.Direct(r.Context(), req.Model)
	if err != nil {
		h.failOpenAI(w, err)
		return
	}
	defer d.Close()
	if in.media != nil {
		if err := d.CanTake(in.media); err != nil {
			h.failOpenAI(w, bad(CodeBadMedia, "messages: %v", err))
			return
		}
		opt.Media = func() (*scorer.Media, error) {
			p, err := d.Prepare(ctx, in.media)
			if err != nil {
				return nil, err
			}
			return &p.Media, nil
		}
	}
	res, err := d.Session.Score(ctx, schema, input, opt)
	if err != nil {
		if r.Context().Err() != nil {
			h.log.WithField("route", "chat/completions").Info("scoring stopped: the client went away")
			return
		}
		h.failOpenAI(w, err)
		return
	}
	info := &VerdictInfo{Score: &ScoreResponse{d.Info.Name, d.Info.RandomWeights, scorer.BackendJSON, res}}
	content, err := schemaAnswer(schema, shapes, res)
	if err != nil {
		h.failOpenAI(w, err)
		return
	}
	reply := AssistantReply{Role: "assistant", Content: &content}
	u := usage(res.PromptTokens, len(d.Session.Tokenizer().EncodePlain(content)))
	h.reply(w, req, modelName(req.Model, d), reply, FinishStop, u, info)
}

// reply writes a scorer's or the catalog decoder's answer: one JSON, or
// streamed as a chunk with the message, a chunk with the finish reason and
// the verdict field, and the usage's when asked.
func (h *Handler) reply(w http.ResponseWriter, req *ChatRequest, model string, reply AssistantReply, finish string, u *Usage, info *VerdictInfo) {
	id, created := newID("chatcmpl-"), time.Now().Unix()
	if req.Stream {
		st := newSSE(w)
		if st == nil {
			h.failOpenAI(w, &apiError{http.StatusInternalServerError, CodeEngine, "this connection cannot stream"})
			return
		}
		c := ChatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model, SystemFingerprint: fingerprint}
		c.Choices = []ChunkChoice{{Delta: ChunkDelta{Role: "assistant", Content: reply.Content, ToolCalls: reply.ToolCalls}}}
		st.send(c)
		c.Choices = []ChunkChoice{{Delta: ChunkDelta{}, FinishReason: &finish}}
		c.Verdict = info
		st.send(c)
		if req.StreamOptions.IncludeUsage {
			c.Choices, c.Usage, c.Verdict = []ChunkChoice{}, u, nil
			st.send(c)
		}
		st.done()
		return
	}
	for i := range reply.ToolCalls {
		reply.ToolCalls[i].Index = nil
	}
	writeJSON(w, http.StatusOK, ChatCompletion{ID: id, Object: "chat.completion", Created: created, Model: model,
		SystemFingerprint: fingerprint, Choices: []ChatChoice{{Message: reply, FinishReason: finish}}, Usage: u, Verdict: info})
}
