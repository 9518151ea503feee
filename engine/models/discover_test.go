package models

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"verdict/engine/hub"
)

// ggufKV is one metadata entry of a test GGUF file.
type ggufKV struct {
	key string
	val any // string, uint32, float32, []string
}

// writeGGUF writes a GGUF v3 header with kvs and tensors named names, then
// pad bytes of data.
func writeGGUF(t *testing.T, path string, kvs []ggufKV, names []string, pad int) {
	t.Helper()
	var b bytes.Buffer
	w := func(v any) { binary.Write(&b, binary.LittleEndian, v) }
	str := func(s string) { w(uint64(len(s))); b.WriteString(s) }
	w(uint32(0x46554747))
	w(uint32(3))
	w(uint64(len(names)))
	w(uint64(len(kvs)))
	for _, kv := range kvs {
		str(kv.key)
		switch v := kv.val.(type) {
		case string:
			w(uint32(ggufString))
			str(v)
		case uint32:
			w(uint32(ggufU32))
			w(v)
		case float32:
			w(uint32(ggufF32))
			w(v)
		case []string:
			w(uint32(ggufArray))
			w(uint32(ggufString))
			w(uint64(len(v)))
			for _, s := range v {
				str(s)
			}
		case []int32:
			w(uint32(ggufArray))
			w(uint32(ggufI32))
			w(uint64(len(v)))
			w(v)
		}
	}
	for i, n := range names {
		str(n)
		w(uint32(2))
		w([]uint64{4, 4})
		w(uint32(12)) // Q4_K
		w(uint64(i * 64))
	}
	b.Write(make([]byte, pad))
	os.MkdirAll(filepath.Dir(path), 0o755)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func gemmaGGUF(fileType uint32) []ggufKV { return familyGGUF("gemma3n", fileType) }

// familyGGUF is gemmaGGUF's metadata for llama.cpp's architecture arch.
func familyGGUF(arch string, fileType uint32) []ggufKV {
	kvs := []ggufKV{{"general.architecture", arch}, {"general.name", "Gemma E2B It"},
		{"tokenizer.ggml.tokens", []string{"<pad>", "<eos>", "hello"}}, {"tokenizer.ggml.token_type", []int32{1, 2, 3}},
		{arch + ".rope.freq_base", float32(1e6)}}
	if fileType != 0 {
		kvs = append(kvs, ggufKV{"general.file_type", fileType})
	}
	return kvs
}

// writeCheckpoint writes a Gemma 3n folder: config.json with dtype, and its
// tensors in an index over two shards (sharded) or one model.safetensors.
func writeCheckpoint(t *testing.T, dir, modelType, dtype string, tensors []string, sharded bool) {
	t.Helper()
	os.MkdirAll(dir, 0o755)
	cfg, _ := json.Marshal(map[string]any{"model_type": modelType, "torch_dtype": dtype})
	os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644)
	hdr := map[string]any{}
	for i, n := range tensors {
		hdr[n] = map[string]any{"dtype": "BF16", "shape": []int{1}, "data_offsets": []int{2 * i, 2*i + 2}}
	}
	hj, _ := json.Marshal(hdr)
	var st bytes.Buffer
	binary.Write(&st, binary.LittleEndian, uint64(len(hj)))
	st.Write(hj)
	st.Write(make([]byte, 2*len(tensors)))
	if !sharded {
		os.WriteFile(filepath.Join(dir, "model.safetensors"), st.Bytes(), 0o644)
		return
	}
	wm := map[string]string{}
	for i, n := range tensors {
		wm[n] = fmt.Sprintf("model-%05d-of-00002.safetensors", i%2+1)
	}
	ij, _ := json.Marshal(map[string]any{"weight_map": wm})
	os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), ij, 0o644)
	for i := 1; i <= 2; i++ {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("model-%05d-of-00002.safetensors", i)), st.Bytes(), 0o644)
	}
}

// linkSnapshot lays dir out as the Hub cache's snapshot of repo at commit,
// its files moved into blobs, with refs.
func linkSnapshot(t *testing.T, cache, repo, commit, src string, refs ...string) string {
	t.Helper()
	rd := hub.RepoDir(cache, repo)
	snap := filepath.Join(rd, "snapshots", commit)
	os.MkdirAll(snap, 0o755)
	os.MkdirAll(filepath.Join(rd, "blobs"), 0o755)
	ents, _ := os.ReadDir(src)
	for i, e := range ents {
		blob := filepath.Join(rd, "blobs", fmt.Sprintf("%s%04d", commit[:8], i))
		os.Rename(filepath.Join(src, e.Name()), blob)
		os.Symlink(filepath.Join("..", "..", "blobs", filepath.Base(blob)), filepath.Join(snap, e.Name()))
	}
	for _, r := range refs {
		os.MkdirAll(filepath.Join(rd, "refs"), 0o755)
		os.WriteFile(filepath.Join(rd, "refs", r), []byte(commit), 0o644)
	}
	return snap
}

