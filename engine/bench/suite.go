package bench

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"verdict/engine/model"
	"verdict/engine/scorer"
	"verdict/native"
)

// Limits are the machine's ceilings, measured in the benchmark's run.
type Limits struct {
	// ReadBandwidth is a multithreaded streaming read over a buffer far
	// larger than the caches, GB/s.
	ReadBandwidth float64 `json:"read_bandwidth_gb_per_s"`
	// FMAPeak is independent float32 FMA chains of the kernels' widest
	// vectors on every kernel thread, GFLOP/s (2 flops an FMA).
	FMAPeak float64 `json:"fma_peak_gflop_per_s"`
	SIMD    string  `json:"simd"`
	Threads int     `json:"threads"`
}

// MeasureLimits measures the machine's read bandwidth and FMA peak.
func MeasureLimits() Limits {
	return Limits{
		ReadBandwidth: native.ReadBandwidth(1<<30, 5),
		FMAPeak:       native.FMAPeak(0.3),
		SIMD:          native.SIMD(),
		Threads:       native.Threads(),
	}
}

// Memory is the process's resident memory, from /proc/self/status.
type Memory struct {
	RSS int64 `json:"vm_rss_bytes"` // resident now
	HWM int64 `json:"vm_hwm_bytes"` // peak resident since the last ResetPeakMemory
}

// ReadMemory reads VmRSS and VmHWM (zero where /proc is not there).
func ReadMemory() Memory {
	var m Memory
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return m
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fs := strings.Fields(v)
		if len(fs) == 0 {
			continue
		}
		kb, _ := strconv.ParseInt(fs[0], 10, 64)
		switch k {
		case "VmRSS":
			m.RSS = kb << 10
		case "VmHWM":
			m.HWM = kb << 10
		}
	}
	return m
}

