// Package signals reads what each replica reports about itself — requests
// running, requests waiting, KV-cache use — from its Prometheus /metrics.
//
// Parse turns one exposition (the text format, read with the Prometheus
// library) into a Sample through a Mapping: which metric families give which
// signal. Preset returns the mappings of llama.cpp, vLLM and SGLang; docs/notes/routing-seam.md
// says where each name was checked. A Scraper polls every replica on an
// interval and hands each Sample to a Sink:
//
//	m, _ := signals.Preset("vllm")
//	s, _ := signals.New(signals.Config{Interval: 200 * time.Millisecond,
//		Timeout: 200 * time.Millisecond, Mapping: m}, sink, reg, log)
//	s.SetTargets([]signals.Target{{Name: "llm-0", URL: "http://10.0.0.7:8000"}})
//	go s.Run(ctx)
//
// Nothing here blocks routing: a replica whose scrape fails keeps serving;
// the Sink is told its signals are unknown.
package signals

import (
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Sample is what one scrape of a replica's /metrics said. Each value has a
// Has flag: false means the replica did not report it (the family was
// missing, or every series of it was NaN, infinite or negative), which is
// not the same as zero.
type Sample struct {
	Running float64 // requests in the running batch, summed over the replica's engines
	Waiting float64 // requests waiting in the queue, summed over the replica's engines
	KVUse   float64 // KV-cache use, 0..1, the fullest of the replica's engines

	HasRunning, HasWaiting, HasKV bool

	// Adapters is the replica's LoRA adapters (vLLM's
	// vllm:lora_requests_info); nil when it reports none. A pointer keeps
	// Sample comparable.
	Adapters *Adapters

	// The engine's facts (policy.Facts), 0 when not reported: the KV
	// pool's size in tokens (vLLM: num_gpu_blocks × block_size of
	// vllm:cache_config_info; SGLang: sglang:max_total_num_tokens) and
	// its block size (vLLM's block_size), the smallest engine's.
	CacheTokens float64
	BlockSize   int
	// Slots is the requests the replica serves at once (llama.cpp's
	// total_slots of GET /props, Mapping.Props), 0 when not reported.
	Slots int
}

// Adapters is what a replica says of its LoRA adapters: the ones resident
// and serving (running), the ones requests wait for, and its adapter
// slots (vLLM --max-loras; 0 unknown).
type Adapters struct {
	Running []string
	Waiting []string
	Max     int
}

// Mapping says which metric families give which signal. Each signal lists
// family names in order of preference: the first one present in the
// exposition is used (vLLM renamed gpu_cache_usage_perc to
// kv_cache_usage_perc; the list reads both). An empty list means the signal
// is never read.
//
// Several series of one family (vLLM's engine label for data-parallel
// engines, SGLang's dp_rank) are combined: counts are summed, because each
// engine has its own batch and queue and a new request competes with all of
// them; KV use takes the maximum, because ratios of different pools do not
// add, and the fullest engine is the one that will preempt or queue first.
type Mapping struct {
	Running []string `json:"running"`
	Waiting []string `json:"waiting"`
	KVUse   []string `json:"kv_use"`
	// Adapters names info families of the LoRA adapters (vLLM's
	// vllm:lora_requests_info: a gauge whose value is the time it was set,
	// with the labels max_lora, running_lora_adapters and
	// waiting_lora_adapters, comma-separated); the newest series is read.
	Adapters []string `json:"adapters,omitempty"`
	// CacheConfig names info families of the KV cache's configuration
	// (vLLM's vllm:cache_config_info, labels block_size and
	// num_gpu_blocks); CacheTokens names gauges of the KV pool's size in
	// tokens (SGLang's sglang:max_total_num_tokens), read when no
	// CacheConfig family gives it. Both: the smallest engine's.
	CacheConfig []string `json:"cache_config,omitempty"`
	CacheTokens []string `json:"cache_tokens,omitempty"`
	// Props is the path of a JSON endpoint whose total_slots is the
	// replica's slot count (llama.cpp's /props), asked once per replica
	// beside its /metrics; "" none.
	Props string `json:"props,omitempty"`
	// KVScale multiplies the KV family's value to give 0..1: 1 for every
	// preset (all three engines report a fraction), 0.01 for a family in
	// percent.
	KVScale float64 `json:"kv_scale"`
}

// Preset names, for Preset and error messages.
const (
	PresetLlamaCpp = "llamacpp"
	PresetVLLM     = "vllm"
	PresetSGLang   = "sglang"
)

// presets are the built-in mappings; NOTES.md records where each name was
// verified.
var presets = map[string]Mapping{
	// llama.cpp's server (started with --metrics). Current upstream no longer
	// exports kv_cache_usage_ratio (see NOTES.md): KV is then unknown, not 0.
	PresetLlamaCpp: {
		Running: []string{"llamacpp:requests_processing"},
		Waiting: []string{"llamacpp:requests_deferred"},
		KVUse:   []string{"llamacpp:kv_cache_usage_ratio"},
		KVScale: 1,
		// tools/server/server.cpp, GET /props: total_slots.
		Props: "/props",
	},
	// vLLM (V1 engine): kv_cache_usage_perc is a fraction 0..1 despite its
	// name; vLLM before 0.9 exported the same value as gpu_cache_usage_perc.
	PresetVLLM: {
		Running:  []string{"vllm:num_requests_running"},
		Waiting:  []string{"vllm:num_requests_waiting"},
		KVUse:    []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
		KVScale:  1,
		Adapters: []string{"vllm:lora_requests_info"},
		// vllm/v1/metrics/loggers.py, PrometheusStatLogger.log_metrics_info.
		CacheConfig: []string{"vllm:cache_config_info"},
	},
	// SGLang: token_usage is used tokens / KV pool size, 0..1.
	PresetSGLang: {
		Running: []string{"sglang:num_running_reqs"},
		Waiting: []string{"sglang:num_queue_reqs"},
		KVUse:   []string{"sglang:token_usage"},
		KVScale: 1,
		// python/sglang/srt/metrics/collector.py: the KV pool in tokens.
		CacheTokens: []string{"sglang:max_total_num_tokens"},
	},
}

// PresetNames lists the built-in presets, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Preset returns the built-in mapping called name.
func Preset(name string) (Mapping, error) {
	m, ok := presets[name]
	if !ok {
		return Mapping{}, fmt.Errorf("unknown preset %q (known: %s)", name, strings.Join(PresetNames(), ", "))
	}
	return m.clone(), nil
}

func (m Mapping) clone() Mapping {
	m.Running = append([]string(nil), m.Running...)
	m.Waiting = append([]string(nil), m.Waiting...)
	m.KVUse = append([]string(nil), m.KVUse...)
	m.Adapters = append([]string(nil), m.Adapters...)
	m.CacheConfig = append([]string(nil), m.CacheConfig...)
	m.CacheTokens = append([]string(nil), m.CacheTokens...)
	return m
}

// With returns m with every field that o sets (a non-empty list, a non-zero
// scale) replaced by o's: a preset with a configured override.
func (m Mapping) With(o Mapping) Mapping {
	m = m.clone()
	if len(o.Running) > 0 {
		m.Running = append([]string(nil), o.Running...)
	}
	if len(o.Waiting) > 0 {
		m.Waiting = append([]string(nil), o.Waiting...)
	}
	if len(o.KVUse) > 0 {
		m.KVUse = append([]string(nil), o.KVUse...)
	}
	if len(o.Adapters) > 0 {
		m.Adapters = append([]string(nil), o.Adapters...)
	}
	if len(o.CacheConfig) > 0 {
		m.CacheConfig = append([]string(nil), o.CacheConfig...)
	}
	if len(o.CacheTokens) > 0 {
		m.CacheTokens = append([]string(nil), o.CacheTokens...)
	}
	if o.Props != "" {
		m.Props = o.Props
	}
	if o.KVScale != 0 {
		m.KVScale = o.KVScale
	}
	return m
}

// Validate reports the first problems of m, each naming its key under
// prefix (for example "signals.mapping").
func (m Mapping) Validate(prefix string) error {
	var errs []error
	names := func(key string, list []string) {
		for i, n := range list {
			if n == "" || !model.UTF8Validation.IsValidMetricName(n) {
				errs = append(errs, fmt.Errorf("%s.%s[%d]: %q is not a metric name", prefix, key, i, n))
			}
		}
	}
	names("running", m.Running)
	names("waiting", m.Waiting)
	names("kv_use", m.KVUse)
	names("adapters", m.Adapters)
	names("cache_config", m.CacheConfig)
	names("cache_tokens", m.CacheTokens)
	if m.Props != "" && !strings.HasPrefix(m.Props, "/") {
		errs = append(errs, fmt.Errorf("%s.props: must start with /, got %q", prefix, m.Props))
	}
	if len(m.Running)+len(m.Waiting)+len(m.KVUse) == 0 {
		errs = append(errs, fmt.Errorf("%s: maps no signal (set running, waiting or kv_use)", prefix))
	}
	if len(m.KVUse) > 0 && !(m.KVScale > 0 && !math.IsInf(m.KVScale, 0)) {
		errs = append(errs, fmt.Errorf("%s.kv_scale: must be > 0, got %v", prefix, m.KVScale))
	}
	return errors.Join(errs...)
}

// kvTolerance absorbs rounding in a replica's own ratio (1 - free/total).
const kvTolerance = 1e-6

// Parse reads a Prometheus text exposition and extracts the signals m maps.
// A family that is missing leaves its signal unknown; input that is not a
// valid exposition, a mapped family that is a histogram or summary, and a KV
// value outside 0..1 after scaling (a wrong kv_scale) are errors.
func Parse(r io.Reader, m Mapping) (Sample, error) {
	p := newParser()
	return parse(&p, r, m)
}

// newParser returns a text parser that accepts any UTF-8 metric name (the
// engines' names contain colons, which the legacy rules allow too).
func newParser() expfmt.TextParser { return expfmt.NewTextParser(model.UTF8Validation) }

// parse is Parse with a parser the caller keeps (a TextParser reuses its
// read buffer between calls; it must not be shared between goroutines).
func parse(p *expfmt.TextParser, r io.Reader, m Mapping) (Sample, error) {
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return Sample{}, fmt.Errorf("parse metrics: %w", err)
	}
	var s Sample
	if s.Running, s.HasRunning, err = pick(fams, m.Running, sumOf); err != nil {
		return Sample{}, err
	}
	if s.Waiting, s.HasWaiting, err = pick(fams, m.Waiting, sumOf); err != nil {
		return Sample{}, err
	}
	if s.KVUse, s.HasKV, err = pick(fams, m.KVUse, maxOf); err != nil {
		return Sample{}, err
	}
	if s.HasKV {
		s.KVUse *= m.KVScale
		if s.KVUse > 1+kvTolerance {
			return Sample{}, fmt.Errorf("KV-cache use %g is above 1 after kv_scale %g: is the family in percent?", s.KVUse, m.KVScale)
		}
		s.KVUse = min(s.KVUse, 1)
	}
	if s.Adapters, err = adapters(fams, m.Adapters); err != nil {
		return Sample{}, err
	}
	if s.CacheTokens, s.BlockSize, err = cacheConfig(fams, m.CacheConfig); err != nil {
		return Sample{}, err
	}
	if s.CacheTokens == 0 {
		if s.CacheTokens, err = cacheTokens(fams, m.CacheTokens); err != nil {
			return Sample{}, err
		}
	}
	return s, nil
}

type combine func(acc, v float64) float64

func sumOf(acc, v float64) float64 { return acc + v }
func maxOf(acc, v float64) float64 { return max(acc, v) }

// pick combines the usable series of the first family of names present in
// fams. A series is usable when its value is finite and not negative.
func pick(fams map[string]*dto.MetricFamily, names []string, f combine) (float64, bool, error) {
	for _, name := range names {
		mf, ok := fams[name]
		if !ok {
			continue
		}
		var acc float64
		var any bool
		for _, mt := range mf.GetMetric() {
			var v float64
			switch {
			case mt.Gauge != nil:
				v = mt.Gauge.GetValue()
			case mt.Counter != nil:
				v = mt.Counter.GetValue()
			case mt.Untyped != nil:
				v = mt.Untyped.GetValue()
			default:
				return 0, false, fmt.Errorf("metric family %s is a %s; want a gauge, counter or untyped value",
					name, strings.ToLower(mf.GetType().String()))
			}
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				continue
			}
			if any {
				acc = f(acc, v)
			} else {
				acc, any = v, true
			}
		}
		return acc, any, nil
	}
	return 0, false, nil
}
