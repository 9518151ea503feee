package models

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"verdict/engine/gemma3n"
	"verdict/engine/gemma4"
	"verdict/engine/hub"
	"verdict/engine/model"
	"verdict/engine/safefile"
	"verdict/engine/weights"
)

// The decoder families Verdict knows, as Local.Family and session info
// name them.
const (
	FamilyGemma3n = "gemma3n"
	FamilyGemma4  = "gemma4"
)

// FamilyName is how the app shows a family ("Gemma 3n", "Gemma 4"); an
// unknown one is shown as it is.
func FamilyName(family string) string {
	switch family {
	case FamilyGemma3n:
		return "Gemma 3n"
	case FamilyGemma4:
		return "Gemma 4"
	}
	return family
}

// FamilyOf is the family of an opened decoder ("" for one Verdict does not
// know).
func FamilyOf(m model.Model) string {
	switch m.(type) {
	case *gemma3n.Model:
		return FamilyGemma3n
	case *gemma4.Decoder:
		return FamilyGemma4
	}
	return ""
}

// Local is a Gemma 3n or Gemma 4 model found on disk.
type Local struct {
	// Spec is what to open: a Hub model id, a folder or a GGUF file.
	Spec string `json:"spec"`
	Name string `json:"name"`
	// Family is the decoder family: FamilyGemma3n or FamilyGemma4.
	Family string `json:"family"`
	// Source is SourceHub, SourceFolder, SourceOllama or SourceLMStudio.
	Source string `json:"source"`
	Path   string `json:"path"`
	// Format is "safetensors" or "gguf".
	Format    string `json:"format"`
	SizeBytes int64  `json:"size_bytes"`
	// Quant is the weights' type: BF16, F32, Q4_K_M, ... ("" unknown).
	Quant string `json:"quant,omitempty"`
	// Vision and Audio: the towers the checkpoint holds.
	Vision bool `json:"vision"`
	Audio  bool `json:"audio"`
}

// Where Local models come from.
const (
	SourceHub      = "huggingface"
	SourceFolder   = "folder"
	SourceOllama   = "ollama"
	SourceLMStudio = "lmstudio"
)

// Places are where Discover looks.
type Places struct {
	HubCache string   // the Hugging Face cache ("": none)
	Folders  []string // model folders opened before
	Ollama   string   // Ollama's models folder ("": none)
	LMStudio []string // LM Studio's models folders
}

// DefaultPlaces are the usual folders of the Hub cache, Ollama
// ($OLLAMA_MODELS or ~/.ollama/models) and LM Studio (~/.lmstudio/models,
// ~/.cache/lm-studio/models), with folders the caller remembers.
func DefaultPlaces(folders []string) Places {
	p := Places{HubCache: hub.CacheDir(), Folders: folders}
	home, err := os.UserHomeDir()
	if d := os.Getenv("OLLAMA_MODELS"); d != "" {
		p.Ollama = d
	} else if err == nil {
		p.Ollama = filepath.Join(home, ".ollama", "models")
	}
	if err == nil {
		p.LMStudio = []string{filepath.Join(home, ".lmstudio", "models"), filepath.Join(home, ".cache", "lm-studio", "models")}
	}
	return p
}

// maxDiscovered bounds the entries of one source.
const maxDiscovered = 512

// Discover lists the Gemma 3n and Gemma 4 models in p: Hub snapshots,
// folders and LM Studio models whose config.json names one of them
// (configFamily), GGUF files (Ollama's blobs, LM Studio's files) whose
// architecture is gemma3n or gemma4 (ggufFamily). A place that is
// missing or unreadable lists nothing; the same files found twice are
// listed once, the first source winning (Ollama's tags each once).
func Discover(p Places) []Local {
	var out []Local
	seen := map[string]bool{}
	add := func(l Local, ok bool) {
		key := l.Path
		if r, err := filepath.EvalSymlinks(l.Path); err == nil {
			key = r
		}
		if l.Source == SourceOllama { // tags share blobs (gemma3n:latest is gemma3n:e4b)
			key = "ollama:" + l.Name
		}
		if ok && !seen[key] {
			seen[key] = true
			out = append(out, l)
		}
	}
	if p.HubCache != "" {
		snaps, _ := hub.Cached(p.HubCache)
		for _, s := range snaps {
			if !s.Complete {
				continue
			}
			l, ok := safetensorsModel(s.Path)
			l.Source, l.Spec, l.Name = SourceHub, s.Path, s.Repo+"@"+s.Commit[:7]
			for _, r := range s.Refs {
				if r == "main" {
					l.Spec, l.Name = s.Repo, s.Repo
				}
			}
			add(l, ok)
		}
	}
	for _, d := range p.Folders {
		l, ok := safetensorsModel(d)
		l.Source = SourceFolder
		add(l, ok)
	}
	if p.Ollama != "" {
		for _, l := range ollamaModels(p.Ollama) {
			add(l, true)
		}
	}
	for _, d := range p.LMStudio {
		for _, l := range lmStudioModels(d) {
			add(l, true)
		}
	}
	return out
}

