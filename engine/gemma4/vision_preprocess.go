package gemma4

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"verdict/engine/vision"
)

// The image processor, transformers 5.17's Gemma4ImageProcessor (the
// torchvision backend, which AutoProcessor picks when torchvision is
// installed; Gemma4ImageProcessorPil otherwise): the target size, the
// antialiased bicubic resize of the uint8 image, rescaling, patchifying and
// the padding to the patch budget.

// ImageProcessorConfig is the processor's settings (released: patch 16, 280
// soft tokens, pooling 3).
type ImageProcessorConfig struct {
	PatchSize, MaxSoftTokens, PoolingKernel int
}

// maxProcessorPixels bounds the pixels of the padded patches,
// MaxPatches·patch² (released: at most 1120·9·256 = 2,580,480): Preprocess's
// float32 output is at most 3·4 bytes each, 96 MiB.
const maxProcessorPixels = 1 << 23

// supportedSoftTokens are the processor's allowed max_soft_tokens.
var supportedSoftTokens = []int{70, 140, 280, 560, 1120}

// CheckSoftTokens refuses a max_soft_tokens the image processor does not
// allow, naming the field and the allowed values.
func CheckSoftTokens(n int) error {
	if !slices.Contains(supportedSoftTokens, n) {
		return fmt.Errorf("gemma4: image processor: max_soft_tokens %d, want one of %v", n, supportedSoftTokens)
	}
	return nil
}

func (p ImageProcessorConfig) check() error {
	if err := CheckSoftTokens(p.MaxSoftTokens); err != nil {
		return err
	}
	switch {
	case p.PatchSize < 1 || p.PatchSize > maxPatchSize:
		return fmt.Errorf("gemma4: image processor: patch_size %d, want 1..%d", p.PatchSize, maxPatchSize)
	case p.PoolingKernel < 1 || p.PoolingKernel > 64:
		return fmt.Errorf("gemma4: image processor: pooling_kernel_size %d, want 1..64", p.PoolingKernel)
	case p.MaxPatches()*p.PatchSize*p.PatchSize > maxProcessorPixels:
		// Checked before anything is allocated: patch 256 and pooling 64
		// (each within the vision config's bounds) would ask for 3.6 TB.
		return fmt.Errorf("gemma4: image processor: max_soft_tokens %d × pooling_kernel_size %d² × patch_size %d² is %d padded pixels, over %d",
			p.MaxSoftTokens, p.PoolingKernel, p.PatchSize, p.MaxPatches()*p.PatchSize*p.PatchSize, maxProcessorPixels)
	}
	return nil
}

// MaxPatches is the padded patch count, max_soft_tokens · pooling².
func (p ImageProcessorConfig) MaxPatches() int {
	return p.MaxSoftTokens * p.PoolingKernel * p.PoolingKernel
}

// TargetSize is get_aspect_ratio_preserving_size: the largest size with the
// image's aspect ratio whose sides are multiples of pooling·patch and whose
// patches fit the budget.
func (p ImageProcessorConfig) TargetSize(height, width int) (th, tw int, err error) {
	if err := p.check(); err != nil {
		return 0, 0, err
	}
	if height < 1 || width < 1 || height > vision.MaxResizeSide || width > vision.MaxResizeSide {
		return 0, 0, fmt.Errorf("gemma4: image processor: image size %dx%d out of range (each side 1..%d)", height, width, vision.MaxResizeSide)
	}
	maxPatches := p.MaxPatches()
	targetPx := maxPatches * p.PatchSize * p.PatchSize
	factor := math.Sqrt(float64(targetPx) / float64(height*width))
	side := p.PoolingKernel * p.PatchSize
	th = int(math.Floor(factor*float64(height)/float64(side))) * side
	tw = int(math.Floor(factor*float64(width)/float64(side))) * side
	if th == 0 && tw == 0 {
		return 0, 0, fmt.Errorf("gemma4: image processor: %dx%d would resize to 0x0", height, width)
	}
	maxSide := (maxPatches / (p.PoolingKernel * p.PoolingKernel)) * side
	if th == 0 {
		th, tw = side, min(width/height*side, maxSide)
	} else if tw == 0 {
		tw, th = side, min(height/width*side, maxSide)
	}
	if th*tw > targetPx {
		return 0, 0, fmt.Errorf("gemma4: image processor: %dx%d resizes to %dx%d, over %d patches", height, width, th, tw, maxPatches)
	}
	return th, tw, nil
}