// TestDiscover fakes each place's layout: the Hub cache (a Gemma 3n repo
// at main, another commit, a Llama repo), a folder opened before (and the
// Hub snapshot opened as a folder: listed once), Ollama's manifests and
// blobs, LM Studio's publisher/model folders with GGUF and mmproj files.
func TestDiscover(t *testing.T) {
	root := t.TempDir()
	full := []string{"model.language_model.embed_tokens.weight", "model.vision_tower.timm_model.conv_stem.conv.weight", "model.audio_tower.subsample_conv_projection.conv_0.conv.weight"}
	text := []string{"model.language_model.embed_tokens.weight", "model.language_model.layers.0.self_attn.q_proj.weight"}

	cache := filepath.Join(root, "hf", "hub")
	c1, c2, c3 := strings.Repeat("a", 40), strings.Repeat("b", 40), strings.Repeat("c", 40)
	writeCheckpoint(t, filepath.Join(root, "src1"), "gemma3n", "bfloat16", full, true)
	snap1 := linkSnapshot(t, cache, "google/gemma-3n-E2B-it", c1, filepath.Join(root, "src1"), "main")
	writeCheckpoint(t, filepath.Join(root, "src2"), "gemma3n", "float32", text, false)
	linkSnapshot(t, cache, "google/gemma-3n-E4B", c2, filepath.Join(root, "src2"))
	writeCheckpoint(t, filepath.Join(root, "src3"), "llama", "bfloat16", text, false)
	linkSnapshot(t, cache, "meta/llama", c3, filepath.Join(root, "src3"), "main")
	c4, c5 := strings.Repeat("d", 40), strings.Repeat("e", 40)
	writeCheckpoint(t, filepath.Join(root, "src4"), "gemma4", "bfloat16", full, true)
	linkSnapshot(t, cache, "google/gemma-4-E2B-it", c4, filepath.Join(root, "src4"), "main")
	writeCheckpoint(t, filepath.Join(root, "src5"), "gemma4_assistant", "bfloat16", text, false)
	linkSnapshot(t, cache, "google/gemma-4-E2B-it-assistant", c5, filepath.Join(root, "src5"), "main")

	folder := filepath.Join(root, "my-gemma")
	writeCheckpoint(t, folder, "gemma3n", "float16", text, false)
	notGemma := filepath.Join(root, "other")
	writeCheckpoint(t, notGemma, "gemma3", "float16", text, false)

	ollama := filepath.Join(root, "ollama")
	writeGGUF(t, filepath.Join(ollama, "blobs", "sha256-"+strings.Repeat("1", 64)), gemmaGGUF(15), []string{"token_embd.weight", "blk.0.attn_q.weight"}, 1000)
	writeGGUF(t, filepath.Join(ollama, "blobs", "sha256-"+strings.Repeat("2", 64)), []ggufKV{{"general.architecture", "llama"}}, nil, 10)
	writeGGUF(t, filepath.Join(ollama, "blobs", "sha256-"+strings.Repeat("3", 64)), familyGGUF("gemma4", 15), []string{"token_embd.weight"}, 100)
	manifest := func(path, digest string, projector bool) {
		layers := []map[string]any{{"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:" + digest}, {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + strings.Repeat("9", 64)}}
		if projector {
			layers = append(layers, map[string]any{"mediaType": "application/vnd.ollama.image.projector", "digest": "sha256:" + digest})
		}
		b, _ := json.Marshal(map[string]any{"schemaVersion": 2, "layers": layers})
		os.MkdirAll(filepath.Dir(path), 0o755)
		os.WriteFile(path, b, 0o644)
	}
	manifest(filepath.Join(ollama, "manifests", "registry.ollama.ai", "library", "gemma3n", "e2b"), strings.Repeat("1", 64), false)
	manifest(filepath.Join(ollama, "manifests", "registry.ollama.ai", "someone", "gemma3n-vision", "latest"), strings.Repeat("1", 64), true)
	manifest(filepath.Join(ollama, "manifests", "registry.ollama.ai", "library", "llama3", "8b"), strings.Repeat("2", 64), false)
	manifest(filepath.Join(ollama, "manifests", "registry.ollama.ai", "library", "gemma4", "e4b"), strings.Repeat("3", 64), false)
	manifest(filepath.Join(ollama, "manifests", "registry.ollama.ai", "library", "broken", "x"), "../../../etc/passwd", false)

	lms := filepath.Join(root, "lmstudio")
	writeGGUF(t, filepath.Join(lms, "lmstudio-community", "gemma-3n-E4B-it-GGUF", "gemma-3n-E4B-it-Q8_0.gguf"), gemmaGGUF(0), []string{"token_embd.weight"}, 500)
	writeGGUF(t, filepath.Join(lms, "lmstudio-community", "gemma-3n-E4B-it-GGUF", "mmproj-gemma-3n-F16.gguf"), []ggufKV{{"general.architecture", "clip"}}, []string{"v.patch_embd.weight"}, 10)
	writeGGUF(t, filepath.Join(lms, "unsloth", "gemma-3n-E2B-it-GGUF", "gemma-3n-E2B-it-BF16.gguf"), gemmaGGUF(32), nil, 10)
	writeCheckpoint(t, filepath.Join(lms, "mlx-community", "gemma-3n-E2B-it-bf16"), "gemma3n_text", "bfloat16", text, false)
	writeCheckpoint(t, filepath.Join(lms, "mlx-community", "gemma-4-E4B-it-bf16"), "gemma4_text", "bfloat16", text, false)
	writeGGUF(t, filepath.Join(lms, "unsloth", "gemma-4-31B-it-GGUF", "gemma-4-31B-it-Q4_K_M.gguf"), familyGGUF("gemma4", 15), nil, 10)
	writeGGUF(t, filepath.Join(lms, "unsloth", "gemma-4-31B-it-GGUF", "gemma-4-31B-it-assistant.gguf"), familyGGUF("gemma4-assistant", 15), nil, 10)
	os.WriteFile(filepath.Join(lms, "unsloth", "gemma-3n-E2B-it-GGUF", "notes.gguf"), []byte("not a gguf"), 0o644)

	got := Discover(Places{HubCache: cache, Folders: []string{folder, notGemma, snap1, filepath.Join(root, "gone")}, Ollama: ollama,
		LMStudio: []string{lms, filepath.Join(root, "no-such")}})
	var lines []string
	for _, l := range got {
		lines = append(lines, fmt.Sprintf("%s %s %s %s %s vision=%v audio=%v", l.Family, l.Source, l.Name, l.Format, l.Quant, l.Vision, l.Audio))
	}
	want := []string{
		"gemma3n huggingface google/gemma-3n-E2B-it safetensors BF16 vision=true audio=true",
		"gemma3n huggingface google/gemma-3n-E4B@bbbbbbb safetensors F32 vision=false audio=false",
		"gemma4 huggingface google/gemma-4-E2B-it safetensors BF16 vision=true audio=true",
		"gemma3n folder my-gemma safetensors F16 vision=false audio=false",
		"gemma3n ollama gemma3n:e2b gguf Q4_K_M vision=false audio=false",
		"gemma4 ollama gemma4:e4b gguf Q4_K_M vision=false audio=false",
		"gemma3n ollama someone/gemma3n-vision:latest gguf Q4_K_M vision=true audio=false",
		"gemma3n lmstudio lmstudio-community/gemma-3n-E4B-it-GGUF/gemma-3n-E4B-it-Q8_0.gguf gguf Q8_0 vision=true audio=false",
		"gemma3n lmstudio mlx-community/gemma-3n-E2B-it-bf16 safetensors BF16 vision=false audio=false",
		"gemma4 lmstudio mlx-community/gemma-4-E4B-it-bf16 safetensors BF16 vision=false audio=false",
		"gemma3n lmstudio unsloth/gemma-3n-E2B-it-GGUF/gemma-3n-E2B-it-BF16.gguf gguf BF16 vision=false audio=false",
		"gemma4 lmstudio unsloth/gemma-4-31B-it-GGUF/gemma-4-31B-it-Q4_K_M.gguf gguf Q4_K_M vision=false audio=false",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("found\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if len(got) > 0 && (got[0].Spec != "google/gemma-3n-E2B-it" || got[0].SizeBytes <= 0) {
		t.Errorf("the Hub entry: spec %q, %d bytes", got[0].Spec, got[0].SizeBytes)
	}
	if len(got) > 4 && (got[4].SizeBytes < 1000 || !strings.HasPrefix(filepath.Base(got[4].Path), "sha256-")) {
		t.Errorf("the Ollama entry: %+v", got[4])
	}
}

// TestReadGGUFHeaderBounds: truncated and hostile headers give errors, not
// panics or huge allocations.
func TestReadGGUFHeaderBounds(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.gguf")
	writeGGUF(t, good, gemmaGGUF(15), []string{"a.conv1d.0.weight", "v.blk.0.attn.weight"}, 0)
	h, err := ReadGGUFHeader(good)
	if err != nil || h.Architecture != "gemma3n" || h.FileType != 15 || !h.Vision || !h.Audio || h.Tensors != 2 || h.Name != "Gemma E2B It" {
		t.Fatalf("%+v, %v", h, err)
	}
	b, _ := os.ReadFile(good)
	huge := append([]byte(nil), b[:24]...)
	huge = binary.LittleEndian.AppendUint64(huge, 1<<60) // a key of 2^60 bytes
	for _, tc := range []struct {
		name string
		data []byte
		says string
	}{
		{"truncated", b[:len(b)-9], "GGUF header"},
		{"not gguf", []byte("GGML...................."), "not a GGUF file"},
		{"version 1", append([]byte("GGUF\x01\x00\x00\x00"), b[8:]...), "version 1"},
		{"huge string", huge, "a string of"},
		{"many tensors", append(append([]byte("GGUF\x03\x00\x00\x00"), binary.LittleEndian.AppendUint64(nil, 1<<40)...), b[16:]...), "over the bounds"},
	} {
		p := filepath.Join(dir, tc.name)
		os.WriteFile(p, tc.data, 0o644)
		if _, err := ReadGGUFHeader(p); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.says)
		}
	}
	for name, want := range map[string]string{"gemma-3n-E2B-it-Q4_K_M.gguf": "Q4_K_M", "x-bf16.gguf": "BF16", "x-f16.gguf": "F16", "gemma.gguf": ""} {
		if got := quantFromName(name); got != want {
			t.Errorf("quantFromName(%q) = %q, want %q", name, got, want)
		}
	}
}

