package router

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llm-ring/llm-ring/internal/wire"
)

// TestRequestSeriesAreTheVectors: the cached children of a label set are
// the vectors' own (one series, counted through either), made on first
// use; and a proxied request counts in requests_total and request_seconds
// as before.
func TestRequestSeriesAreTheVectors(t *testing.T) {
	g := newHandlerRig(t, false)
	m := g.rt.metrics
	k := seriesKey{"p", "r", "home", "200", "m"}
	s := m.requestSeries(k)
	if s2 := m.requestSeries(k); s2 != s {
		t.Fatal("a label set's children looked up twice differ")
	}
	if s.requests != m.requests.WithLabelValues("p", "r", "home", "200", "m") || s.latency != m.latency.WithLabelValues("p", "m") {
		t.Fatal("the cached children are not the vectors'")
	}
	s.requests.Inc()
	m.requests.WithLabelValues("p", "r", "home", "200", "m").Inc()
	if got := testutil.ToFloat64(s.requests); got != 2 {
		t.Fatalf("the series counts %v, want 2", got)
	}
	for range 10 {
		g.serve(t)
	}
	fams, err := g.rt.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total, series := 0.0, 0
	for _, fam := range fams {
		if fam.GetName() != wire.MetricRequests {
			continue
		}
		for _, mt := range fam.GetMetric() {
			series++
			for _, l := range mt.GetLabel() {
				if l.GetName() == "policy" && l.GetValue() == "llm-aware" {
					total += mt.GetCounter().GetValue()
				}
			}
		}
	}
	if total != 10 || series != len(m.series) {
		t.Fatalf("requests_total counts %v proxied requests (want 10) in %d series; %d label sets cached", total, series, len(m.series))
	}
}

// BenchmarkRequestSeries: a finished request's two children, cached
// against looked up in the vectors.
func BenchmarkRequestSeries(b *testing.B) {
	m := newHandlerRig(b, false).rt.metrics
	k := seriesKey{"llm-aware", "llm-1", "home", "200", ""}
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			s := m.requestSeries(k)
			s.requests.Inc()
			s.latency.Observe(0.01)
		}
	})
	b.Run("vectors", func(b *testing.B) {
		for b.Loop() {
			m.requests.WithLabelValues(k.policy, k.replica, k.reason, k.code, k.model).Inc()
			m.latency.WithLabelValues(k.policy, k.model).Observe(0.01)
		}
	})
}
