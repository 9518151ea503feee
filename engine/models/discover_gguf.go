package models

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	gemma4gguf "verdict/engine/gemma4/gguf"
	"verdict/engine/safefile"
)

// GGUFHeader is what discovery reads of a GGUF file: its metadata's
// architecture, name and file type, and whether its tensors include vision
// or audio towers.
type GGUFHeader struct {
	Architecture string
	Name         string
	// FileType is llama.cpp's general.file_type (-1 when absent).
	FileType      int
	Tensors       int
	Vision, Audio bool
}

// Bounds on a GGUF header read for discovery.
const (
	maxGGUFHeader  = 256 << 20 // metadata and tensor list (a vocabulary of 262k tokens fits)
	maxGGUFString  = 1 << 20
	maxGGUFKV      = 1 << 16
	maxGGUFTensors = 1 << 16
)

var errNotGGUF = errors.New("not a GGUF file")

// ReadGGUFHeader reads the metadata and tensor list at the start of a GGUF
// file (versions 2 and 3), skipping values it does not need, within fixed
// bounds.
func ReadGGUFHeader(path string) (*GGUFHeader, error) {
	f, _, err := safefile.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := &ggufReader{r: bufio.NewReaderSize(io.LimitReader(f, maxGGUFHeader), 1<<20)}
	h, err := r.header()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return h, nil
}

type ggufReader struct {
	r   *bufio.Reader
	err error
}

func (g *ggufReader) u32() uint32 {
	var b [4]byte
	if g.err == nil {
		_, g.err = io.ReadFull(g.r, b[:])
	}
	return binary.LittleEndian.Uint32(b[:])
}

func (g *ggufReader) u64() uint64 {
	var b [8]byte
	if g.err == nil {
		_, g.err = io.ReadFull(g.r, b[:])
	}
	return binary.LittleEndian.Uint64(b[:])
}

func (g *ggufReader) str() string {
	n := g.u64()
	if g.err != nil {
		return ""
	}
	if n > maxGGUFString {
		g.err = fmt.Errorf("a string of %d bytes", n)
		return ""
	}
	b := make([]byte, n)
	_, g.err = io.ReadFull(g.r, b)
	return string(b)
}

func (g *ggufReader) skip(n uint64) {
	if g.err == nil {
		_, g.err = g.r.Discard(int(min(n, maxGGUFHeader)))
	}
}

// GGUF value types.
const (
	ggufU8 = iota
	ggufI8
	ggufU16
	ggufI16
	ggufU32
	ggufI32
	ggufF32
	ggufBool
	ggufString
	ggufArray
	ggufU64
	ggufI64
	ggufF64
)

var ggufSizes = map[uint32]uint64{ggufU8: 1, ggufI8: 1, ggufBool: 1, ggufU16: 2, ggufI16: 2, ggufU32: 4, ggufI32: 4, ggufF32: 4, ggufU64: 8, ggufI64: 8, ggufF64: 8}

// value reads one value of type t; integers come back as int64, strings as
// string, anything else as nil (skipped).
func (g *ggufReader) value(t uint32, depth int) any {
	switch t {
	case ggufString:
		return g.str()
	case ggufU32, ggufI32:
		return int64(int32(g.u32()))
	case ggufArray:
		et, n := g.u32(), g.u64()
		if depth > 2 || n > maxGGUFHeader {
			g.err = fmt.Errorf("an array of %d values", n)
			return nil
		}
		if sz, ok := ggufSizes[et]; ok {
			g.skip(sz * n)
			return nil
		}
		for i := uint64(0); i < n && g.err == nil; i++ {
			g.value(et, depth+1)
		}
		return nil
	}
	if sz, ok := ggufSizes[t]; ok {
		g.skip(sz)
		return nil
	}
	g.err = fmt.Errorf("unknown metadata type %d", t)
	return nil
}

func (g *ggufReader) header() (*GGUFHeader, error) {
	if magic := g.u32(); g.err != nil || magic != 0x46554747 {
		return nil, errNotGGUF
	}
	if v := g.u32(); v != 2 && v != 3 {
		return nil, fmt.Errorf("GGUF version %d (2 and 3 are read)", v)
	}
	nt, nkv := g.u64(), g.u64()
	if nt > maxGGUFTensors || nkv > maxGGUFKV {
		return nil, fmt.Errorf("%d tensors and %d metadata keys: over the bounds", nt, nkv)
	}
	h := &GGUFHeader{FileType: -1, Tensors: int(nt)}
	for i := uint64(0); i < nkv && g.err == nil; i++ {
		key := g.str()
		v := g.value(g.u32(), 0)
		switch key {
		case "general.architecture":
			h.Architecture, _ = v.(string)
		case "general.name":
			h.Name, _ = v.(string)
		case "general.file_type":
			if n, ok := v.(int64); ok {
				h.FileType = int(n)
			}
		}
	}
	for i := uint64(0); i < nt && g.err == nil; i++ {
		name := g.str()
		g.skip(8 * uint64(g.u32())) // dimensions
		g.u32()                     // type
		g.u64()                     // offset
		switch {
		case strings.HasPrefix(name, "v.") || strings.HasPrefix(name, "vision_tower") || strings.Contains(name, "mm_input_projection"):
			h.Vision = true
		case strings.HasPrefix(name, "a.") || strings.HasPrefix(name, "audio_tower"):
			h.Audio = true
		}
	}
	if g.err != nil {
		return nil, fmt.Errorf("GGUF header: %w", g.err)
	}
	return h, nil
}

// GGUFFileTypes names llama.cpp's general.file_type values.
var GGUFFileTypes = map[int]string{
	0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
	10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M",
	16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S",
	22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M",
	28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0",
}

// quantFromName finds a quantisation in a GGUF file name
// ("gemma-3n-E2B-it-Q4_K_M.gguf" -> "Q4_K_M").
func quantFromName(name string) string {
	up := strings.ToUpper(name)
	best := ""
	for _, q := range GGUFFileTypes {
		if strings.Contains(up, q) && len(q) > len(best) {
			best = q
		}
	}
	return best
}

// MMProjInputs reports the towers of the mmproj file beside a Gemma 4 GGUF
// at path (the one OpenWith would take, gemma4gguf.FindMMProj): vision when
// its tensors include v.*, audio when they include a.*; neither when there
// is none, several, or its header cannot be read (OpenWith then says why).
func MMProjInputs(path string) (vision, audio bool) {
	mm, err := gemma4gguf.FindMMProj(filepath.Dir(path))
	if err != nil || mm == "" {
		return false, false
	}
	h, err := ReadGGUFHeader(mm)
	if err != nil || h.Architecture != gemma4gguf.MMProjArch {
		return false, false
	}
	return h.Vision, h.Audio
}
