package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"verdict/engine/bench"
	"verdict/engine/models"
)

// defaultAudioTower is the full-size audio tower (hidden 1536, 12 layers,
// random weights) verdict bench times unless told otherwise, looked for
// under the working folder, the binary's and the folders above them.
const defaultAudioTower = "testdata/gemma3n-synthetic-audiofull.tar.gz"

// towerFlags are verdict bench's flags of the towers' section.
type towerFlags struct {
	on           *bool
	visionModel  *string
	audioTower   *string
	audioSeconds *float64
	runs         *int
}

func addTowerFlags(fs *flag.FlagSet) towerFlags {
	return towerFlags{
		on: fs.Bool("towers", true, "also time one image through the vision tower and a clip through the audio tower "+
			"(Gemma 3n E2B and E4B share them: one figure each serves both)"),
		visionModel: fs.String("vision-model", models.Builtin, "model whose vision tower to time (builtin holds the full-size MobileNetV5-300M; none: skip)"),
		audioTower: fs.String("audio-tower", "", "model folder or .tar.gz whose audio tower to time (none: skip; default: "+
			defaultAudioTower+" near the working folder or the binary, skipped when not found)"),
		audioSeconds: fs.Float64("audio-seconds", 30, "length of the audio clip, seconds (up to 30)"),
		runs:         fs.Int("tower-runs", 3, "timed runs of each tower after a warm-up run (the median is reported)"),
	}
}

// check validates the flags before anything is loaded.
func (f towerFlags) check() error {
	if !*f.on {
		return nil
	}
	if *f.runs < 1 || *f.runs > 100 {
		return usageErr("--tower-runs %d: want 1..100", *f.runs)
	}
	if s := *f.audioSeconds; !(s > 0 && s <= 30) {
		return usageErr("--audio-seconds %g: want more than 0 and at most 30", s)
	}
	if p := *f.audioTower; p != "" && p != "none" {
		if _, err := os.Stat(p); err != nil {
			return usageErr("--audio-tower %s: %v", p, errors.Unwrap(err))
		}
	}
	if strings.TrimSpace(*f.visionModel) == "" {
		return usageErr("--vision-model: empty (a model, or none to skip the vision tower)")
	}
	return nil
}

// findAudioTower looks for defaultAudioTower under each of dirs and the
// folders above them; "" when none holds it.
func findAudioTower(dirs ...string) string {
	for _, d := range dirs {
		for d != "" {
			p := filepath.Join(d, defaultAudioTower)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				return p
			}
			up := filepath.Dir(d)
			if up == d {
				break
			}
			d = up
		}
	}
	return ""
}

// measureTowers times the towers the flags ask for on opt's backend.
func measureTowers(ctx context.Context, f towerFlags, opt models.Options, stderr io.Writer, progress func(string, ...any)) (*bench.TowerReport, error) {
	r := &bench.TowerReport{SharedBy: bench.TowersSharedBy, Runs: *f.runs}
	if spec := strings.TrimSpace(*f.visionModel); spec == "none" {
		r.VisionSkipped = "--vision-model none"
	} else {
		progress("vision tower of %s: loading", spec)
		m, err := openModel(ctx, spec, opt, stderr)
		if err != nil {
			return nil, fmt.Errorf("--vision-model: %w", err)
		}
		v, err := func() (bench.VisionReport, error) {
			defer m.Close()
			vt, err := m.VisionTower()
			if err != nil {
				return bench.VisionReport{}, fmt.Errorf("--vision-model: %w", err)
			}
			defer vt.Release()
			progress("vision tower: measuring, %d runs after a warm-up", *f.runs)
			return bench.MeasureVision(ctx, vt, opt.Backend, nil, *f.runs)
		}()
		if err != nil {
			return nil, err
		}
		r.Vision = &v
	}
	path := *f.audioTower
	switch path {
	case "none":
		r.AudioSkipped = "--audio-tower none"
		return r, nil
	case "":
		wd, _ := os.Getwd()
		var exeDir string
		if exe, err := os.Executable(); err == nil {
			exeDir = filepath.Dir(exe)
		}
		if path = findAudioTower(wd, exeDir); path == "" {
			r.AudioSkipped = defaultAudioTower + " not found near the working folder or the binary; give --audio-tower"
			return r, nil
		}
	}
	progress("audio tower of %s: loading", path)
	at, closeTower, err := bench.OpenAudioTower(path, opt.Backend)
	if err != nil {
		return nil, fmt.Errorf("--audio-tower: %w", err)
	}
	defer closeTower()
	progress("audio tower: measuring %g s of audio, %d runs after a warm-up", *f.audioSeconds, *f.runs)
	a, err := bench.MeasureAudio(ctx, at, opt.Backend, bench.TestClip(*f.audioSeconds), *f.runs)
	if err != nil {
		return nil, err
	}
	r.Audio = &a
	return r, nil
}
