package bench

import (
	"strings"
	"testing"
)

// The report names the device the models ran on, when it is known.
func TestSuiteReportDevice(t *testing.T) {
	for _, tc := range []struct {
		device string
		want   bool
	}{{"cuda", true}, {"cpu", true}, {"", false}} {
		s := SuiteReport{Device: tc.device}.String()
		if got := strings.Contains(s, "device: "+tc.device+"\n"); got != tc.want {
			t.Errorf("device %q: report %q", tc.device, s)
		}
	}
}
