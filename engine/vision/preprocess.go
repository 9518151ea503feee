package vision

import (
	"fmt"
	"image"
	"image/color"
	"math"
	"runtime"
	"sync"
)

// Preprocess is Gemma 3n's image processor (transformers' SiglipImageProcessor
// with the settings of the Gemma 3n conversion): convert to RGB (alpha is
// dropped, as PIL's convert("RGB") does), stretch to 768×768 with bilinear
// resampling, rescale by 1/255, no normalisation. It returns [3, 768, 768]
// float32 (channel-major) with values k/255.
//
// The resampling is the antialiased separable triangle filter of PIL and
// torchvision on 8-bit images (the filter's support grows with the
// downscaling ratio): a horizontal pass then a vertical one, each with
// fixed-point weights and rounding to 8 bits, computed the way PyTorch's
// uint8 antialiased bilinear interpolation (torchvision's resize on uint8
// tensors, which transformers uses) does.
func Preprocess(img image.Image) []float32 {
	rgb, w, h := toRGB(img)
	if w == 0 || h == 0 {
		return make([]float32, 3*ImageSize*ImageSize)
	}
	out := resizeRGB(rgb, w, h, ImageSize, ImageSize, Bilinear)
	const n = ImageSize * ImageSize
	px := make([]float32, 3*n)
	scale := float32(1.0 / 255.0)
	parallelRows(ImageSize, func(y0, y1 int) {
		for p := y0 * ImageSize; p < y1*ImageSize; p++ {
			px[p] = float32(out[3*p]) * scale
			px[n+p] = float32(out[3*p+1]) * scale
			px[2*n+p] = float32(out[3*p+2]) * scale
		}
	})
	return px
}

// toRGB returns the image as 8-bit RGB, row-major [h, w, 3]. Non-premultiplied
// sources keep their colour values whatever the alpha (PIL's RGBA -> RGB);
// premultiplied ones are un-premultiplied first.
func toRGB(img image.Image) ([]uint8, int, int) {
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	if w <= 0 || h <= 0 {
		return nil, 0, 0
	}
	out := make([]uint8, w*h*3)
	switch m := img.(type) {
	case *image.NRGBA:
		parallelRows(h, func(y0, y1 int) {
			for y := y0; y < y1; y++ {
				row := m.Pix[m.PixOffset(b.Min.X, b.Min.Y+y):]
				o := out[y*w*3:]
				for x := range w {
					o[3*x], o[3*x+1], o[3*x+2] = row[4*x], row[4*x+1], row[4*x+2]
				}
			}
		})
	case *image.RGBA:
		parallelRows(h, func(y0, y1 int) {
			for y := y0; y < y1; y++ {
				row := m.Pix[m.PixOffset(b.Min.X, b.Min.Y+y):]
				o := out[y*w*3:]
				for x := range w {
					r, g, bl, a := row[4*x], row[4*x+1], row[4*x+2], row[4*x+3]
					if a != 255 && a != 0 {
						r, g, bl = unpremul(r, a), unpremul(g, a), unpremul(bl, a)
					}
					o[3*x], o[3*x+1], o[3*x+2] = r, g, bl
				}
			}
		})
	case *image.YCbCr:
		ycbcrToRGB(m, out)
	case *image.Gray:
		parallelRows(h, func(y0, y1 int) {
			for y := y0; y < y1; y++ {
				row := m.Pix[m.PixOffset(b.Min.X, b.Min.Y+y):]
				o := out[y*w*3:]
				for x := range w {
					o[3*x], o[3*x+1], o[3*x+2] = row[x], row[x], row[x]
				}
			}
		})
	case *image.Paletted:
		pal := make([][3]uint8, len(m.Palette))
		for i, c := range m.Palette {
			n := color.NRGBAModel.Convert(c).(color.NRGBA)
			pal[i] = [3]uint8{n.R, n.G, n.B}
		}
		parallelRows(h, func(y0, y1 int) {
			for y := y0; y < y1; y++ {
				row := m.Pix[m.PixOffset(b.Min.X, b.Min.Y+y):]
				o := out[y*w*3:]
				for x := range w {
					var c [3]uint8
					if int(row[x]) < len(pal) {
						c = pal[row[x]]
					}
					o[3*x], o[3*x+1], o[3*x+2] = c[0], c[1], c[2]
				}
			}
		})
	default:
		// 16-bit and other models: the high byte of the non-premultiplied
		// colour.
		parallelRows(h, func(y0, y1 int) {
			for y := y0; y < y1; y++ {
				o := out[y*w*3:]
				for x := range w {
					c := color.NRGBA64Model.Convert(img.At(b.Min.X+x, b.Min.Y+y)).(color.NRGBA64)
					o[3*x], o[3*x+1], o[3*x+2] = uint8(c.R>>8), uint8(c.G>>8), uint8(c.B>>8)
				}
			}
		})
	}
	return out, w, h
}

