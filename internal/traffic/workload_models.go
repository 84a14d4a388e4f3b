package traffic

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/llm-ring/llm-ring/internal/model"
)

// WorkloadModel is one model of a workload that spreads its traffic over
// several (issue 23: pools by model), with the replicas that serve it. The
// fleet is part of the workload so that one file reproduces a measurement:
// how many replicas serve which model is what decides whether a popular
// model's pool is overloaded while another idles.
type WorkloadModel struct {
	// Name is what a request asks for (the body's "model").
	Name string `json:"name"`
	// Share is the model's weight: an arrival asks for it with probability
	// Share / Σ Share.
	Share float64 `json:"share"`
	// Replicas is how many replicas serve it, each with the replica preset
	// Preset (internal/model: vllm-h100-8b, vllm-4xh100-70b, ...).
	Replicas int    `json:"replicas"`
	Preset   string `json:"preset"`
}

// WorkloadAdapters makes every arrival ask for a LoRA adapter of the
// workload's model (issue 23): Count adapters named <model>-lora-01, ...,
// the k-th (from 1) asked with probability ∝ 1 / k^ZipfS.
type WorkloadAdapters struct {
	Count int     `json:"count"`
	ZipfS float64 `json:"zipf_s"`
	// MaxLoRAs is each replica's adapter slots (vLLM --max-loras).
	MaxLoRAs int `json:"max_loras"`
	// LoadMS is the model time to load an adapter into a free slot.
	LoadMS float64 `json:"load_ms"`
}

// Target is what one request asks for: a model, and an adapter of it ("":
// the base model).
type Target struct {
	Model, Adapter string
}

// validateModels checks the models and adapters sections (both optional).
func (w *Workload) validateModels() []error {
	var errs []error
	seen := map[string]bool{}
	for i, m := range w.Models {
		key := fmt.Sprintf("models[%d]", i)
		switch {
		case m.Name == "" || strings.ContainsAny(m.Name, "#,\" \t\n"):
			errs = append(errs, fmt.Errorf("%s.name: %q must be non-empty, without '#', ',', quotes or spaces", key, m.Name))
		case seen[m.Name]:
			errs = append(errs, fmt.Errorf("%s.name: %q given twice", key, m.Name))
		}
		seen[m.Name] = true
		if !(m.Share > 0 && m.Share <= 1e6) {
			errs = append(errs, fmt.Errorf("%s.share: must be in (0, 1000000], got %g", key, m.Share))
		}
		if m.Replicas < 1 || m.Replicas > 1000 {
			errs = append(errs, fmt.Errorf("%s.replicas: must be between 1 and 1000, got %d", key, m.Replicas))
		}
		if !slices.Contains(model.PresetNames(), m.Preset) {
			errs = append(errs, fmt.Errorf("%s.preset: %q is not one of %s", key, m.Preset, strings.Join(model.PresetNames(), ", ")))
		}
	}
	if a := w.Adapters; a != nil {
		if len(w.Models) != 1 {
			errs = append(errs, fmt.Errorf("adapters: need exactly one entry in models (their base model), got %d", len(w.Models)))
		}
		if a.Count < 1 || a.Count > 10000 {
			errs = append(errs, fmt.Errorf("adapters.count: must be between 1 and 10000, got %d", a.Count))
		}
		if !(a.ZipfS >= 0 && a.ZipfS <= 10) {
			errs = append(errs, fmt.Errorf("adapters.zipf_s: must be between 0 and 10, got %g", a.ZipfS))
		}
		if a.MaxLoRAs < 1 || a.MaxLoRAs > 1024 {
			errs = append(errs, fmt.Errorf("adapters.max_loras: must be between 1 and 1024, got %d", a.MaxLoRAs))
		}
		if !(a.LoadMS >= 0 && a.LoadMS <= 600000) {
			errs = append(errs, fmt.Errorf("adapters.load_ms: must be between 0 and 600000, got %g", a.LoadMS))
		}
	}
	return errs
}

// AdapterName is the name of adapter k (0-based, by popularity) of base.
func AdapterName(base string, k int) string { return fmt.Sprintf("%s-lora-%02d", base, k+1) }

// AdapterNames lists the workload's adapters, most popular first (nil
// without adapters).
func (w *Workload) AdapterNames() []string {
	if w.Adapters == nil || len(w.Models) == 0 {
		return nil
	}
	out := make([]string, w.Adapters.Count)
	for k := range out {
		out[k] = AdapterName(w.Models[0].Name, k)
	}
	return out
}

// ZipfWeights returns the probabilities of ranks 1..n under Zipf's law
// with exponent s: p(k) = k^-s / Σ_j j^-s.
func ZipfWeights(n int, s float64) []float64 {
	p := make([]float64, n)
	var sum float64
	for k := range p {
		p[k] = math.Pow(float64(k+1), -s)
		sum += p[k]
	}
	for k := range p {
		p[k] /= sum
	}
	return p
}

// picker draws the target of each arrival (a multi-round user: all its
// rounds) from a stream of its own, so that the prompts of a workload
// without models are drawn exactly as before. ns is the namespace of a
// target: its index among the models (or, with adapters, the adapters);
// requests of different namespaces share no block, as no KV cache is shared
// between models, nor, in vLLM, between adapters (the LoRA id is part of
// the block hash).
type picker struct {
	rng     *rand.Rand
	targets []Target
	cum     []float64 // cumulative weights of targets
}

func (w *Workload) newPicker(seed int64) *picker {
	p := &picker{rng: rand.New(rand.NewPCG(uint64(seed), 0x70015))}
	var weights []float64
	switch {
	case w.Adapters != nil:
		for _, name := range w.AdapterNames() {
			p.targets = append(p.targets, Target{Model: w.Models[0].Name, Adapter: name})
		}
		weights = ZipfWeights(w.Adapters.Count, w.Adapters.ZipfS)
	case len(w.Models) > 0:
		for _, m := range w.Models {
			p.targets = append(p.targets, Target{Model: m.Name})
			weights = append(weights, m.Share)
		}
	default:
		p.targets = []Target{{}}
		weights = []float64{1}
	}
	var sum float64
	for _, x := range weights {
		sum += x
		p.cum = append(p.cum, sum)
	}
	for k := range p.cum {
		p.cum[k] /= sum
	}
	return p
}

// namespaces is the number of targets (1 without models).
func (p *picker) namespaces() int { return len(p.targets) }

// next draws a target: its namespace. A single target draws nothing.
func (p *picker) next() int {
	if len(p.targets) == 1 {
		return 0
	}
	u := p.rng.Float64()
	k, _ := slices.BinarySearch(p.cum, u)
	return min(k, len(p.targets)-1)
}
