package router

import (
	"time"

	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/pool"
	"github.com/llm-ring/llm-ring/internal/signals"
)

// tableSink feeds the replicas' own signals into the routing state of
// every pool holding the replica, where policies read them as
// Row.Reported, and the engine facts they report into the pools'
// policies (facts.go).
type tableSink struct {
	t *pool.Set
	f *liveFacts
}

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
		if a := sm.Adapters; a != nil {
			r.Adapters = policy.Adapters{Running: a.Running, Waiting: a.Waiting, Max: a.Max, Has: true}
		}
	}
	s.t.SetReported(name, r)
	s.f.report(name, sm, ok)
}

// newScraper returns the scraper of the replicas' /metrics the
// configuration asks for, or nil (signals.interval 0, or an engine that
// publishes no metrics, Ollama, for the set and every static replica).
func (r *Router) newScraper() (*signals.Scraper, error) {
	c := r.cfg.Signals
	if c.Interval <= 0 {
		return nil, nil
	}
	name := r.cfg.MetricsPreset("")
	for _, x := range r.cfg.Discovery.Static {
		if name == "" {
			name = r.cfg.MetricsPreset(x.Engine)
		}
	}
	if name == "" {
		return nil, nil
	}
	m, err := signals.Preset(name)
	if err != nil {
		return nil, err
	}
	r.facts = newLiveFacts(r)
	return signals.New(signals.Config{Interval: c.Interval.D(), Timeout: c.Timeout.D(), Path: c.Path, Mapping: m},
		tableSink{t: r.pools, f: r.facts}, r.reg, r.log)
}

// scrapeTargets tells the scraper the current replica set, each replica
// with its engine's metric names; a replica whose engine publishes none is
// not scraped (its signals stay unknown).
func (r *Router) scrapeTargets() {
	if r.scraper == nil {
		return
	}
	st := r.view()
	ts := make([]signals.Target, 0, len(st.Replicas))
	names := make([]string, 0, len(st.Replicas))
	for _, x := range st.Replicas {
		names = append(names, x.Name)
		name := r.cfg.MetricsPreset(x.Engine)
		if name == "" {
			continue
		}
		m, err := signals.Preset(name)
		if err != nil {
			continue // the configuration's engines are validated
		}
		ts = append(ts, signals.Target{Name: x.Name, URL: x.URL, Mapping: &m})
	}
	r.scraper.SetTargets(ts)
	r.facts.members(names)
}