func unpremul(c, a uint8) uint8 {
	v := (int(c)*255 + int(a)/2) / int(a)
	return uint8(min(v, 255))
}

// ycbcrToRGB converts a decoded JPEG the way libjpeg(-turbo), which PIL
// decodes with, does: its fixed-point YCbCr -> RGB tables (jdcolor.c) and,
// for 4:2:0, 4:2:2 and 4:4:0 chroma, its "fancy" triangle upsampling
// (jdsample.c); other subsamplings take the chroma sample covering each
// pixel.
func ycbcrToRGB(m *image.YCbCr, out []uint8) {
	b := m.Bounds()
	w, h := b.Dx(), b.Dy()
	cb, cr := upsampleChroma(m)
	parallelRows(h, func(y0, y1 int) {
		for y := y0; y < y1; y++ {
			o := out[y*w*3:]
			for x := range w {
				yv := int32(m.Y[m.YOffset(b.Min.X+x, b.Min.Y+y)])
				var u, v int32
				if cb != nil {
					u, v = int32(cb[y*w+x]), int32(cr[y*w+x])
				} else {
					ci := m.COffset(b.Min.X+x, b.Min.Y+y)
					u, v = int32(m.Cb[ci]), int32(m.Cr[ci])
				}
				o[3*x] = rangeLimit(yv + crR[v])
				o[3*x+1] = rangeLimit(yv + (cbG[u]+crG[v])>>16)
				o[3*x+2] = rangeLimit(yv + cbB[u])
			}
		}
	})
}

// libjpeg's jdcolor.c tables (SCALEBITS 16).
var crR, cbB, crG, cbG [256]int32

func init() {
	fix := func(x float64) int32 { return int32(x*65536 + 0.5) }
	for i := range 256 {
		x := int32(i - 128)
		crR[i] = (fix(1.40200)*x + 1<<15) >> 16
		cbB[i] = (fix(1.77200)*x + 1<<15) >> 16
		crG[i] = -fix(0.71414) * x
		cbG[i] = -fix(0.34414)*x + 1<<15
	}
}

func rangeLimit(v int32) uint8 {
	return uint8(min(max(v, 0), 255))
}

// upsampleChroma returns Cb and Cr at full resolution [h·w] with libjpeg's
// fancy upsampling for 4:2:0, 4:2:2 and 4:4:0 images at the origin, or nil
// (use the covering sample).
func upsampleChroma(m *image.YCbCr) (cb, cr []uint8) {
	b := m.Bounds()
	if b.Min != (image.Point{}) {
		return nil, nil
	}
	w, h := b.Dx(), b.Dy()
	var hs, vs int
	switch m.SubsampleRatio {
	case image.YCbCrSubsampleRatio420:
		hs, vs = 2, 2
	case image.YCbCrSubsampleRatio422:
		hs, vs = 2, 1
	case image.YCbCrSubsampleRatio440:
		hs, vs = 1, 2
	default:
		return nil, nil
	}
	cw, ch := (w+hs-1)/hs, (h+vs-1)/vs
	if cw < 2 && hs == 2 || ch < 2 && vs == 2 {
		return nil, nil
	}
	up := func(plane []uint8) []uint8 {
		// Vertical pass into 16× fixed point (libjpeg's 3·near + far
		// column sums), then horizontal; the rounding follows h2v2, h2v1
		// and h1v2_fancy_upsample.
		uw := cw * hs
		dst := make([]uint8, w*h)
		row := make([]int32, cw)
		line := make([]uint8, uw)
		for y := range h {
			cy := y / vs
			near := plane[cy*m.CStride : cy*m.CStride+cw]
			if vs == 2 {
				fy := cy - 1 // output row above the sample centre
				if y%2 == 1 {
					fy = cy + 1
				}
				fy = min(max(fy, 0), ch-1) // libjpeg replicates edge rows
				far := plane[fy*m.CStride : fy*m.CStride+cw]
				for i := range cw {
					row[i] = int32(near[i])*3 + int32(far[i])
				}
			} else {
				for i := range cw {
					row[i] = int32(near[i])
				}
			}
			switch {
			case hs == 2 && vs == 2: // h2v2
				line[0] = uint8((row[0]*4 + 8) >> 4)
				line[1] = uint8((row[0]*3 + row[1] + 7) >> 4)
				for i := 1; i < cw-1; i++ {
					line[2*i] = uint8((row[i]*3 + row[i-1] + 8) >> 4)
					line[2*i+1] = uint8((row[i]*3 + row[i+1] + 7) >> 4)
				}
				line[2*cw-2] = uint8((row[cw-1]*3 + row[cw-2] + 8) >> 4)
				line[2*cw-1] = uint8((row[cw-1]*4 + 7) >> 4)
			case hs == 2: // h2v1
				line[0] = uint8(row[0])
				line[1] = uint8((row[0]*3 + row[1] + 2) >> 2)
				for i := 1; i < cw-1; i++ {
					line[2*i] = uint8((row[i]*3 + row[i-1] + 1) >> 2)
					line[2*i+1] = uint8((row[i]*3 + row[i+1] + 2) >> 2)
				}
				line[2*cw-2] = uint8((row[cw-1]*3 + row[cw-2] + 1) >> 2)
				line[2*cw-1] = uint8(row[cw-1])
			default: // h1v2
				bias := int32(1)
				if y%2 == 1 {
					bias = 2
				}
				for i := range cw {
					line[i] = uint8((row[i] + bias) >> 2)
				}
			}
			copy(dst[y*w:(y+1)*w], line[:w])
		}
		return dst
	}
	return up(m.Cb), up(m.Cr)
}

