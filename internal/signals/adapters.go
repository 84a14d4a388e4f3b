package signals

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// The LoRA adapter labels of vLLM's vllm:lora_requests_info, as the
// Gateway API Inference Extension's model-server protocol describes it
// (docs/proposals/003-model-server-protocol; /work/shared field notes
// §1.4): a gauge whose value is the time it was set, one series per
// combination of labels. An older combination may stay in the exposition
// with its older time, so the newest series is the current state.
const (
	labelMaxLora = "max_lora"
	labelRunning = "running_lora_adapters"
	labelWaiting = "waiting_lora_adapters"
)

// adapters reads the first family of names present: its newest series
// (the largest finite value), nil when the family is absent or has no
// usable series. A family that is not a gauge (or untyped) is an error; a
// max_lora that is not a whole number reads as unknown (0).
func adapters(fams map[string]*dto.MetricFamily, names []string) (*Adapters, error) {
	for _, name := range names {
		mf, ok := fams[name]
		if !ok {
			continue
		}
		var newest *dto.Metric
		best := math.Inf(-1)
		for _, mt := range mf.GetMetric() {
			var v float64
			switch {
			case mt.Gauge != nil:
				v = mt.Gauge.GetValue()
			case mt.Untyped != nil:
				v = mt.Untyped.GetValue()
			default:
				return nil, fmt.Errorf("metric family %s is a %s; want a gauge (its value the time it was set)",
					name, strings.ToLower(mf.GetType().String()))
			}
			if math.IsNaN(v) || math.IsInf(v, 0) || v < best {
				continue
			}
			newest, best = mt, v
		}
		if newest == nil {
			return nil, nil
		}
		a := &Adapters{}
		for _, lp := range newest.GetLabel() {
			switch lp.GetName() {
			case labelMaxLora:
				if n, err := strconv.Atoi(strings.TrimSpace(lp.GetValue())); err == nil && n > 0 {
					a.Max = n
				}
			case labelRunning:
				a.Running = splitList(lp.GetValue())
			case labelWaiting:
				a.Waiting = splitList(lp.GetValue())
			}
		}
		return a, nil
	}
	return nil, nil
}

// splitList splits a comma-separated label value, dropping blanks.
func splitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
