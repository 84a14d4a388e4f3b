package analysis

import (
	"math"
	"testing"

	"github.com/llm-ring/llm-ring/internal/record"
)

// row builds a successful request row; tweak fields with the options.
func row(conv string, turn int, replica string, cacheN, promptN int, startMS float64, opts ...func(*record.Request)) record.Request {
	r := record.Request{
		RunID: "r", Policy: "p", Conversation: conv, Turn: turn, Replica: replica,
		CacheN: cacheN, PromptN: promptN, PredictedN: 10,
		LatencyMS: 1000, TTFTMS: 100, Status: 200, StartMS: startMS, EndMS: startMS + 1000,
	}
	for _, o := range opts {
		o(&r)
	}
	return r
}

func failed(r *record.Request) { r.Status, r.Error = 500, "boom" }

func runOf(info record.Run, rows ...record.Request) *Run {
	info.RunID, info.Policy = "r", "p"
	return &Run{Info: info, Requests: rows}
}

func TestFollowUpClassification(t *testing.T) {
	// Every case: turn 1 of conversation "a" processed 100 prompt tokens on
	// llm-0 (cache_n 0 + prompt_n 100), so a hit needs cache_n >= 90.
	first := row("a", 1, "llm-0", 0, 100, 0)
	tests := []struct {
		name                                          string
		rows                                          []record.Request
		followUps, hits, misses, avoidable, redirects int
	}{
		{"hit: same replica reused the whole previous prompt",
			[]record.Request{first, row("a", 2, "llm-0", 120, 30, 10)}, 1, 1, 0, 0, 0},
		{"hit at exactly 0.9 × the previous prompt",
			[]record.Request{first, row("a", 2, "llm-0", 90, 60, 10)}, 1, 1, 0, 0, 0},
		{"miss just below the threshold, same replica: not avoidable (evicted)",
			[]record.Request{first, row("a", 2, "llm-0", 89, 61, 10)}, 1, 0, 1, 0, 0},
		{"miss reusing only a shared system prompt on the same replica",
			[]record.Request{first, row("a", 2, "llm-0", 20, 130, 10)}, 1, 0, 1, 0, 0},
		{"avoidable miss: served elsewhere, history was on llm-0",
			[]record.Request{first, row("a", 2, "llm-1", 20, 130, 10)}, 1, 0, 1, 1, 1},
		{"redirect that still hits (both replicas held it): a redirect, not a miss",
			[]record.Request{first, row("a", 2, "llm-1", 100, 50, 10)}, 1, 1, 0, 0, 1},
		{"turn 1 alone is no follow-up",
			[]record.Request{first}, 0, 0, 0, 0, 0},
		{"previous turn failed: no follow-up",
			[]record.Request{row("a", 1, "llm-0", 0, 100, 0, failed), row("a", 2, "llm-0", 0, 150, 10)}, 0, 0, 0, 0, 0},
		{"follow-up itself failed: not counted",
			[]record.Request{first, row("a", 2, "llm-1", 0, 150, 10, failed)}, 0, 0, 0, 0, 0},
		{"previous turn missing from the records: no follow-up",
			[]record.Request{first, row("a", 3, "llm-0", 0, 200, 10)}, 0, 0, 0, 0, 0},
		{"threshold uses the previous turn's cache_n + prompt_n, not its prompt_n",
			[]record.Request{first, row("a", 2, "llm-0", 120, 30, 10), row("a", 3, "llm-0", 100, 100, 20)}, 2, 1, 1, 0, 0},
		{"conversations do not mix: b's turn 2 follows b's turn 1",
			[]record.Request{first, row("b", 1, "llm-1", 0, 50, 0), row("b", 2, "llm-1", 50, 10, 10)}, 1, 1, 0, 0, 0},
		{"status 200 with an error text is a failure",
			[]record.Request{first, row("a", 2, "llm-0", 120, 30, 10, func(r *record.Request) { r.Error = "truncated" })}, 0, 0, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := ComputeMetrics(runOf(record.Run{Replicas: 2}, tt.rows...), Options{})
			got := [5]int{m.FollowUps, m.Hits, m.Misses, m.AvoidableMisses, m.Redirects}
			want := [5]int{tt.followUps, tt.hits, tt.misses, tt.avoidable, tt.redirects}
			if got != want {
				t.Errorf("followUps, hits, misses, avoidable, redirects = %v, want %v", got, want)
			}
		})
	}
}