// ResetPeakMemory returns memory to the system and restarts VmHWM from the
// current resident size (Linux: /proc/self/clear_refs).
func ResetPeakMemory() {
	runtime.GC()
	debug.FreeOSMemory()
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// PrefillReport is a prompt's prefill.
type PrefillReport struct {
	Tokens    int     `json:"tokens"`
	Seconds   float64 `json:"seconds"`
	TPS       float64 `json:"tokens_per_second"`
	FLOPs     float64 `json:"flops"`       // performed: matrix products and attention
	DenseFLOP float64 `json:"dense_flops"` // every layer on every position
	GFLOPs    float64 `json:"gflop_per_s"` // performed FLOPs over the time
	// PercentOfPeak is GFLOPs over the machine's FMA peak.
	PercentOfPeak float64 `json:"percent_of_fma_peak"`
}

// DecodeReport is token-by-token decoding after the prompt.
type DecodeReport struct {
	Tokens        int     `json:"tokens"`
	Seconds       float64 `json:"seconds"`
	TPS           float64 `json:"tokens_per_second"`
	BytesPerToken int64   `json:"bytes_per_token"` // weights, per-layer embedding row, keys and values
	GBs           float64 `json:"gb_per_s"`
	// PercentOfBandwidth is GBs over the machine's read bandwidth.
	PercentOfBandwidth float64 `json:"percent_of_bandwidth"`
}

// BatchDecode is decoding several sequences at once after one prompt.
type BatchDecode struct {
	Sequences int     `json:"sequences"`
	Tokens    int     `json:"tokens"` // of all sequences
	Seconds   float64 `json:"seconds"`
	TPS       float64 `json:"tokens_per_second"`
}

// ScorerSummary is a scorer request: a prefix of PromptTokens, Fields
// choice fields of 4 candidates. ColdSeconds is the first request's time
// (the schema compiled, its passes' shapes new to the model); Seconds and
// PrefillSeconds are those of the median of ScorerRuns requests after it,
// each prefilling its whole prefix (nothing kept from the one before;
// PrefixReused is 0) with the shapes seen before (a GPU replays its
// recordings from the third request on).
type ScorerSummary struct {
	PromptTokens int `json:"prompt_tokens"`
	Fields       int `json:"fields"`
	Decisions    int `json:"decisions"`
	BranchRows   int `json:"branch_rows"`
	// BranchBatch is the most branch rows a pass ran; BranchPassesMs the
	// time of each pass of branch rows after the prefix, in order.
	BranchBatch      int       `json:"branch_batch"`
	BranchPassesMs   []float64 `json:"branch_passes_ms"`
	Seconds          float64   `json:"seconds"`
	PrefillSeconds   float64   `json:"prefix_prefill_seconds"`
	TotalOverPrefill float64   `json:"total_over_prefill"`
	ColdSeconds      float64   `json:"cold_seconds"`
	Runs             int       `json:"runs"`
	PrefixReused     int       `json:"prefix_reused_tokens"`
	Skipped          string    `json:"skipped,omitempty"`
}

// ScorerRuns is the number of scorer requests timed after the first.
const ScorerRuns = 3

// ModelReport is one model's measurements.
type ModelReport struct {
	Model       string  `json:"model"`
	Params      int64   `json:"params"`
	Weights     string  `json:"weights"`
	Group       int     `json:"group,omitempty"`
	WeightBytes int64   `json:"weight_bytes"`
	LoadSeconds float64 `json:"load_seconds"`
	// PackedCache is the packed-weights cache file; CacheHit says the load
	// mapped it rather than packing; LoadCachedSeconds, when the load
	// packed, is a second load's time, from the cache it wrote.
	PackedCache       string        `json:"packed_cache,omitempty"`
	CacheHit          bool          `json:"cache_hit"`
	LoadCachedSeconds float64       `json:"load_cached_seconds,omitempty"`
	MemoryAfterLoad   Memory        `json:"memory_after_load"`
	Memory            Memory        `json:"memory"` // after everything below
	Prefill           PrefillReport `json:"prefill"`
	Decode            DecodeReport  `json:"decode"`
	// DecodeBatch is greedy decoding of BatchSeqs sequences at once.
	DecodeBatch *BatchDecode  `json:"decode_batch,omitempty"`
	Scorer      ScorerSummary `json:"scorer"`
}

// SuiteReport is verdict bench's JSON object.
type SuiteReport struct {
	Machine Machine `json:"machine"`
	// Device is the backend the models ran on ("cpu", "cuda"); the
	// limits are the host's whatever it is.
	Device string  `json:"device,omitempty"`
	Limits *Limits `json:"limits,omitempty"`
	// DeviceInfo and DeviceLimits describe a backend with a device of
	// its own (a GPU), measured in the same run; the models' percentages
	// are then of the device's limits.
	DeviceInfo   *native.DeviceInfo   `json:"device_info,omitempty"`
	DeviceLimits *native.DeviceLimits `json:"device_limits,omitempty"`
	Models       []ModelReport        `json:"models"`
	// Towers is the vision and audio towers' section (nil: not measured).
	Towers *TowerReport `json:"towers,omitempty"`
}

// DeviceCeilings returns the device's limits in the form MeasureModel
// compares against (read bandwidth in GB/s, float32 peak in GFLOP/s).
func DeviceCeilings(l native.DeviceLimits) *Limits {
	return &Limits{ReadBandwidth: l.ReadGBs, FMAPeak: l.FP32TFLOPs * 1e3, SIMD: "device"}
}

// Opened is a model the suite measures.
type Opened struct {
	Name        string
	M           model.Model
	Tok         scorer.Tokenizer // nil: no scorer request
	TokErr      error
	LoadSeconds float64
}

// SuiteOptions are the suite's settings.
type SuiteOptions struct {
	PromptTokens, DecodeTokens, Fields int
	Scorer                             bool
	BatchSeqs                          int // decode this many sequences at once too (0: no)
}

// MeasureModel runs the prefill, decode and scorer measurements on an
// opened model; lim (nil: unknown) turns rates into percentages.
func MeasureModel(ctx context.Context, o Opened, opt SuiteOptions, lim *Limits) (ModelReport, error) {
	m := o.M
	r := ModelReport{Model: o.Name, Params: m.Params(), Weights: string(m.Weights()), Group: m.Group(),
		WeightBytes: m.WeightBytes(), LoadSeconds: o.LoadSeconds}
	r.PackedCache, r.CacheHit = m.PackedCache()
	r.MemoryAfterLoad = ReadMemory()
	// Warm up: threads, scratch buffers, every weight page.
	if _, err := m.Forward(nil, Prompt(4), nil); err != nil {
		return r, err
	}
	run, err := Run(ctx, o.Name, m, opt.PromptTokens, opt.DecodeTokens)
	if err != nil {
		return r, err
	}
	p := &r.Prefill
	p.Tokens, p.Seconds, p.TPS = run.PromptTokens, run.PrefillSeconds, run.PrefillTPS
	p.FLOPs = m.ForwardFLOPs(opt.PromptTokens, 0, 1, 1)
	p.DenseFLOP = m.ForwardFLOPs(opt.PromptTokens, 0, 1, 0)
	p.GFLOPs = p.FLOPs / p.Seconds / 1e9
	d := &r.Decode
	d.Tokens, d.Seconds, d.TPS = run.DecodeTokens, run.DecodeSeconds, run.DecodeTPS
	d.BytesPerToken = m.DecodeBytes(opt.PromptTokens + (opt.DecodeTokens+1)/2)
	d.GBs = float64(d.BytesPerToken) * d.TPS / 1e9
	if lim != nil {
		p.PercentOfPeak = 100 * p.GFLOPs / lim.FMAPeak
		d.PercentOfBandwidth = 100 * d.GBs / lim.ReadBandwidth
	}
	if opt.BatchSeqs > 0 {
		n, sec, err := DecodeBatch(ctx, m, opt.PromptTokens, opt.DecodeTokens, opt.BatchSeqs)
		if err != nil {
			return r, err
		}
		r.DecodeBatch = &BatchDecode{Sequences: opt.BatchSeqs, Tokens: n, Seconds: sec, TPS: float64(n) / sec}
	}
	s := &r.Scorer
	s.Fields = opt.Fields
	switch {
	case !opt.Scorer:
		s.Skipped = "not asked for"
	case o.Tok == nil:
		s.Skipped = fmt.Sprintf("no tokenizer: %v", o.TokErr)
	default:
		sch := ScorerSchema(opt.Fields)
		sc := scorer.New(m, o.Tok)
		in := ScorerInput(o.Tok, sch, opt.PromptTokens, m.Chat())
		var runs []*scorer.Result
		for i := 0; i <= ScorerRuns; i++ {
			sc.DropKept()
			res, err := sc.Score(ctx, sch, in, scorer.Options{})
			if err != nil {
				return r, err
			}
			runs = append(runs, res)
		}
		s.ColdSeconds = time.Duration(runs[0].Timings.Total).Seconds()
		timed := runs[1:]
		slices.SortFunc(timed, func(a, b *scorer.Result) int { return cmp.Compare(a.Timings.Total, b.Timings.Total) })
		res := timed[len(timed)/2]
		s.Runs = len(timed)
		s.PromptTokens, s.Decisions, s.BranchRows, s.BranchBatch = res.PromptTokens, res.Decisions, res.BranchRows, res.BranchBatch
		s.BranchPassesMs = nil
		for _, d := range res.Timings.Batches {
			s.BranchPassesMs = append(s.BranchPassesMs, float64(time.Duration(d).Microseconds())/1e3)
		}
		s.Seconds = time.Duration(res.Timings.Total).Seconds()
		s.PrefillSeconds = time.Duration(res.Timings.Prefill).Seconds()
		s.TotalOverPrefill = s.Seconds / s.PrefillSeconds
		s.PrefixReused = res.Timings.PrefixReused
	}
	r.Memory = ReadMemory()
	return r, nil
}

func (r SuiteReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "machine: %s\n", r.Machine)
	if r.Device != "" {
		fmt.Fprintf(&b, "device: %s\n", r.Device)
	}
	if l := r.Limits; l != nil {
		fmt.Fprintf(&b, "limits: read bandwidth %.1f GB/s, FMA peak %.0f GFLOP/s (%s, %d threads)\n",
			l.ReadBandwidth, l.FMAPeak, l.SIMD, l.Threads)
	}
	if d := r.DeviceInfo; d != nil {
		fmt.Fprintf(&b, "device: %s, %.1f GiB, %d multiprocessors, compute %s\n", d.Name,
			float64(d.MemTotal)/(1<<30), d.Units, d.Compute)
	}
	if l := r.DeviceLimits; l != nil {
		fmt.Fprintf(&b, "device limits: read %.0f GB/s, float32 %.1f TFLOP/s, tensor cores bf16 %.0f / tf32 %.0f TFLOP/s\n",
			l.ReadGBs, l.FP32TFLOPs, l.BF16TCTFLOPs, l.TF32TCTFLOPs)
	}
	gb := func(n int64) float64 { return float64(n) / (1 << 30) }
	for _, m := range r.Models {
		fmt.Fprintf(&b, "\n%s, %s weights", m.Model, m.Weights)
		if m.Group > 0 {
			fmt.Fprintf(&b, " (groups of %d)", m.Group)
		}
		fmt.Fprintf(&b, ": %.2f GiB of weights, load %.2fs", gb(m.WeightBytes), m.LoadSeconds)
		if m.PackedCache != "" {
			fmt.Fprintf(&b, " (cache hit %v", m.CacheHit)
			if m.LoadCachedSeconds > 0 {
				fmt.Fprintf(&b, "; from the cache %.2fs", m.LoadCachedSeconds)
			}
			b.WriteString(")")
		}
		fmt.Fprintf(&b, "\n  memory: VmRSS %.2f GiB after load, %.2f GiB at the end, VmHWM %.2f GiB\n",
			gb(m.MemoryAfterLoad.RSS), gb(m.Memory.RSS), gb(m.Memory.HWM))
		p, d := m.Prefill, m.Decode
		pct := func(v float64, of string) string {
			if r.Limits == nil && r.DeviceLimits == nil {
				return ""
			}
			return fmt.Sprintf(" = %.0f%% of the %s", v, of)
		}
		fmt.Fprintf(&b, "  prefill %d tokens: %.3fs, %.1f tokens/s, %.1f GFLOP/s%s\n",
			p.Tokens, p.Seconds, p.TPS, p.GFLOPs, pct(p.PercentOfPeak, "FMA peak"))
		fmt.Fprintf(&b, "  decode %d tokens: %.2f tokens/s, %.0f MB a token, %.1f GB/s%s\n",
			d.Tokens, d.TPS, float64(d.BytesPerToken)/1e6, d.GBs, pct(d.PercentOfBandwidth, "read bandwidth"))
		if db := m.DecodeBatch; db != nil {
			fmt.Fprintf(&b, "  decode, %d sequences at once: %.1f tokens/s in all\n", db.Sequences, db.TPS)
		}
		if s := m.Scorer; s.Skipped != "" {
			fmt.Fprintf(&b, "  scorer: skipped (%s)\n", s.Skipped)
		} else {
			fmt.Fprintf(&b, "  scorer: %d-token prefix, %d fields (%d branch rows): %.3fs = %.2fx the prefix prefill (%.3fs), median of %d after a first of %.3fs\n",
				s.PromptTokens, s.Fields, s.BranchRows, s.Seconds, s.TotalOverPrefill, s.PrefillSeconds, s.Runs, s.ColdSeconds)
			if len(s.BranchPassesMs) > 0 {
				fmt.Fprintf(&b, "  scorer's branch rows: %d passes of at most %d rows, %v ms\n", len(s.BranchPassesMs), s.BranchBatch, s.BranchPassesMs)
			}
		}
	}
	if r.Towers != nil {
		fmt.Fprintf(&b, "\n%s", r.Towers)
	}
	return b.String()
}
