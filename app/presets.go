package app

import (
	"embed"
	"encoding/json"
	"strings"
)

// presetFS holds the built-in schemas: NAME.json (the schema, in the scorer's
// format) and NAME.meta.json (its name, description and a sample input).
//
//go:embed presets/*.json
var presetFS embed.FS

// presetOrder is the order the schema picker lists the presets in.
var presetOrder = []string{"ticket", "moderation", "review"}

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
