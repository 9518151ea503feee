package api

import (
	"encoding/json"
	"testing"

	"verdict/engine/models"
)

// TestModels: the built-in model is listed before and after it is loaded;
// once loaded it is the one marked loaded, with its towers known.
func TestModels(t *testing.T) {
	bare, _, _ := newAPI(t, false)
	ready, _, _ := newAPI(t, true)
	for _, c := range []struct {
		name, url string
		loaded    bool
	}{
		{"nothing loaded", bare.URL, false},
		{"built-in loaded", ready.URL, true},
	} {
		resp, b := call(t, "GET", c.url+"/v1/models", "", nil)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", c.name, resp.StatusCode, b)
		}
		var list ModelList
		if err := json.Unmarshal(b, &list); err != nil {
			t.Fatal(err)
		}
		var builtin []Model
		loaded := 0
		for _, m := range list.Models {
			if m.ID == models.Builtin {
				builtin = append(builtin, m)
			}
			if m.Loaded {
				loaded++
			}
			if m.ID == "" || m.Name == "" || m.Source == "" {
				t.Errorf("%s: incomplete entry %+v", c.name, m)
			}
		}
		if len(builtin) != 1 {
			t.Fatalf("%s: built-in model listed %d times in %s", c.name, len(builtin), b)
		}
		m := builtin[0]
		if m.Loaded != c.loaded || !m.RandomWeights || m.Source != "builtin" {
			t.Errorf("%s: built-in %+v", c.name, m)
		}
		if c.loaded {
			if loaded != 1 || m.State != "ready" || m.Towers.Vision == nil || m.Towers.Audio == nil || m.Params == 0 {
				t.Errorf("%s: %d loaded; built-in state %q towers %v/%v params %d", c.name, loaded, m.State, m.Towers.Vision, m.Towers.Audio, m.Params)
			}
		} else if loaded != 0 || m.Towers.Vision != nil {
			t.Errorf("%s: %d loaded; towers %+v", c.name, loaded, m.Towers)
		}
	}
}
