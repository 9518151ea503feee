package model

import (
	"strings"
	"testing"
)

func TestPLEPlaceOf(t *testing.T) {
	for _, c := range []struct {
		env  string
		p    PLEPlace
		want PLEPlace
		err  string
	}{
		{"", "", PLEAuto, ""},
		{"", PLEHost, PLEHost, ""},
		{"", PLEDevice, PLEDevice, ""},
		{"host", PLEDevice, PLEHost, ""},
		{"device", "", PLEDevice, ""},
		{"", "gpu", "", `gemma9: per-layer table place "gpu"`},
		{"everywhere", PLEAuto, "", `"everywhere": want auto, host or device`},
	} {
		t.Setenv("VERDICT_PLE", c.env)
		got, err := PLEPlaceOf("gemma9", c.p)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("VERDICT_PLE=%q, %q: err %v, want one containing %q", c.env, c.p, err, c.err)
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("VERDICT_PLE=%q, %q: %q, %v; want %q", c.env, c.p, got, err, c.want)
		}
	}
}
