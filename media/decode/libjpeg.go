package decode

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"image"
	"image/jpeg"
	"io"
	"os/exec"
	"time"
)

// decodeJPEG decodes a JPEG with libjpeg's djpeg tool when it is installed,
// else with Go's decoder. The Hugging Face processor reads images through
// PIL, that is libjpeg, whose output Go's decoder misses by up to 3 levels
// (a different inverse DCT); djpeg's is byte-identical to PIL's.
func decodeJPEG(r io.Reader) (image.Image, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if img, err := djpeg(data); err == nil {
		return img, nil
	}
	return jpeg.Decode(bytes.NewReader(data))
}

// djpegTimeout bounds one djpeg run.
const djpegTimeout = 30 * time.Second

// djpeg runs `djpeg -pnm` (islow DCT and fancy upsampling, libjpeg's and
// PIL's defaults) and reads its PPM or PGM output.
func djpeg(data []byte) (image.Image, error) {
	path, err := exec.LookPath("djpeg")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), djpegTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "-pnm", "-dct", "int")
	cmd.Stdin = bytes.NewReader(data)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("djpeg: %v: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	return readPNM(&out)
}

// readPNM reads a binary PPM (P6) or PGM (P5) image of 8-bit samples.
func readPNM(r io.Reader) (image.Image, error) {
	br := bufio.NewReader(r)
	var magic string
	var w, h, maxv int
	if _, err := fmt.Fscan(br, &magic, &w, &h, &maxv); err != nil {
		return nil, fmt.Errorf("pnm header: %w", err)
	}
	if _, err := br.ReadByte(); err != nil { // the one whitespace byte before the samples
		return nil, err
	}
	if maxv != 255 || w <= 0 || h <= 0 {
		return nil, fmt.Errorf("pnm: unsupported %dx%d image with maximum %d", w, h, maxv)
	}
	switch magic {
	case "P6":
		img := image.NewNRGBA(image.Rect(0, 0, w, h))
		row := make([]byte, 3*w)
		for y := 0; y < h; y++ {
			if _, err := io.ReadFull(br, row); err != nil {
				return nil, fmt.Errorf("pnm: %w", err)
			}
			p := img.Pix[y*img.Stride:]
			for x := 0; x < w; x++ {
				p[4*x], p[4*x+1], p[4*x+2], p[4*x+3] = row[3*x], row[3*x+1], row[3*x+2], 255
			}
		}
		return img, nil
	case "P5":
		img := image.NewGray(image.Rect(0, 0, w, h))
		if _, err := io.ReadFull(br, img.Pix); err != nil {
			return nil, fmt.Errorf("pnm: %w", err)
		}
		return img, nil
	}
	return nil, fmt.Errorf("pnm: unsupported format %q", magic)
}
