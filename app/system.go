package app

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"unicode/utf8"

	"verdict/engine/safefile"
	"verdict/engine/session"

	"github.com/sirupsen/logrus"
)

// Dialogs are the native dialogs of the window; the browser mode has none.
type Dialogs interface {
	// ChooseDirectory returns the chosen folder, or "" when cancelled.
	ChooseDirectory(title string) (string, error)
	// ChooseFiles returns the chosen files (none when cancelled).
	ChooseFiles(title string) ([]string, error)
	// SaveFile returns where to save, or "" when cancelled.
	SaveFile(title, defaultName string) (string, error)
}

// ErrNoDialogs is returned by the dialog methods in the browser mode.
var ErrNoDialogs = errors.New("native dialogs are only available in the desktop window")

// MaxTextFileBytes bounds a text file read as input.
const MaxTextFileBytes = 1 << 20

// Input file kinds.
const (
	KindText  = "text"
	KindImage = "image"
	KindAudio = "audio"
	KindVideo = "video"
	KindOther = "other"
)

// InputFile is a file offered as input: text files carry their text; image,
// audio and video files become media (System.ReadFiles adds them to the
// media service and says how in Media); other files say why they are not
// supported.
type InputFile struct {
	Name      string       `json:"name"`
	Path      string       `json:"path,omitempty"`
	Size      int64        `json:"size"`
	Kind      string       `json:"kind"`
	Supported bool         `json:"supported"`
	Reason    string       `json:"reason,omitempty"`
	Text      string       `json:"text,omitempty"`
	Media     *MediaResult `json:"media,omitempty"`
}

var kindByExt = map[string]string{
	".txt": KindText, ".md": KindText, ".markdown": KindText, ".json": KindText, ".jsonl": KindText,
	".csv": KindText, ".tsv": KindText, ".log": KindText, ".xml": KindText, ".html": KindText, ".htm": KindText,
	".yaml": KindText, ".yml": KindText, ".eml": KindText, ".rst": KindText, ".ini": KindText, ".toml": KindText,
	".png": KindImage, ".jpg": KindImage, ".jpeg": KindImage, ".gif": KindImage, ".webp": KindImage, ".bmp": KindImage,
	".wav": KindAudio, ".mp3": KindAudio, ".flac": KindAudio, ".ogg": KindAudio, ".m4a": KindAudio,
	".mp4": KindVideo, ".mov": KindVideo, ".mkv": KindVideo, ".webm": KindVideo, ".avi": KindVideo,
}

// ClassifyFile names a file's kind from its name and, when the name does not
// tell, from its first bytes.
func ClassifyFile(name string, head []byte) string {
	if k, ok := kindByExt[strings.ToLower(filepath.Ext(name))]; ok {
		return k
	}
	ct := http.DetectContentType(head)
	switch {
	case strings.HasPrefix(ct, "text/"):
		return KindText
	case strings.HasPrefix(ct, "image/"):
		return KindImage
	case strings.HasPrefix(ct, "audio/"):
		return KindAudio
	case strings.HasPrefix(ct, "video/"):
		return KindVideo
	}
	return KindOther
}

// ReadInputFile reads a file as input: the text of a text file; an image,
// audio or video file is only classified (the media service decodes it).
func ReadInputFile(path string) InputFile {
	f := InputFile{Name: filepath.Base(path), Path: path, Kind: KindOther}
	fh, st, err := safefile.Open(path) // a regular file: no device, FIFO or socket
	if err != nil {
		f.Reason = err.Error()
		return f
	}
	defer fh.Close()
	f.Size = st.Size()
	head := make([]byte, 512)
	n, _ := io.ReadFull(fh, head)
	f.Kind = ClassifyFile(path, head[:n])
	switch f.Kind {
	case KindText:
		if f.Size > MaxTextFileBytes {
			f.Reason = fmt.Sprintf("text file of %d bytes exceeds the limit of %d", f.Size, MaxTextFileBytes)
			return f
		}
		if _, err := fh.Seek(0, io.SeekStart); err != nil {
			f.Reason = err.Error()
			return f
		}
		b, err := safefile.ReadAll(fh, path, MaxTextFileBytes)
		if err != nil {
			f.Reason = err.Error()
			return f
		}
		if !utf8.Valid(b) {
			f.Reason = "not UTF-8 text"
			return f
		}
		f.Supported, f.Text = true, string(b)
	case KindImage, KindAudio, KindVideo:
		f.Supported = true // media: System.ReadFiles adds it to the media service
	default:
		f.Reason = "not a text, image, audio or video file"
	}
	return f
}