func TestRates(t *testing.T) {
	rows := []record.Request{
		row("a", 1, "llm-0", 0, 100, 0),
		row("a", 2, "llm-0", 100, 20, 1), // hit
		row("a", 3, "llm-1", 0, 140, 2),  // avoidable miss
		row("a", 4, "llm-1", 0, 180, 3),  // miss on the same replica
		row("a", 5, "llm-1", 180, 40, 4), // hit
	}
	m := ComputeMetrics(runOf(record.Run{Replicas: 2}, rows...), Options{})
	if m.HitRate != 0.5 || m.MissRate != 0.5 || m.AvoidableShare != 0.5 {
		t.Errorf("hit, miss, avoidable share = %v, %v, %v; want 0.5 each", m.HitRate, m.MissRate, m.AvoidableShare)
	}
	// Σ cache_n = 280; Σ (cache_n + prompt_n) = 100+120+140+180+220 = 760.
	if want := 280.0 / 760; math.Abs(m.CachedShare-want) > 1e-12 {
		t.Errorf("cached share = %v, want %v", m.CachedShare, want)
	}

	empty := ComputeMetrics(runOf(record.Run{Replicas: 2}), Options{})
	for name, v := range map[string]float64{
		"hit rate": empty.HitRate, "avoidable share": empty.AvoidableShare, "p50": empty.LatencyP50S,
		"imbalance": empty.Imbalance, "cached share": empty.CachedShare, "scale hit rate": empty.ScaleHitRate,
	} {
		if !math.IsNaN(v) {
			t.Errorf("empty run: %s = %v, want NaN (n/a)", name, v)
		}
	}
}

func TestScaleUp(t *testing.T) {
	// The extra replica llm-2 is ready at 60 s; the window is 60 s.
	info := record.Run{Replicas: 2, ScaleReadyMS: 60000, ScaleReplica: "llm-2"}
	rows := []record.Request{
		// a: last turn before on llm-0 (turn 2), first turn after on llm-2: moved.
		row("a", 1, "llm-1", 0, 100, 0),
		row("a", 2, "llm-0", 0, 150, 30000),
		row("a", 3, "llm-2", 0, 200, 60000), // miss at exactly ready: in the window
		// b: stays on llm-1; its first turn after failed, so the next one counts.
		row("b", 1, "llm-1", 0, 100, 1000),
		row("b", 2, "llm-2", 0, 100, 61000, failed),
		row("b", 3, "llm-1", 0, 100, 62000), // not a follow-up (turn 2 failed)
		// c: only after the scale-up: not eligible.
		row("c", 1, "llm-2", 0, 100, 70000),
		row("c", 2, "llm-2", 100, 20, 119999), // hit, last instant of the window
		row("c", 3, "llm-2", 0, 200, 120000),  // miss, just outside the window
		// d: only before the scale-up: not eligible.
		row("d", 1, "llm-0", 0, 100, 2000),
		row("d", 2, "llm-0", 100, 10, 59999), // hit, before the window
	}
	m := ComputeMetrics(runOf(info, rows...), Options{WindowS: 60})
	if !m.ScaleUp || m.ScaleReadyS != 60 {
		t.Fatalf("ScaleUp, ScaleReadyS = %v, %v; want true, 60", m.ScaleUp, m.ScaleReadyS)
	}
	if m.ScaleFollowUps != 2 || m.ScaleHits != 1 || m.ScaleHitRate != 0.5 {
		t.Errorf("scale window follow-ups, hits, rate = %d, %d, %v; want 2, 1, 0.5", m.ScaleFollowUps, m.ScaleHits, m.ScaleHitRate)
	}
	if m.MovedEligible != 2 || m.Moved != 1 || m.MovedShare != 0.5 {
		t.Errorf("moved eligible, moved, share = %d, %d, %v; want 2, 1, 0.5", m.MovedEligible, m.Moved, m.MovedShare)
	}

	none := ComputeMetrics(runOf(record.Run{Replicas: 2, ScaleAtMS: 30000}, rows...), Options{})
	if none.ScaleUp || !math.IsNaN(none.ScaleHitRate) || !math.IsNaN(none.MovedShare) {
		t.Errorf("scale replica started but never ready: ScaleUp %v, hit rate %v, moved %v; want false, NaN, NaN",
			none.ScaleUp, none.ScaleHitRate, none.MovedShare)
	}
}