// Preprocess is the processor's output for an RGB image (rgb [h·w·3],
// row-major, 0..255) of any size: resized to TargetSize as torchvision
// resizes a uint8 image (antialiased bicubic, PyTorch's int16 fixed-point
// CPU path, vision.ResizeRGB), then PatchifyImage. An image already at its
// target size is not resampled. Sizes out of range, and a buffer of the
// wrong length, are refused; memory is the resized image, one intermediate
// of at most [height, target width] and the padded patches.
func (p ImageProcessorConfig) Preprocess(rgb []uint8, height, width int) (pixels []float32, pos []Patch, softTokens int, err error) {
	th, tw, err := p.TargetSize(height, width)
	if err != nil {
		return nil, nil, 0, err
	}
	if len(rgb) != height*width*3 {
		return nil, nil, 0, fmt.Errorf("gemma4: image processor: %d bytes for a %dx%d RGB image, want %d", len(rgb), height, width, height*width*3)
	}
	if th != height || tw != width {
		if rgb, err = vision.ResizeRGB(rgb, width, height, tw, th, vision.Bicubic); err != nil {
			return nil, nil, 0, fmt.Errorf("gemma4: image processor: %w", err)
		}
	}
	// Not PatchifyImage: the target size of a target size can differ (a
	// 1000x37 image becomes 2064x48, whose own target is 2592x48), and
	// the processor patchifies what it resized.
	return p.patchify(rgb, th, tw)
}

// PatchifyImage is the processor's output for an RGB image (rgb [h·w·3],
// row-major, 0..255) that is already at its target size: pixel values
// uint8 · float32(1/255), patches in row-major order with each patch's
// pixels (row, column, channel), padded with zero patches at (-1, -1) to
// MaxPatches. softTokens is the number of soft tokens the image becomes.
// An image of another size is refused: Preprocess resizes.
func (p ImageProcessorConfig) PatchifyImage(rgb []uint8, height, width int) (pixels []float32, pos []Patch, softTokens int, err error) {
	th, tw, err := p.TargetSize(height, width)
	if err != nil {
		return nil, nil, 0, err
	}
	if len(rgb) != height*width*3 {
		return nil, nil, 0, fmt.Errorf("gemma4: image processor: %d bytes for a %dx%d RGB image, want %d", len(rgb), height, width, height*width*3)
	}
	if th != height || tw != width {
		return nil, nil, 0, fmt.Errorf("gemma4: image processor: a %dx%d image resizes to %dx%d; resizing is not implemented in PatchifyImage (Preprocess resizes)", height, width, th, tw)
	}
	return p.patchify(rgb, height, width)
}

// patchify is PatchifyImage's work on an image whose sides are multiples of
// the patch size.
func (p ImageProcessorConfig) patchify(rgb []uint8, height, width int) (pixels []float32, pos []Patch, softTokens int, err error) {
	ps := p.PatchSize
	ph, pw := height/ps, width/ps
	maxP := p.MaxPatches()
	if ph*pw > maxP {
		return nil, nil, 0, errors.New("gemma4: image processor: more patches than the budget")
	}
	pd := ps * ps * 3
	pixels = make([]float32, maxP*pd)
	pos = make([]Patch, maxP)
	rescale := float32(1.0 / 255)
	for py := range ph {
		for px := range pw {
			i := py*pw + px
			pos[i] = Patch{px, py}
			dst := pixels[i*pd : (i+1)*pd]
			for r := range ps {
				for cc := range ps {
					src := rgb[((py*ps+r)*width+px*ps+cc)*3:]
					for ch := range 3 {
						dst[(r*ps+cc)*3+ch] = float32(src[ch]) * rescale
					}
				}
			}
		}
	}
	for i := ph * pw; i < maxP; i++ {
		pos[i] = Patch{-1, -1}
	}
	return pixels, pos, ph * pw / (p.PoolingKernel * p.PoolingKernel), nil
}
