package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"verdict/engine/catalog"
	"verdict/engine/model"
)

// CatalogLoop is one batch size of the loop decoder (catalog.DecodeLoop):
// the same requests with the steps issued from the host and as one
// backend loop (where the backend records loops), each after a warm-up
// run of its own.
type CatalogLoop struct {
	Batch    int  `json:"batch"`
	Requests int  `json:"requests"`
	Steps    int  `json:"steps"`  // loop iterations over all batches
	Device   bool `json:"device"` // the device loop ran as a backend loop
	// Time in the decode (the first token's step and the loop), per step
	// and in all, and requests per second end to end (prefill included).
	HostMSPerStep     float64 `json:"host_ms_per_step"`
	DeviceMSPerStep   float64 `json:"device_ms_per_step"`
	HostPerSecond     float64 `json:"host_requests_per_second"`
	DevicePerSecond   float64 `json:"device_requests_per_second"`
	LoopSavingMSPerTk float64 `json:"loop_saving_ms_per_step"`
}

func (l CatalogLoop) String() string {
	dev := "device loop"
	if !l.Device {
		dev = "device loop (ran from the host: no backend loops)"
	}
	return fmt.Sprintf("  loop, batch %2d: %d requests, %d steps: host-driven %.3f ms a step (%.2f requests/s), %s %.3f ms a step (%.2f requests/s): saves %.3f ms a step\n",
		l.Batch, l.Requests, l.Steps, l.HostMSPerStep, l.HostPerSecond, dev, l.DeviceMSPerStep, l.DevicePerSecond, l.LoopSavingMSPerTk)
}

// CatalogLoops measures the loop decoder over prompts (repeated to at
// least each batch size) at each of batches.
func CatalogLoops(ctx context.Context, m model.Model, cat *catalog.Catalog, prompts []catalog.Request, batches []int) ([]CatalogLoop, error) {
	var out []CatalogLoop
	for _, b := range batches {
		if b > catalog.MaxLoopBatch {
			continue
		}
		reqs := make([]catalog.Request, max(b, len(prompts)))
		for i := range reqs {
			reqs[i] = prompts[i%len(prompts)]
		}
		r := CatalogLoop{Batch: b, Requests: len(reqs), Device: true}
		for _, mode := range []catalog.LoopMode{catalog.HostLoop, catalog.DeviceLoop} {
			run := func() (time.Duration, time.Duration, int, error) {
				var dec, total time.Duration
				steps := 0
				for lo := 0; lo < len(reqs); lo += b {
					_, st, err := catalog.DecodeLoop(ctx, m, cat, reqs[lo:min(lo+b, len(reqs))], mode)
					if err != nil {
						return 0, 0, 0, err
					}
					dec, total, steps = dec+st.Decode, total+st.Total, steps+st.Steps+1
					if mode == catalog.DeviceLoop && !st.Device {
						r.Device = false
					}
				}
				return dec, total, steps, nil
			}
			if _, _, _, err := run(); err != nil { // warm-up: records the loops
				return nil, err
			}
			dec, total, steps, err := run()
			if err != nil {
				return nil, err
			}
			ms, rps := dec.Seconds()*1000/float64(steps), float64(len(reqs))/total.Seconds()
			r.Steps = steps
			if mode == catalog.HostLoop {
				r.HostMSPerStep, r.HostPerSecond = ms, rps
			} else {
				r.DeviceMSPerStep, r.DevicePerSecond = ms, rps
			}
		}
		r.LoopSavingMSPerTk = r.HostMSPerStep - r.DeviceMSPerStep
		out = append(out, r)
	}
	return out, nil
}

func loopsString(ls []CatalogLoop) string {
	var b strings.Builder
	for _, l := range ls {
		b.WriteString(l.String())
	}
	return b.String()
}