// safetensorsModel describes a checkpoint folder; ok is false unless its
// config.json is a Gemma 3n's or a Gemma 4's and its weights are there.
func safetensorsModel(dir string) (Local, bool) {
	l := Local{Spec: dir, Path: dir, Name: filepath.Base(filepath.Clean(dir)), Format: "safetensors"}
	b, err := safefile.ReadFile(filepath.Join(dir, "config.json"), MaxConfigBytes)
	if err != nil {
		return l, false
	}
	var cfg struct {
		ModelType     string   `json:"model_type"`
		Architectures []string `json:"architectures"`
		TorchDtype    string   `json:"torch_dtype"`
		Dtype         string   `json:"dtype"`
		Quant         *struct {
			Method string `json:"quant_method"`
			Bits   int    `json:"bits"`
		} `json:"quantization_config"`
		Text struct {
			TorchDtype string `json:"torch_dtype"`
			Dtype      string `json:"dtype"`
		} `json:"text_config"`
	}
	if json.Unmarshal(b, &cfg) != nil {
		return l, false
	}
	if l.Family = configFamily(cfg.ModelType, cfg.Architectures); l.Family == "" {
		return l, false
	}
	names, files := tensorNames(dir)
	if len(files) == 0 {
		return l, false
	}
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			l.SizeBytes += fi.Size()
		}
	}
	for _, n := range names {
		l.Vision = l.Vision || strings.HasPrefix(n, "model.vision_tower.")
		l.Audio = l.Audio || strings.HasPrefix(n, "model.audio_tower.")
	}
	dtype := firstOf(cfg.TorchDtype, cfg.Dtype, cfg.Text.TorchDtype, cfg.Text.Dtype)
	l.Quant = map[string]string{"bfloat16": "BF16", "float16": "F16", "float32": "F32"}[dtype]
	if l.Quant == "" && dtype != "" {
		l.Quant = strings.ToUpper(dtype)
	}
	if q := cfg.Quant; q != nil && q.Method != "" {
		l.Quant = q.Method
		if q.Bits > 0 {
			l.Quant += " " + strconv.Itoa(q.Bits) + "-bit"
		}
	}
	return l, true
}

func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// configFamily is the family a config.json's model_type and architectures
// name: Gemma 3n's (model_type gemma3n, gemma3n_text, an architecture
// Gemma3n…), Gemma 4's (model_type gemma4 or gemma4_text, architecture
// Gemma4ForConditionalGeneration or Gemma4ForCausalLM: transformers'
// gemma4; not its drafter, gemma4_assistant), or "".
func configFamily(modelType string, archs []string) string {
	switch {
	case strings.HasPrefix(modelType, "gemma3n"):
		return FamilyGemma3n
	case modelType == "gemma4" || modelType == "gemma4_text":
		return FamilyGemma4
	}
	for _, a := range archs {
		switch {
		case strings.HasPrefix(a, "Gemma3n"):
			return FamilyGemma3n
		case a == "Gemma4ForConditionalGeneration" || a == "Gemma4ForCausalLM":
			return FamilyGemma4
		}
	}
	return ""
}

// ggufFamily is the family of a GGUF file's general.architecture:
// llama.cpp's names (src/llama-arch.cpp, LLM_ARCH_NAMES) are "gemma3n" and
// "gemma4" ("gemma4-assistant", the drafter, is not a decoder to open).
func ggufFamily(arch string) string {
	switch arch {
	case "gemma3n":
		return FamilyGemma3n
	case "gemma4":
		return FamilyGemma4
	}
	return ""
}

// tensorNames lists a checkpoint's tensors (from its index, or from the
// header of its single file) and its weight files, nil when it cannot be
// read.
func tensorNames(dir string) (names, files []string) {
	names, files, err := weights.CheckpointNames(dir)
	if err != nil {
		return nil, nil
	}
	return names, files
}