// SystemInfo describes where the UI runs.
type SystemInfo struct {
	Mode    string `json:"mode"` // "desktop" or "browser"
	Dialogs bool   `json:"dialogs"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
	Cores   int    `json:"cores"`
	Go      string `json:"go"`
	// SettingsPath is where settings are saved ("" for memory only).
	SettingsPath string `json:"settings_path"`
}

// System is the system service: environment, files and native dialogs.
type System struct {
	mode     string
	dialogs  Dialogs
	settings *Settings
	media    *Media
	log      *logrus.Logger
	onReady  func()
}

// FrontendLog logs a message from the page: level "error" for errors it did
// not handle (a script error, a rejected promise), "warning" for errors it
// showed the user. They show in the log viewer and fail the window's start-up
// check.
func (s *System) FrontendLog(level, message string) {
	if len(message) > 2000 {
		message = message[:2000] + "…"
	}
	e := s.log.WithField("mode", s.mode)
	if level == "error" {
		e.Error("frontend: " + message)
	} else {
		e.Warn("frontend: " + message)
	}
}

// FrontendReady is called by the page once it has loaded its state; it is
// logged (the window's start-up check waits for it).
func (s *System) FrontendReady(agent string) {
	s.log.WithFields(logrus.Fields{"mode": s.mode, "agent": agent}).Info("frontend ready")
	if s.onReady != nil {
		go s.onReady()
	}
}

// Info describes the environment.
func (s *System) Info() SystemInfo {
	return SystemInfo{
		Mode: s.mode, Dialogs: s.dialogs != nil, OS: runtime.GOOS, Arch: runtime.GOARCH,
		Cores: session.HostCores(), Go: runtime.Version(), SettingsPath: s.settings.Path(),
	}
}

// ReadFiles reads files given by path (dropped on the window or chosen):
// text files are returned with their text, image, audio and video files are
// added to the input's media (Media says what became of each).
func (s *System) ReadFiles(paths []string) []InputFile {
	out := make([]InputFile, 0, len(paths))
	media := false
	for _, p := range paths {
		f := ReadInputFile(p)
		if f.Supported && f.Kind != KindText && s.media != nil {
			r := s.media.addPath(p, f.Name, SourceFile)
			f.Media = &r
			f.Supported, f.Reason = r.Error == "", r.Error
			media = true
		}
		s.log.WithFields(logrus.Fields{"file": f.Name, "kind": f.Kind, "supported": f.Supported}).Debug("input file")
		out = append(out, f)
	}
	if media {
		s.media.changed()
	}
	return out
}

// ChooseFiles opens the file dialog and reads the chosen files.
func (s *System) ChooseFiles() ([]InputFile, error) {
	if s.dialogs == nil {
		return nil, ErrNoDialogs
	}
	ps, err := s.dialogs.ChooseFiles("Add input files: text, images, audio, video")
	if err != nil {
		return nil, err
	}
	return s.ReadFiles(ps), nil
}

// ModelFolderTitle is the model folder dialog's title: the checkpoints the
// loader opens (engine/models.OpenWith: Gemma 3n and Gemma 4).
const ModelFolderTitle = "Choose a Gemma 3n or Gemma 4 checkpoint folder (config.json, safetensors, tokenizer.json)"

// ChooseModelFolder opens the folder dialog for a model ("" when cancelled).
func (s *System) ChooseModelFolder() (string, error) {
	if s.dialogs == nil {
		return "", ErrNoDialogs
	}
	return s.dialogs.ChooseDirectory(ModelFolderTitle)
}

// SaveText asks where to save content and writes it there; it returns the
// path ("" when cancelled).
func (s *System) SaveText(defaultName, content string) (string, error) {
	if s.dialogs == nil {
		return "", ErrNoDialogs
	}
	p, err := s.dialogs.SaveFile("Export", defaultName)
	if err != nil || p == "" {
		return "", err
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		return "", err
	}
	s.log.WithField("path", p).Info("exported")
	return p, nil
}
