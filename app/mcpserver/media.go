package mcpserver

import (
	"encoding/base64"
	"fmt"
	"strings"

	"verdict/media"
	"verdict/media/decode"
	"verdict/media/limits"
)

// decodeMedia decodes score's images and audio (nil without any), each
// error naming its argument.
func decodeMedia(images []string, audio string) (*media.Input, error) {
	if len(images) == 0 && audio == "" {
		return nil, nil
	}
	if len(images) > limits.MaxImages {
		return nil, fmt.Errorf("argument \"images\": %d images, over the limit of %d", len(images), limits.MaxImages)
	}
	in := &media.Input{}
	for i, s := range images {
		name := fmt.Sprintf("images[%d]", i)
		data, err := decodeData(s)
		if err != nil {
			return nil, fmt.Errorf("argument %q: %v", name, err)
		}
		img, _, err := decode.DecodeImage(name, data)
		if err == nil {
			err = in.AddImage(name, img)
		}
		if err != nil {
			return nil, fmt.Errorf("argument %q: %v", name, err)
		}
	}
	if audio != "" {
		data, err := decodeData(audio)
		if err != nil {
			return nil, fmt.Errorf("argument \"audio\": %v", err)
		}
		snd, err := decode.DecodeAudio("audio", data, limits.MaxAudio)
		if err == nil {
			err = in.SetAudio("audio", snd.Clip)
		}
		if err != nil {
			return nil, fmt.Errorf("argument \"audio\": %v", err)
		}
	}
	if err := in.Validate(); err != nil {
		return nil, fmt.Errorf("the media: %v", err)
	}
	return in, nil
}

// decodeData reads a file's bytes from standard base64 (padded or not, line
// breaks ignored) or from a base64 data: URL.
func decodeData(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if rest, ok := strings.CutPrefix(s, "data:"); ok {
		meta, payload, ok := strings.Cut(rest, ",")
		if !ok {
			return nil, fmt.Errorf("a data: URL without a comma")
		}
		if !strings.HasSuffix(strings.ToLower(meta), ";base64") {
			return nil, fmt.Errorf("a data: URL must be base64 (data:image/png;base64,...), not %q", "data:"+meta)
		}
		s = payload
	}
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == ' ' || r == '\t' {
			return -1
		}
		return r
	}, s)
	if s == "" {
		return nil, fmt.Errorf("no data")
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		if b2, err2 := base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "=")); err2 == nil {
			return b2, nil
		}
		return nil, fmt.Errorf("not standard base64 (or a base64 data: URL): %v", err)
	}
	return b, nil
}
