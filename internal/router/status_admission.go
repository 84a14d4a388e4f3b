package router

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/llm-ring/llm-ring/internal/admission"
	"github.com/llm-ring/llm-ring/internal/policy"
)

// AdmissionInfo is the status page's view of the admission queue
// (admission.enabled; docs/admission.md): absent when admission is off.
type AdmissionInfo struct {
	Queued        int                `json:"queued"`         // requests waiting in the router
	QueueBytes    int64              `json:"queue_bytes"`    // their bodies' bytes
	QueueCapacity int                `json:"queue_capacity"` // the most that may wait
	Pending       int                `json:"pending"`        // let go, not yet routed
	Saturation    float64            `json:"saturation"`     // the pool's score now
	Limit         float64            `json:"limit"`          // saturated at or above
	Bands         []AdmissionBand    `json:"bands"`          // waiting per priority band, highest first
	Outcomes      map[string]float64 `json:"outcomes"`       // llm_ring_admission_total by outcome, since start
}

// AdmissionBand is one priority band's waiting requests.
type AdmissionBand struct {
	Priority int `json:"priority"`
	Waiting  int `json:"waiting"`
}

// admissionInfo reads the admitter under its lock (as its own steps do:
// the tables' locks inside), summed over its pools: the saturation shown is
// the most saturated pool's. The score is computed, not set on the gauge:
// the page only looks.
func (r *Router) admissionInfo(now time.Time) *AdmissionInfo {
	a := r.adm
	if a == nil {
		return nil
	}
	a.mu.Lock()
	s := &a.s
	out := &AdmissionInfo{QueueCapacity: s.QueueCapacity, Limit: s.Limit, Bands: []AdmissionBand{}}
	waiting := map[int]int{}
	var prios []int
	for _, p := range a.order {
		out.Queued += p.c.Len()
		out.QueueBytes += p.c.Bytes()
		out.Pending += p.pending
		score := p.table.LoadView(now.UnixNano(), func(v *policy.View) float64 {
			return admission.PoolScore(v, s, p.pending)
		})
		out.Saturation = max(out.Saturation, score)
		ps, lens := p.c.BandLen()
		for i, pr := range ps {
			if _, ok := waiting[pr]; !ok {
				prios = append(prios, pr)
			}
			waiting[pr] += lens[i]
		}
	}
	a.mu.Unlock()
	slices.SortFunc(prios, func(x, y int) int { return y - x })
	for _, p := range prios {
		out.Bands = append(out.Bands, AdmissionBand{Priority: p, Waiting: waiting[p]})
	}
	out.Outcomes = counterByLabel(a.outcomes, "outcome")
	return out
}

// counterByLabel reads a counter vector's values by one label.
func counterByLabel(c *prometheus.CounterVec, label string) map[string]float64 {
	ch := make(chan prometheus.Metric, 16)
	go func() { c.Collect(ch); close(ch) }()
	out := map[string]float64{}
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) != nil || d.Counter == nil {
			continue
		}
		for _, l := range d.Label {
			if l.GetName() == label {
				out[l.GetValue()] += d.Counter.GetValue()
			}
		}
	}
	return out
}