// A checkpoint folder whose index or header would parse into more than
// weights.HeaderBudget is not listed, and listing it allocates a bounded
// amount (the index is read into memory; the single file's header is
// parsed where the file is mapped).
func TestDiscoverHostileCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		data       func() []byte
		maxAlloc   uint64
	}{
		{"index of nine million entries", "model.safetensors.index.json", func() []byte {
			return []byte(`{"weight_map":{` + strings.Repeat(`"":"s",`, 9_000_000) + `"":"s"}}`)
		}, 2*63<<20 + 32<<20},
		{"header of 1.3 million tensors", "model.safetensors", func() []byte {
			var b bytes.Buffer
			b.WriteString("{")
			for i := range 1_300_000 {
				fmt.Fprintf(&b, `"%07d":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},`, i)
			}
			b.WriteString(`"__metadata__":{}}`)
			return append(binary.LittleEndian.AppendUint64(nil, uint64(b.Len())), b.Bytes()...)
		}, 32 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "hostile")
			writeCheckpoint(t, dir, "gemma3n", "bfloat16", []string{"a"}, false)
			if err := os.WriteFile(filepath.Join(dir, tc.file), tc.data(), 0o644); err != nil {
				t.Fatal(err)
			}
			var got []Local
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			got = Discover(Places{Folders: []string{dir}})
			runtime.ReadMemStats(&after)
			n := after.TotalAlloc - before.TotalAlloc
			t.Logf("%.1f MB allocated", float64(n)/(1<<20))
			if len(got) != 0 {
				t.Errorf("listed %+v", got)
			}
			if n > tc.maxAlloc {
				t.Errorf("listing allocated %d bytes, over %d", n, tc.maxAlloc)
			}
		})
	}
}

