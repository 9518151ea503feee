package app

import (
	"embed"
	"fmt"

	"encoding/json"
	"strings"
	"verdict/engine/catalog"
)

// presetFS holds the built-in schemas: NAME.json (the schema, in the scorer's
// format) and NAME.meta.json (its name, description and a sample input).
//
//go:embed presets/*.json
var presetFS embed.FS

// presetOrder is the order the schema picker lists the presets in.
var presetOrder = []string{"ticket", "moderation", "review", "tools"}

// Preset is a built-in schema with a sample input.
type Preset struct {
	ID          string          `json:"id"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Sample      string          `json:"sample"`
	Schema      json.RawMessage `json:"schema"`
}

func presets() []Preset {
	var out []Preset
	for _, id := range presetOrder {
		schema, err := presetFS.ReadFile("presets/" + id + ".json")
		if id == "tools" {
			schema, err = toolsSchema()
		}
		if err != nil {
			continue
		}
		meta, _ := presetFS.ReadFile("presets/" + id + ".meta.json")
		p := Preset{ID: id, Schema: json.RawMessage(strings.TrimSpace(string(schema)))}
		json.Unmarshal(meta, &p)
		p.ID = id
		out = append(out, p)
	}
	return out
}

// toolsSchema is the "tools" preset's schema: the example tool catalog
// (catalog.Tools, 42 entries) as a catalog field naming the two tools a
// request needs.
func toolsSchema() ([]byte, error) {
	var b strings.Builder
	b.WriteString(`{"instructions": "Read the request and choose the tools that serve it.", "input_label": "Request", "fields": [` +
		`{"name": "tools", "question": "Which tools, in the order they are needed?", "type": "catalog", "k": 2, "entries": {`)
	for i, e := range catalog.Tools() {
		if i > 0 {
			b.WriteString(", ")
		}
		k, _ := json.Marshal(e.Name)
		v, _ := json.Marshal(e.Description)
		b.Write(k)
		b.WriteString(": ")
		b.Write(v)
	}
	b.WriteString(`}}]}`)
	return []byte(b.String()), nil
}

// PresetSchema is the built-in schema id's JSON ("ticket", "moderation",
// "review", "tools"), for the commands that take one by name.
func PresetSchema(id string) ([]byte, error) {
	for _, p := range presets() {
		if p.ID == id {
			return p.Schema, nil
		}
	}
	return nil, fmt.Errorf("no built-in schema %q (%s)", id, strings.Join(presetOrder, ", "))
}