func TestImbalance(t *testing.T) {
	tok := func(prompt, predicted int) func(*record.Request) {
		return func(r *record.Request) { r.PromptN, r.PredictedN = prompt, predicted }
	}
	tests := []struct {
		name     string
		info     record.Run
		rows     []record.Request
		replicas int
		want     float64
	}{
		{"even work on two replicas",
			record.Run{Replicas: 2},
			[]record.Request{row("a", 1, "llm-0", 0, 0, 0, tok(90, 10)), row("b", 1, "llm-1", 0, 0, 0, tok(80, 20))},
			2, 1},
		{"an idle replica counts as 0: 3 replicas, work 300/0/0 → 300 / 100",
			record.Run{Replicas: 3},
			[]record.Request{row("a", 1, "llm-0", 0, 0, 0, tok(250, 50))},
			3, 3},
		{"failed requests add no work but their replica is counted",
			record.Run{Replicas: 1},
			[]record.Request{row("a", 1, "llm-0", 0, 0, 0, tok(100, 0)), row("b", 1, "llm-1", 0, 0, 0, tok(500, 0), failed)},
			2, 2},
		{"the ready scale-up replica counts even if it got nothing",
			record.Run{Replicas: 2, ScaleReadyMS: 1000, ScaleReplica: "llm-2"},
			[]record.Request{row("a", 1, "llm-0", 0, 0, 0, tok(100, 0)), row("b", 1, "llm-1", 0, 0, 0, tok(100, 0))},
			3, 1.5},
		{"cached tokens are not work: prompt_n + predicted_n only",
			record.Run{Replicas: 2},
			[]record.Request{row("a", 1, "llm-0", 1000, 0, 0, tok(50, 50)), row("b", 1, "llm-1", 0, 0, 0, tok(300, 0))},
			2, 1.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := ComputeMetrics(runOf(tt.info, tt.rows...), Options{})
			if m.ReplicaCount != tt.replicas || math.Abs(m.Imbalance-tt.want) > 1e-12 {
				t.Errorf("replicas, imbalance = %d, %v; want %d, %v (work %v)", m.ReplicaCount, m.Imbalance, tt.replicas, tt.want, m.Work)
			}
		})
	}
}

func TestLatencyPercentiles(t *testing.T) {
	lat := func(ms, ttft float64) func(*record.Request) {
		return func(r *record.Request) { r.LatencyMS, r.TTFTMS = ms, ttft }
	}
	rows := []record.Request{
		row("a", 1, "x", 0, 1, 0, lat(4000, 0)), // no TTFT reported: left out of the TTFT median
		row("b", 1, "x", 0, 1, 0, lat(1000, 100)),
		row("c", 1, "x", 0, 1, 0, lat(3000, 300)),
		row("d", 1, "x", 0, 1, 0, lat(2000, 200)),
		row("e", 1, "x", 0, 1, 0, lat(99000, 9900), failed), // failures are left out
	}
	m := ComputeMetrics(runOf(record.Run{Replicas: 1}, rows...), Options{})
	// Latencies 1, 2, 3, 4 s: p50 at h = 1.5 → 2.5; p95 at h = 2.85 → 3.85.
	if math.Abs(m.LatencyP50S-2.5) > 1e-12 || math.Abs(m.LatencyP95S-3.85) > 1e-12 || math.Abs(m.TTFTP50S-0.2) > 1e-12 {
		t.Errorf("p50, p95, ttft p50 = %v, %v, %v; want 2.5, 3.85, 0.2", m.LatencyP50S, m.LatencyP95S, m.TTFTP50S)
	}
}

func TestPercentile(t *testing.T) {
	tests := []struct {
		xs   []float64
		q    float64
		want float64
	}{
		{[]float64{5}, 0.95, 5},                // one value is every percentile
		{[]float64{3, 1, 2}, 0.5, 2},           // unsorted input, exact middle
		{[]float64{1, 2, 3, 4}, 0.5, 2.5},      // halfway between the two middle values
		{[]float64{10, 20}, 0.95, 19.5},        // h = 0.95: interpolated
		{[]float64{1, 2, 3, 4, 5}, 1, 5},       // q = 1 is the maximum
		{[]float64{1, 2, 3, 4, 5}, 0, 1},       // q = 0 is the minimum
		{[]float64{0, 0, 0, 0, 100}, 0.95, 80}, // h = 3.8: 0 + 0.8 × 100
	}
	for _, tt := range tests {
		if got := Percentile(tt.xs, tt.q); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("Percentile(%v, %v) = %v, want %v", tt.xs, tt.q, got, tt.want)
		}
	}
	if !math.IsNaN(Percentile(nil, 0.5)) {
		t.Error("Percentile of no values should be NaN")
	}
	xs := []float64{3, 1, 2}
	Percentile(xs, 0.5)
	if xs[0] != 3 {
		t.Error("Percentile sorted its input in place")
	}
}

func TestOptions(t *testing.T) {
	for _, o := range []Options{{WindowS: -1}, {BinS: math.NaN()}, {HitFraction: 1.5}, {BinS: math.Inf(1)}} {
		if o.Validate() == nil {
			t.Errorf("Validate(%+v) = nil, want an error", o)
		}
	}
	if err := (Options{}).Validate(); err != nil {
		t.Errorf("zero options (defaults) rejected: %v", err)
	}
	d := Options{}.WithDefaults()
	if d.WindowS != DefaultWindowS || d.BinS != DefaultBinS || d.HitFraction != DefaultHitFraction {
		t.Errorf("defaults = %+v", d)
	}
}