// TestConfigFamily: a config.json's model_type or architectures name the
// family; Gemma 3 and Gemma 4's drafter are neither.
func TestConfigFamily(t *testing.T) {
	for _, tc := range []struct {
		modelType string
		archs     []string
		want      string
	}{
		{"gemma3n", nil, FamilyGemma3n},
		{"gemma3n_text", nil, FamilyGemma3n},
		{"", []string{"Gemma3nForConditionalGeneration"}, FamilyGemma3n},
		{"gemma4", nil, FamilyGemma4},
		{"gemma4_text", nil, FamilyGemma4},
		{"", []string{"Gemma4ForConditionalGeneration"}, FamilyGemma4},
		{"", []string{"Gemma4ForCausalLM"}, FamilyGemma4},
		{"gemma4_assistant", []string{"Gemma4AssistantForCausalLM"}, ""},
		{"gemma3", []string{"Gemma3ForConditionalGeneration"}, ""},
		{"llama", []string{"LlamaForCausalLM"}, ""},
	} {
		if got := configFamily(tc.modelType, tc.archs); got != tc.want {
			t.Errorf("model_type %q, architectures %v: family %q, want %q", tc.modelType, tc.archs, got, tc.want)
		}
	}
	for arch, want := range map[string]string{"gemma3n": FamilyGemma3n, "gemma4": FamilyGemma4, "gemma4-assistant": "", "gemma3": ""} {
		if got := ggufFamily(arch); got != want {
			t.Errorf("GGUF architecture %q: family %q, want %q", arch, got, want)
		}
	}
	for f, want := range map[string]string{FamilyGemma3n: "Gemma 3n", FamilyGemma4: "Gemma 4", "other": "other"} {
		if got := FamilyName(f); got != want {
			t.Errorf("FamilyName(%q) = %q, want %q", f, got, want)
		}
	}
}
