package api

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"verdict/engine/scorer"
)

// openAPI is the part of docs/openapi.json the test reads.
type openAPI struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
			Enum       []string                   `json:"enum"`
		} `json:"schemas"`
	} `json:"components"`
}

func readOpenAPI(t *testing.T) (openAPI, []byte) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc openAPI
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("docs/openapi.json does not parse: %v", err)
	}
	return doc, b
}

// TestOpenAPIRoutes: docs/openapi.json is OpenAPI 3.1 and lists exactly the
// routes the handler serves, the earlier paths (Aliases) as deprecated;
// every route it lists is served.
func TestOpenAPIRoutes(t *testing.T) {
	doc, raw := readOpenAPI(t)
	if !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		t.Errorf("openapi %q, want 3.1.x", doc.OpenAPI)
	}
	var documented []string
	for p, ops := range doc.Paths {
		for m := range ops {
			documented = append(documented, strings.ToUpper(m)+" "+p)
		}
	}
	served := slices.Clone(Routes)
	for alias := range Aliases {
		served = append(served, alias)
		m, p, _ := strings.Cut(alias, " ")
		var op struct {
			Deprecated bool `json:"deprecated"`
		}
		if json.Unmarshal(doc.Paths[p][strings.ToLower(m)], &op); !op.Deprecated {
			t.Errorf("%s is documented as current: it is an earlier path of %s", alias, Aliases[alias])
		}
	}
	sort.Strings(documented)
	sort.Strings(served)
	if !slices.Equal(documented, served) {
		t.Errorf("documented %v, served %v", documented, served)
	}
	_, svc, _ := newAPI(t, false)
	h := New(svc, logrus.New())
	for _, rt := range documented {
		m, p, _ := strings.Cut(rt, " ")
		p = strings.Replace(p, "{id}", "builtin", 1)
		req := httptest.NewRequest(m, p, strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code == 404 || w.Code == 405 {
			t.Errorf("%s is documented but answers %d: %s", rt, w.Code, w.Body)
		}
	}
	// Every reference resolves.
	var refs []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && k == "$ref" {
					refs = append(refs, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	var all any
	json.Unmarshal(raw, &all)
	walk(all)
	for _, r := range refs {
		name, ok := strings.CutPrefix(r, "#/components/schemas/")
		if _, found := doc.Components.Schemas[name]; !ok || !found {
			t.Errorf("$ref %s does not resolve", r)
		}
	}
	if len(refs) == 0 {
		t.Error("no $ref found")
	}
}

// TestOpenAPISchemas: each documented schema has exactly the JSON fields of
// the type it describes, and the error codes are the handler's.
func TestOpenAPISchemas(t *testing.T) {
	doc, _ := readOpenAPI(t)
	for name, v := range map[string]any{
		"ScoreRequest": ScoreRequest{}, "Input": Input{}, "File": File{}, "ScoreResponse": ScoreResponse{},
		"FieldResult": scorer.FieldResult{}, "LabelResult": scorer.LabelResult{}, "Decision": scorer.Decision{},
		"Candidate": scorer.Candidate{}, "ScoreTimings": scorer.Timings{},
		"GenerateRequest": GenerateRequest{}, "Message": Message{}, "GenerateResponse": GenerateResponse{},
		"Done": Done{}, "Piece": Piece{}, "Timings": Timings{},
		"ModelList": ModelList{}, "Model": Model{}, "Towers": Towers{}, "Error": ErrorBody{}, "ErrorInfo": ErrorInfo{},
		"ChatRequest": ChatRequest{}, "ChatOptions": ChatOptions{}, "StreamOptions": StreamOptions{}, "ChatMessage": ChatMessage{},
		"ContentPart": ContentPart{}, "ImageURL": ImageURL{}, "InputAudio": InputAudio{}, "ResponseFormat": ResponseFormat{},
		"JSONSchema": JSONSchema{}, "Tool": Tool{}, "ToolFunction": ToolFunction{}, "ChatCompletion": ChatCompletion{},
		"ChatChoice": ChatChoice{}, "AssistantReply": AssistantReply{}, "ToolCall": ToolCall{}, "ToolCallFunction": ToolCallFunction{},
		"ChatLogprobs": ChatLogprobs{}, "TokenLogprob": TokenLogprob{}, "TopLogprob": TopLogprob{}, "VerdictInfo": VerdictInfo{},
		"GenerationInfo": GenerationInfo{}, "ChatChunk": ChatChunk{}, "ChunkChoice": ChunkChoice{}, "ChunkDelta": ChunkDelta{},
		"Usage": Usage{}, "CompletionRequest": CompletionRequest{}, "Completion": Completion{}, "CompletionChoice": CompletionChoice{},
		"CompletionLogprobs": CompletionLogprobs{}, "OpenAIModelList": OpenAIModelList{}, "OpenAIModel": OpenAIModel{},
		"OpenAIError": OpenAIErrorBody{}, "OpenAIErrorInfo": OpenAIErrorInfo{}, "ToolSelection": ToolSelection{},
		"SelectionStep": SelectionStep{}, "TokenProb": scorer.TokenProb{}, "SelectionTimings": SelectionTimings{},
	} {
		s, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("schema %s is not documented", name)
			continue
		}
		var got []string
		for p := range s.Properties {
			got = append(got, p)
		}
		want := jsonFields(reflect.TypeOf(v))
		sort.Strings(got)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("schema %s documents %v; the type has %v", name, got, want)
		}
	}
	var code struct {
		Enum []string `json:"enum"`
	}
	json.Unmarshal(doc.Components.Schemas["ErrorInfo"].Properties["code"], &code)
	want := slices.Clone(Codes)
	sort.Strings(code.Enum)
	sort.Strings(want)
	if !slices.Equal(code.Enum, want) {
		t.Errorf("documented codes %v, the handler's %v", code.Enum, want)
	}
	var typ struct {
		Enum []string `json:"enum"`
	}
	json.Unmarshal(doc.Components.Schemas["OpenAIErrorInfo"].Properties["type"], &typ)
	if !slices.Equal(typ.Enum, openAITypes) {
		t.Errorf("documented OpenAI error types %v, the handler's %v", typ.Enum, openAITypes)
	}
}

// jsonFields are the names encoding/json gives t's fields, embedded
// structs' fields included.
func jsonFields(t reflect.Type) []string {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		if f.Anonymous && tag == "" {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		out = append(out, tag)
	}
	return out
}
