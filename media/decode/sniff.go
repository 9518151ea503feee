package decode

import (
	"bytes"
	"encoding/binary"
)

// Kind is what a file holds.
type Kind int

// Kinds of media.
const (
	Unknown Kind = iota
	Image
	Audio
	Video
)

func (k Kind) String() string {
	switch k {
	case Image:
		return "image"
	case Audio:
		return "audio"
	case Video:
		return "video"
	}
	return "unknown"
}

// Format is a file format recognised from content.
type Format struct {
	Name string // e.g. "PNG", "WAV", "MP4"; "" when not recognised
	Kind Kind
	// Supported reports whether this package decodes it (images, audio) or,
	// for videos, whether the ffmpeg path in media/video is the way in.
	Supported bool
}

// Image and audio format names, as Format.Name and Error.Format report them.
const (
	PNG       = "PNG"
	JPEG      = "JPEG"
	GIF       = "GIF"
	WebP      = "WebP"
	BMP       = "BMP"
	WAV       = "WAV"
	MP3       = "MP3"
	FLAC      = "FLAC"
	OggVorbis = "Ogg Vorbis"
)

// SniffLen is how many leading bytes Sniff needs.
const SniffLen = 512

// Sniff recognises a format from the first bytes of a file (SniffLen is
// enough). It knows the supported formats and, to name them in errors, common
// unsupported ones (TIFF, HEIC, AVIF, AIFF, M4A, Opus, ...) and video
// containers.
func Sniff(head []byte) Format {
	h := head
	has := func(off int, sig string) bool {
		return len(h) >= off+len(sig) && string(h[off:off+len(sig)]) == sig
	}
	switch {
	case has(0, "\x89PNG\r\n\x1a\n"):
		return Format{PNG, Image, true}
	case has(0, "\xff\xd8\xff"):
		return Format{JPEG, Image, true}
	case has(0, "GIF87a"), has(0, "GIF89a"):
		return Format{GIF, Image, true}
	case has(0, "RIFF") && has(8, "WEBP"):
		return Format{WebP, Image, true}
	case has(0, "BM") && isBMP(h):
		return Format{BMP, Image, true}
	case has(0, "RIFF") && has(8, "WAVE"), has(0, "RIFX") && has(8, "WAVE"):
		return Format{WAV, Audio, true}
	case has(0, "RIFF") && has(8, "AVI "):
		return Format{"AVI", Video, true}
	case has(0, "fLaC"):
		return Format{FLAC, Audio, true}
	case has(0, "OggS"):
		return sniffOgg(h)
	case has(0, "ID3"):
		// An ID3v2 tag usually precedes MP3 frames; look past it.
		if len(h) >= 10 {
			size := int(h[6]&0x7f)<<21 | int(h[7]&0x7f)<<14 | int(h[8]&0x7f)<<7 | int(h[9]&0x7f)
			if rest := 10 + size; rest < len(h) && bytes.HasPrefix(h[rest:], []byte("fLaC")) {
				return Format{FLAC, Audio, true}
			}
		}
		return Format{MP3, Audio, true}
	case len(h) >= 2 && h[0] == 0xff && h[1]&0xe0 == 0xe0:
		switch (h[1] >> 1) & 3 { // layer
		case 1:
			return Format{MP3, Audio, true}
		case 0:
			return Format{"AAC (ADTS)", Audio, false}
		default:
			return Format{"MPEG audio layer I/II", Audio, false}
		}
	case has(0, "II*\x00"), has(0, "MM\x00*"):
		return Format{"TIFF", Image, false}
	case has(0, "8BPS"):
		return Format{"PSD", Image, false}
	case has(0, "\x00\x00\x01\x00"):
		return Format{"ICO", Image, false}
	case has(0, "\xff\x0a"), has(0, "\x00\x00\x00\x0cJXL "):
		return Format{"JPEG XL", Image, false}
	case has(0, "qoif"):
		return Format{"QOI", Image, false}
	case has(0, "FORM") && (has(8, "AIFF") || has(8, "AIFC")):
		return Format{"AIFF", Audio, false}
	case has(0, "#!AMR"):
		return Format{"AMR", Audio, false}
	case has(0, "caff"):
		return Format{"CAF", Audio, false}
	case has(0, "\x30\x26\xb2\x75\x8e\x66\xcf\x11"):
		return Format{"ASF/WMV", Video, true}
	case has(4, "ftyp"):
		return sniffFtyp(h)
	case has(0, "\x1a\x45\xdf\xa3"):
		if bytes.Contains(h, []byte("webm")) {
			return Format{"WebM", Video, true}
		}
		return Format{"Matroska", Video, true}
	case has(0, "FLV\x01"):
		return Format{"FLV", Video, true}
	case len(h) >= 189 && h[0] == 0x47 && h[188] == 0x47:
		return Format{"MPEG-TS", Video, true}
	case has(0, "\x00\x00\x01\xba"), has(0, "\x00\x00\x01\xb3"):
		return Format{"MPEG-PS", Video, true}
	case isSVG(h):
		return Format{"SVG", Image, false}
	}
	return Format{}
}

func isBMP(h []byte) bool {
	if len(h) < 18 {
		return len(h) >= 2
	}
	switch binary.LittleEndian.Uint32(h[14:18]) { // DIB header size
	case 12, 16, 40, 52, 56, 64, 108, 124:
		return true
	}
	return false
}

func sniffOgg(h []byte) Format {
	switch {
	case bytes.Contains(h, []byte("\x01vorbis")):
		return Format{OggVorbis, Audio, true}
	case bytes.Contains(h, []byte("OpusHead")):
		return Format{"Ogg Opus", Audio, false}
	case bytes.Contains(h, []byte("\x7fFLAC")):
		return Format{"Ogg FLAC", Audio, false}
	case bytes.Contains(h, []byte("Speex")):
		return Format{"Ogg Speex", Audio, false}
	case bytes.Contains(h, []byte("\x80theora")):
		return Format{"Ogg Theora", Video, true}
	}
	return Format{"Ogg", Audio, false}
}

func sniffFtyp(h []byte) Format {
	if len(h) < 12 {
		return Format{"MP4", Video, true}
	}
	brand := string(h[8:12])
	switch brand {
	case "heic", "heix", "heim", "heis", "hevc", "hevx", "mif1", "msf1":
		return Format{"HEIC", Image, false}
	case "avif", "avis":
		return Format{"AVIF", Image, false}
	case "M4A ", "M4B ", "M4P ", "F4A ":
		return Format{"M4A", Audio, false}
	case "qt  ":
		return Format{"QuickTime", Video, true}
	case "3gp4", "3gp5", "3gp6", "3g2a":
		return Format{"3GP", Video, true}
	}
	return Format{"MP4", Video, true}
}

func isSVG(h []byte) bool {
	t := bytes.TrimLeft(h, " \t\r\n\xef\xbb\xbf")
	if bytes.HasPrefix(t, []byte("<svg")) {
		return true
	}
	return bytes.HasPrefix(t, []byte("<?xml")) && bytes.Contains(h, []byte("<svg"))
}
