// Package build holds the tests of the build scripts (the scripts themselves
// are bash).
package build

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeTool writes an executable NAME into dir that prints out, whatever its
// arguments.
func fakeTool(t *testing.T, dir, name, out string) {
	t.Helper()
	script := "#!/bin/sh\nprintf '%s\\n' '" + strings.ReplaceAll(out, "'", `'\''`) + "'\n"
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// sysDir links the few system programs the scripts need into a folder, so
// that a test's PATH holds no real tool of the machine.
func sysDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, p := range []string{"grep", "awk", "head", "timeout", "dirname", "id", "mkdir", "ln"} {
		real, err := exec.LookPath(p)
		if err != nil {
			t.Skipf("%s is not installed: %v", p, err)
		}
		if err := os.Symlink(real, filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// bash runs script with args ($1, ...), PATH set to path and env; it returns
// the output and whether the script succeeded.
func bash(t *testing.T, path, script string, args, env []string) (string, bool) {
	t.Helper()
	sh, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	cmd := exec.Command(sh, append([]string{"-c", script, "bash"}, args...)...)
	cmd.Env = append([]string{"PATH=" + path, "HOME=" + t.TempDir()}, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

const (
	realConvert  = "Version: ImageMagick 6.9.11-60 Q16 x86_64 2021-01-25 https://imagemagick.org\nCopyright: (C) 1999-2021 ImageMagick Studio LLC"
	realChromium = "Chromium 131.0.6778.85 built on Debian GNU/Linux 12 (bookworm)"
)

// TestToolCheck: a tool is recognised by what it prints, so another program
// of the same name counts as missing.
func TestToolCheck(t *testing.T) {
	sys := sysDir(t)
	tools, _ := filepath.Abs("tools.sh")
	for _, c := range []struct {
		tool, prints string
		ok           bool
	}{
		{"convert", realConvert, true},
		{"convert", "Converts FAT volumes to NTFS.\n\nCONVERT volume /FS:NTFS [/V]", false},
		{"convert", "convert: ImageMagick is not installed here", false},
		{"chromium", realChromium, true},
		{"chromium", "Command '/usr/bin/chromium' requires the chromium snap to be installed.", false},
		{"ffmpeg", "ffmpeg version 5.1.6-0+deb12u1 Copyright (c) 2000-2024 the FFmpeg developers", true},
		{"ffmpeg", "usage: ffmpeg-wrapper FILE", false},
		{"espeak-ng", "eSpeak NG text-to-speech: 1.51  Data at: /usr/lib/x86_64-linux-gnu/espeak-ng-data", true},
		{"espeak-ng", "espeak-ng: command not found", false},
		{"cwebp", "Usage:\n\n   cwebp [options] -q quality input.png -o output.webp", true},
		{"cwebp", "1.2.4", false},
		{"djpeg", "libjpeg-turbo version 2.1.5 (build 20230203)", true},
		{"djpeg", "djpeg: not found", false},
		{"gcc", "gcc (Debian 12.2.0-14) 12.2.0\nCopyright (C) 2022 Free Software Foundation, Inc.", true},
		{"gcc", "gcc: this is a placeholder", false},
		{"g++", "g++ (Debian 12.2.0-14+deb12u1) 12.2.0\nCopyright (C) 2022 Free Software Foundation, Inc.", true},
		{"g++", "g++: a link to clang", false},
		{"perl", "perl 5.036000", true},
		{"perl", "This is perl 5, version 36", false}, // the probe did not run: not Perl
		{"curl", "curl 7.88.1 (x86_64-pc-linux-gnu) libcurl/7.88.1 OpenSSL/3.0.15", true},
		{"curl", "curl: a shell alias for wget", false},
		{"pkg-config", "usage: pkgconf [OPTIONS] [LIBRARIES]", true},
		{"pkg-config", "Usage:\n  pkg-config [OPTION...]", true},
		{"pkg-config", "1.8.1", false},
		{"Xvfb", "use: X [:<display>] [option]\n-fbdir directory       put framebuffers in mmap'ed files in directory", true},
		{"Xvfb", "Xvfb: stub", false},
		{"xwd", "/usr/bin/xwd: -display requires an argument\nUsage: /usr/bin/xwd [options] [-root| -id <wdid>| -name <wdname>] > mywddump", true},
		{"xwd", "xwd: unable to open display ''", false},
		{"xauth", "usage:  /usr/bin/xauth [-options ...] [command arg ...]", true},
		{"xauth", "1.1.2", false},
		{"node", "node 20.19.0", true},
		{"node", "v20.19.0", false}, // node -e did not run the probe: not Node.js
		{"npm", "npm <command>\n\nUsage:", true},
		{"npm", "10.8.2", false},
		{"go", "go version go1.26.0 linux/amd64", true},
		{"go", "go: the board game", false},
		{"sha256sum", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  -", true},
		{"sha256sum", "0000000000000000000000000000000000000000000000000000000000000000  -", false},
		{"tar", "tar (GNU tar) 1.34", true},
		{"tar", "tar: pitch", false},
	} {
		fake := t.TempDir()
		fakeTool(t, fake, c.tool, c.prints)
		out, ok := bash(t, fake+":"+sys, `source "$1"; tool_check "$2"`, []string{tools, c.tool}, nil)
		out = strings.TrimSpace(out)
		want := c.tool + ": missing ("
		if c.ok {
			want = c.tool + ": ok (" + filepath.Join(fake, c.tool) + ")"
		}
		if ok != c.ok || !strings.HasPrefix(out, want) {
			t.Errorf("%s printing %.40q: %v %q, want %v %q", c.tool, c.prints, ok, out, c.ok, want)
		}
	}
	// Not on the PATH at all.
	out, ok := bash(t, sys, `source "$1"; tool_check convert`, []string{tools}, nil)
	if ok || strings.TrimSpace(out) != "convert: missing (not on the PATH)" {
		t.Errorf("no convert: %v %q", ok, out)
	}
}

// TestRequireTool: when another program of the name comes first on the PATH,
// require_tool puts the real one first; with none it fails naming the other.
func TestRequireTool(t *testing.T) {
	sys := sysDir(t)
	tools, _ := filepath.Abs("tools.sh")
	impostor, real, links := t.TempDir(), t.TempDir(), t.TempDir()
	fakeTool(t, impostor, "convert", "Converts FAT volumes to NTFS.")
	fakeTool(t, real, "convert", realConvert)
	out, ok := bash(t, impostor+":"+real+":"+sys, `source "$1"; require_tool convert; type -P convert; convert -version`, []string{tools}, []string{"VERDICT_TOOLS_DIR=" + links})
	if !ok || !strings.Contains(out, filepath.Join(links, "convert")+"\n") || !strings.Contains(out, "Version: ImageMagick") {
		t.Errorf("require_tool with the real convert second: %v %q", ok, out)
	}
	out, ok = bash(t, impostor+":"+sys, `source "$1"; require_tool convert; echo still running`, []string{tools}, nil)
	want := "convert: missing (" + filepath.Join(impostor, "convert") + " is another program: `convert -version` printed \"Converts FAT volumes to NTFS.\")"
	if ok || strings.TrimSpace(out) != want {
		t.Errorf("require_tool with only another convert: %v %q, want %q", ok, out, want)
	}
}

// TestSetupAppInstallsImageMagick: setup-app.sh asks apt for ImageMagick
// when the `convert` on the PATH is another program, and stops naming it
// when there is still no real one afterwards.
func TestSetupAppInstallsImageMagick(t *testing.T) {
	sys := sysDir(t)
	fake := t.TempDir()
	log := filepath.Join(t.TempDir(), "apt.log")
	fakeTool(t, fake, "convert", "Converts FAT volumes to NTFS.")
	fakeTool(t, fake, "chromium", realChromium)
	fakeTool(t, fake, "Xvfb", "-fbdir directory       put framebuffers in mmap'ed files in directory")
	fakeTool(t, fake, "xvfb-run", "Usage: xvfb-run [OPTION ...] COMMAND")
	fakeTool(t, fake, "xauth", "usage:  xauth [-options ...] [command arg ...]")
	fakeTool(t, fake, "xwd", "Usage: xwd [options]")
	fakeTool(t, fake, "g++", "g++ (Debian 12.2.0-14) 12.2.0\nCopyright (C) 2022 Free Software Foundation, Inc.")
	fakeTool(t, fake, "perl", "perl 5.036000")
	fakeTool(t, fake, "node", "node 20.19.0")
	fakeTool(t, fake, "npm", "npm <command>")
	fakeTool(t, fake, "dpkg-query", "install ok installed")
	for _, name := range []string{"apt-get", "sudo"} {
		script := "#!/bin/sh\necho \"$*\" >>\"$APT_LOG\"\n"
		if name == "sudo" {
			script = "#!/bin/sh\nexec \"$@\"\n"
		}
		if err := os.WriteFile(filepath.Join(fake, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script, _ := filepath.Abs("setup-app.sh")
	out, ok := bash(t, fake+":"+sys, `"$BASH" "$1"`, []string{script}, []string{"VERDICT_APP_SETUP=test", "APT_LOG=" + log})
	apt, _ := os.ReadFile(log)
	if !strings.Contains(string(apt), "install -y -q --no-install-recommends imagemagick\n") {
		t.Errorf("apt-get calls %q, want an install of imagemagick alone; output:\n%s", apt, out)
	}
	if ok || !strings.Contains(out, "convert: missing ("+filepath.Join(fake, "convert")+" is another program") {
		t.Errorf("setup-app with no real convert after the install: %v\n%s", ok, out)
	}
}