// axisWeights are the fixed-point weights of one resampling pass: output i
// reads inputs [lo[i], lo[i]+n[i]) with weights w[i·ksize : i·ksize+n[i]],
// scaled by 2^prec.
type axisWeights struct {
	lo, n []int
	w     []int32
	ksize int
	prec  uint
}

// Filter is a resampling filter of ResizeRGB.
type Filter int

const (
	// Bilinear is the triangle filter (support 1): Gemma 3n's processor.
	Bilinear Filter = iota
	// Bicubic is Keys' cubic with a = −0.5 (support 2), PyTorch's (and
	// PIL's) antialiased bicubic: Gemma 4's processor.
	Bicubic
)

// support is the filter's half-width at scale 1.
func (f Filter) support() float64 {
	if f == Bicubic {
		return 2
	}
	return 1
}

// at evaluates the filter (PyTorch's aa_filter, in float64 as its int16
// weights path does).
func (f Filter) at(x float64) float64 {
	x = math.Abs(x)
	if f == Bicubic {
		const a = -0.5
		switch {
		case x < 1:
			return ((a+2)*x-(a+3))*x*x + 1
		case x < 2:
			return ((a*x-5*a)*x+8*a)*x - 4*a
		}
		return 0
	}
	if x < 1 {
		return 1 - x
	}
	return 0
}

// computeWeights is filterWeights for the bilinear filter.
func computeWeights(in, out int) axisWeights { return filterWeights(in, out, Bilinear) }

// filterWeights follows PyTorch's _compute_index_ranges_int16_weights
// (antialias=True, align_corners=False): float64 weights normalised per
// output, then the largest precision (< 22 bits) that keeps the biggest
// weight within int16, each weight rounded half away from zero.
func filterWeights(in, out int, f Filter) axisWeights {
	scale := float64(in) / float64(out)
	support := f.support()
	invscale := 1.0
	if scale >= 1 {
		support *= scale
		invscale = 1 / scale
	}
	ksize := int(math.Ceil(support))*2 + 1
	a := axisWeights{lo: make([]int, out), n: make([]int, out), w: make([]int32, out*ksize), ksize: ksize}
	wf := make([]float64, out*ksize)
	wmax := 0.0
	for i := range out {
		center := scale * (float64(i) + 0.5)
		xmin := max(int64(center-support+0.5), 0) // truncation, as C++'s static_cast
		xsize := min(int64(center+support+0.5), int64(in)) - xmin
		xsize = min(max(xsize, 0), int64(ksize))
		total := 0.0
		ws := wf[i*ksize : (i+1)*ksize]
		for j := range xsize {
			v := f.at((float64(j+xmin) - center + 0.5) * invscale)
			ws[j] = v
			total += v
		}
		if total != 0 {
			for j := range xsize {
				ws[j] /= total
				wmax = max(wmax, ws[j])
			}
		}
		a.lo[i], a.n[i] = int(xmin), int(xsize)
	}
	var prec uint
	for prec = 0; prec < 22; prec++ {
		if int(0.5+wmax*float64(int(1)<<(prec+1))) >= 1<<15 {
			break
		}
	}
	a.prec = prec
	for k, v := range wf {
		v *= float64(int(1) << prec)
		if v < 0 {
			a.w[k] = int32(int16(int(-0.5 + v)))
		} else {
			a.w[k] = int32(int16(int(0.5 + v)))
		}
	}
	return a
}

