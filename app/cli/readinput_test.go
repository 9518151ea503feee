//go:build unix

package cli

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestCommandsRefuseSpecialFiles: the files a command reads (schema, input,
// examples) are regular files read through a size limit: a device or a FIFO
// is refused by name at once instead of read forever or waited on.
func TestCommandsRefuseSpecialFiles(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	schema := filepath.Join("..", "..", "engine", "scorer", "testdata", "ticket.json")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"score", "--schema", "/dev/zero", "--text", "x"}, "/dev/zero is a"},
		{[]string{"score", "--schema", fifo, "--text", "x"}, "is a FIFO"},
		{[]string{"score", "--schema", schema, "--text-file", "/dev/zero"}, "/dev/zero is a"},
		{[]string{"calibrate", "--schema", schema, "--examples", "/dev/zero", "--out", filepath.Join(t.TempDir(), "c.json")}, "/dev/zero is a"},
	} {
		code, _, errOut := run(c.args...)
		if code == 0 || !strings.Contains(errOut, c.want) || !strings.Contains(errOut, "not a regular file") {
			t.Errorf("%v: exit %d, stderr %q; want %q", c.args, code, errOut, c.want)
		}
	}
}
