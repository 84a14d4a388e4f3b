package router

import (
	"time"

	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/signals"
	"github.com/llm-ring/llm-ring/internal/state"
)

// tableSink feeds the replicas' own signals into the routing state, where
// policies read them as Row.Reported.
type tableSink struct{ t *state.Table }

var _ signals.Sink = tableSink{}

// Report implements signals.Sink: a failed scrape makes the signals
// unknown (not zero).
func (s tableSink) Report(name string, sm signals.Sample, ok bool, at time.Time) {
	r := policy.Reported{At: at.UnixNano()}
	if ok {
		r.HasQueue = sm.HasRunning && sm.HasWaiting
		if r.HasQueue {
			r.Running, r.Waiting = sm.Running, sm.Waiting
		}
		if r.HasKV = sm.HasKV; r.HasKV {
			r.KVUse = sm.KVUse
		}
	}
	s.t.SetReported(name, r)
}

// newScraper returns the scraper of the replicas' /metrics the
// configuration asks for, or nil (signals.interval 0).
func (r *Router) newScraper() (*signals.Scraper, error) {
	c := r.cfg.Signals
	if c.Interval <= 0 {
		return nil, nil
	}
	m, err := signals.Preset(c.Engine)
	if err != nil {
		return nil, err
	}
	return signals.New(signals.Config{Interval: c.Interval.D(), Timeout: c.Timeout.D(), Path: c.Path, Mapping: m},
		tableSink{r.table}, r.reg, r.log)
}

// scrapeTargets tells the scraper the current replica set.
func (r *Router) scrapeTargets() {
	if r.scraper == nil {
		return
	}
	st := r.table.Status()
	ts := make([]signals.Target, len(st.Replicas))
	for i, x := range st.Replicas {
		ts[i] = signals.Target{Name: x.Name, URL: x.URL}
	}
	r.scraper.SetTargets(ts)
}