func clip8(v int32, prec uint) uint8 {
	v >>= prec
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return uint8(v)
}

// MaxResizeSide bounds each side of ResizeRGB's input and output.
const MaxResizeSide = 1 << 16

// ResizeRGB resamples 8-bit RGB, row-major [h, w, 3], to [oh, ow, 3] as
// PyTorch's antialiased interpolate does on a uint8 CPU tensor (torchvision's
// resize of a uint8 image; align_corners False): int16 fixed-point weights,
// a horizontal pass then a vertical one, each rounded and clipped to 8 bits.
// Bilinear is Gemma 3n's processor, Bicubic Gemma 4's (torchvision backend).
// (PIL's resize has the same filters but 22-bit weights, so its output can
// differ by one level.) A size of 0 or over MaxResizeSide, or a buffer of
// the wrong length, is an error. Memory: the output and one [h, ow, 3]
// intermediate; an unchanged size returns src itself.
func ResizeRGB(src []uint8, w, h, ow, oh int, f Filter) ([]uint8, error) {
	sides := [4]int{w, h, ow, oh}
	for i, name := range [4]string{"width", "height", "output width", "output height"} {
		if n := sides[i]; n < 1 || n > MaxResizeSide {
			return nil, fmt.Errorf("vision: resize: %s %d, want 1..%d", name, n, MaxResizeSide)
		}
	}
	if f != Bilinear && f != Bicubic {
		return nil, fmt.Errorf("vision: resize: unknown filter %d", f)
	}
	if len(src) != w*h*3 {
		return nil, fmt.Errorf("vision: resize: %d bytes for a %dx%d RGB image, want %d", len(src), w, h, w*h*3)
	}
	return resizeRGB(src, w, h, ow, oh, f), nil
}

// resizeRGB is ResizeRGB on checked sizes.
func resizeRGB(src []uint8, w, h, ow, oh int, f Filter) []uint8 {
	cur, cw := src, w
	if ow != w {
		a := filterWeights(w, ow, f)
		tmp := make([]uint8, h*ow*3)
		half := int32(1) << (a.prec - 1)
		parallelRows(h, func(y0, y1 int) {
			for y := y0; y < y1; y++ {
				row := src[y*w*3 : (y+1)*w*3]
				o := tmp[y*ow*3 : (y+1)*ow*3]
				for x := range ow {
					ws := a.w[x*a.ksize : x*a.ksize+a.n[x]]
					in := row[a.lo[x]*3:]
					r, g, b := half, half, half
					for j, wv := range ws {
						r += int32(in[3*j]) * wv
						g += int32(in[3*j+1]) * wv
						b += int32(in[3*j+2]) * wv
					}
					o[3*x], o[3*x+1], o[3*x+2] = clip8(r, a.prec), clip8(g, a.prec), clip8(b, a.prec)
				}
			}
		})
		cur, cw = tmp, ow
	}
	if oh == h {
		return cur
	}
	a := filterWeights(h, oh, f)
	out := make([]uint8, oh*cw*3)
	half := int32(1) << (a.prec - 1)
	rowLen := cw * 3
	parallelRows(oh, func(y0, y1 int) {
		acc := make([]int32, rowLen)
		for y := y0; y < y1; y++ {
			for i := range acc {
				acc[i] = half
			}
			ws := a.w[y*a.ksize : y*a.ksize+a.n[y]]
			for j, wv := range ws {
				in := cur[(a.lo[y]+j)*rowLen : (a.lo[y]+j+1)*rowLen]
				for i, v := range in {
					acc[i] += int32(v) * wv
				}
			}
			o := out[y*rowLen : (y+1)*rowLen]
			for i, v := range acc {
				o[i] = clip8(v, a.prec)
			}
		}
	})
	return out
}

// parallelRows splits [0, n) into contiguous chunks over the host's cores.
func parallelRows(n int, fn func(lo, hi int)) {
	workers := min(runtime.GOMAXPROCS(0), max(n/16, 1))
	if workers <= 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	chunk := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Go(func() { fn(lo, hi) })
	}
	wg.Wait()
}
