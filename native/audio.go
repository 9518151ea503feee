package native

/*
#include "cpu/kernels_audio.h"
*/
import "C"

import "unsafe"

// Kernels of Gemma 3n's audio tower (engine/audio), in cpu/cpu_audio.c.

// AudioIm2Col gathers the patches of a 2-D convolution over a channels-last
// image src [tIn, fIn, c]: dst is [tOut·fOut, kt·kf·c], row to·fOut+fo,
// column (i·kf+j)·c+ch, reading src[to·st+i−padT, fo·sf+j−padF, ch] and zero
// outside the image. A convolution is then Linear(dst, weights reordered to
// [out, kt, kf, c]).
func AudioIm2Col(dst, src []float32, tIn, fIn, c, tOut, fOut, kt, kf, st, sf, padT, padF int) {
	if tOut <= 0 || fOut <= 0 {
		return
	}
	check(tIn >= 0 && fIn >= 0 && c > 0 && kt > 0 && kf > 0 && st > 0 && sf > 0, "AudioIm2Col: bad shape")
	check(len(src) >= tIn*fIn*c, "AudioIm2Col: src too short")
	check(len(dst) >= tOut*fOut*kt*kf*c, "AudioIm2Col: dst too short")
	C.vk_audio_im2col(fp(dst), fp(src), i64(tIn), i64(fIn), i64(c), i64(tOut), i64(fOut),
		i64(kt), i64(kf), i64(st), i64(sf), i64(padT), i64(padF))
}

// AudioCumGroupNormReLU applies Gemma 3n's cumulative group norm and a ReLU
// in place to x [t, fc] (channel = index mod c, w [c]): the mean and
// variance at step i cover all elements of steps 0..i, the variance
// accumulating each step's squared deviation from its own cumulative mean;
// x = relu((x − mean)·rsqrt(var + eps)·w[ch]).
func AudioCumGroupNormReLU(x []float32, t, fc, c int, w []float32, eps float32) {
	if t <= 0 {
		return
	}
	check(fc > 0 && c > 0 && fc%c == 0, "AudioCumGroupNormReLU: fc is not a multiple of c")
	check(len(x) >= t*fc, "AudioCumGroupNormReLU: x too short")
	check(len(w) >= c, "AudioCumGroupNormReLU: w too short")
	C.vk_audio_cum_group_norm_relu(fp(x), i64(t), i64(fc), i64(c), fp(w), C.float(eps))
}

// AudioLocalAttention is the conformer's local self-attention with relative
// position logits. q, k, v and out are [t, heads·d]; pos is
// [past+future+1, heads·d] with row f for the distance query−key = past−f.
// Query i sees keys j with i−past ≤ j ≤ i+future, 0 ≤ j < t and valid[j];
// its logit is q_i·k_j + q_i·pos[past−(i−j)], soft-capped to
// softcap·tanh(logit/softcap), then a softmax weights the v_j. A query that
// sees no key gets a zero row. out must not alias the inputs.
func AudioLocalAttention(out, q, k, v, pos []float32, valid []bool, t, heads, d, past, future int, softcap float32) {
	if t <= 0 {
		return
	}
	check(heads > 0 && d > 0 && past >= 0 && future >= 0, "AudioLocalAttention: bad shape")
	n := t * heads * d
	check(len(q) >= n && len(k) >= n && len(v) >= n && len(out) >= n, "AudioLocalAttention: q, k, v or out too short")
	check(len(pos) >= (past+future+1)*heads*d, "AudioLocalAttention: pos too short")
	check(len(valid) >= t, "AudioLocalAttention: valid too short")
	C.vk_audio_local_attention(fp(out), fp(q), fp(k), fp(v), fp(pos),
		(*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(valid))), i64(t), i64(heads), i64(d),
		i64(past), i64(future), C.float(softcap))
}

// AudioDepthwiseConvCausal is a causal depthwise convolution over time:
// x, y [t, d], w [d, k]; y[i, c] = Σ_j w[c, j]·x[i−(k−1)+j, c] with x zero
// before time 0. y must not alias x.
func AudioDepthwiseConvCausal(y, x, w []float32, t, d, k int) {
	if t <= 0 || d <= 0 {
		return
	}
	check(k > 0 && len(w) >= d*k, "AudioDepthwiseConvCausal: w too short")
	check(len(x) >= t*d && len(y) >= t*d, "AudioDepthwiseConvCausal: x or y too short")
	C.vk_audio_dwconv_causal(fp(y), fp(x), fp(w), i64(t), i64(d), i64(k))
}

// AudioSiLU computes x = x/(1+exp(−x)) in place.
func AudioSiLU(x []float32) {
	if len(x) > 0 {
		C.vk_audio_silu(fp(x), i64(len(x)))
	}
}

// AudioGLU is the gated linear unit over rows: x [rows, 2d], y [rows, d],
// y[r, i] = x[r, i]·sigmoid(x[r, d+i]).
func AudioGLU(y, x []float32, rows, d int) {
	if rows <= 0 || d <= 0 {
		return
	}
	check(len(x) >= rows*2*d && len(y) >= rows*d, "AudioGLU: x or y too short")
	C.vk_audio_glu(fp(y), fp(x), i64(rows), i64(d))
}

// AudioClip clamps x to [−lim, lim] in place.
func AudioClip(x []float32, lim float32) {
	if len(x) > 0 {
		C.vk_audio_clip(fp(x), i64(len(x)), C.float(lim))
	}
}

// setAudioSIMD selects the audio attention's dot products (0: portable,
// 1: best the CPU has) and reports the active set. For tests.
func setAudioSIMD(level int) int { return int(C.vk_audio_simd(C.int(level))) }