// ggufModel describes a GGUF file; ok is false unless its architecture is
// gemma3n or gemma4.
func ggufModel(path, name, source string) (Local, bool) {
	l := Local{Spec: path, Path: path, Name: name, Source: source, Format: "gguf"}
	h, err := ReadGGUFHeader(path)
	if err != nil {
		return l, false
	}
	if l.Family = ggufFamily(h.Architecture); l.Family == "" {
		return l, false
	}
	if fi, err := os.Stat(path); err == nil {
		l.SizeBytes = fi.Size()
	}
	l.Quant = GGUFFileTypes[h.FileType]
	if l.Quant == "" {
		l.Quant = quantFromName(filepath.Base(path))
	}
	l.Vision, l.Audio = h.Vision, h.Audio
	if l.Family == FamilyGemma4 { // its towers are in an mmproj file beside it
		v, a := MMProjInputs(path)
		l.Vision, l.Audio = l.Vision || v, l.Audio || a
	}
	return l, true
}

// ollamaModels reads Ollama's manifests (manifests/HOST/NAMESPACE/MODEL/TAG)
// and describes the model layer of each, a GGUF blob; a projector layer
// means a vision tower.
func ollamaModels(dir string) []Local {
	var out []Local
	root := filepath.Join(dir, "manifests")
	paths, _ := filepath.Glob(filepath.Join(root, "*", "*", "*", "*"))
	sort.Strings(paths)
	for _, mp := range paths {
		if len(out) >= maxDiscovered {
			break
		}
		b, err := safefile.ReadFile(mp, 1<<20)
		if err != nil {
			continue
		}
		var man struct {
			Layers []struct {
				MediaType string `json:"mediaType"`
				Digest    string `json:"digest"`
			} `json:"layers"`
		}
		if json.Unmarshal(b, &man) != nil {
			continue
		}
		rel, _ := filepath.Rel(root, mp)
		parts := strings.Split(filepath.ToSlash(rel), "/") // host, namespace, model, tag
		name := parts[2] + ":" + parts[3]
		if parts[1] != "library" {
			name = parts[1] + "/" + name
		}
		if parts[0] != "registry.ollama.ai" {
			name = parts[0] + "/" + name
		}
		var model string
		projector := false
		for _, ly := range man.Layers {
			blob := ollamaBlob(dir, ly.Digest)
			switch ly.MediaType {
			case "application/vnd.ollama.image.model":
				model = blob
			case "application/vnd.ollama.image.projector":
				projector = blob != ""
			}
		}
		if model == "" {
			continue
		}
		if l, ok := ggufModel(model, name, SourceOllama); ok {
			l.Vision = l.Vision || projector
			out = append(out, l)
		}
	}
	return out
}

// ollamaBlob is the file of a digest "sha256:HEX" ("" when malformed).
func ollamaBlob(dir, digest string) string {
	hex, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hex) != 64 || strings.Trim(hex, "0123456789abcdef") != "" {
		return ""
	}
	return filepath.Join(dir, "blobs", "sha256-"+hex)
}

// lmStudioModels lists LM Studio's models (PUBLISHER/MODEL/FILE): GGUF
// files, their mmproj files counting as a vision tower, and checkpoint
// folders.
func lmStudioModels(dir string) []Local {
	var out []Local
	models, _ := filepath.Glob(filepath.Join(dir, "*", "*"))
	sort.Strings(models)
	for _, md := range models {
		if len(out) >= maxDiscovered {
			break
		}
		if fi, err := os.Stat(md); err != nil || !fi.IsDir() {
			continue
		}
		rel, _ := filepath.Rel(dir, md)
		if l, ok := safetensorsModel(md); ok {
			l.Source, l.Name = SourceLMStudio, filepath.ToSlash(rel)
			out = append(out, l)
			continue
		}
		ggufs, _ := filepath.Glob(filepath.Join(md, "*.gguf"))
		projector := false
		var weights []string
		for _, g := range ggufs {
			if strings.HasPrefix(strings.ToLower(filepath.Base(g)), "mmproj") {
				projector = true
			} else {
				weights = append(weights, g)
			}
		}
		for _, g := range weights {
			if l, ok := ggufModel(g, filepath.ToSlash(rel)+"/"+filepath.Base(g), SourceLMStudio); ok {
				l.Vision = l.Vision || projector
				out = append(out, l)
			}
		}
	}
	return out
}
