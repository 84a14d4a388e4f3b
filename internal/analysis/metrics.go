package analysis

import (
	"cmp"
	"fmt"
	"github.com/llm-ring/llm-ring/internal/stats"
	"math"
	"slices"

	"github.com/llm-ring/llm-ring/internal/record"
)

// Defaults of Options.
const (
	DefaultWindowS     = 60  // scale-up window, seconds
	DefaultBinS        = 30  // hit-rate-over-time bin width, seconds
	DefaultHitFraction = 0.9 // share of the previous prompt a hit must reuse
)

// Options tunes the analysis. A zero field takes its default.
type Options struct {
	// WindowS is the length, in seconds, of the window after the extra
	// replica became ready in which the scale-up hit rate is measured
	// (0: DefaultWindowS).
	WindowS float64
	// BinS is the bin width, in seconds of start time, of the hit rate over
	// time (0: DefaultBinS).
	BinS float64
	// HitFraction: a follow-up turn is a hit when its cache_n is at least
	// HitFraction × the previous turn's prompt (cache_n + prompt_n)
	// (0: DefaultHitFraction).
	HitFraction float64
}

// Validate reports an option that is negative, not finite, or (HitFraction)
// above 1.
func (o Options) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"window", o.WindowS}, {"bin", o.BinS}, {"hit fraction", o.HitFraction}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			return fmt.Errorf("%s must be a positive number, got %v", f.name, f.v)
		}
	}
	if o.HitFraction > 1 {
		return fmt.Errorf("hit fraction must be at most 1, got %v", o.HitFraction)
	}
	return nil
}

// WithDefaults returns o with every zero (or invalid) field set to its
// default.
func (o Options) WithDefaults() Options {
	fix := func(v, def float64) float64 {
		if !(v > 0) || math.IsInf(v, 0) {
			return def
		}
		return v
	}
	o.WindowS = fix(o.WindowS, DefaultWindowS)
	o.BinS = fix(o.BinS, DefaultBinS)
	o.HitFraction = fix(o.HitFraction, DefaultHitFraction)
	if o.HitFraction > 1 {
		o.HitFraction = DefaultHitFraction
	}
	return o
}

// Run is one recorded run: its description and its request rows.
type Run struct {
	Info     record.Run
	Requests []record.Request
}

// Metrics are one run's metrics. A rate or share that is undefined (no
// follow-up turns, no scale-up, ...) is NaN, shown as "n/a".
type Metrics struct {
	RunID  string
	Policy string
	Seed   int64
	Mode   string
	Order  int

	// Requests counts the run's rows; Errors the rows that are not
	// successful (status != 200 or a non-empty error).
	Requests, Errors int

	// FollowUps counts follow-up turns: successful requests with turn >= 2
	// whose previous turn (turn-1, same conversation) was successful.
	FollowUps int
	// Hits counts follow-up turns with cache_n >= HitFraction × (previous
	// turn's cache_n + prompt_n); Misses the other follow-up turns.
	Hits, Misses int
	// HitRate = Hits / FollowUps; MissRate = Misses / FollowUps.
	HitRate, MissRate float64
	// AvoidableMisses counts misses whose previous turn was served by a
	// different replica (the history was cached there);
	// AvoidableShare = AvoidableMisses / Misses.
	AvoidableMisses int
	AvoidableShare  float64
	// Redirects counts follow-up turns served by a replica other than the
	// one that served their previous turn.
	Redirects int

	// ScaleUp is true when the run's extra replica became ready
	// (scale_ready_ms > 0); ScaleReadyS is that time in seconds (NaN if not).
	ScaleUp     bool
	ScaleReadyS float64
	// ScaleFollowUps and ScaleHits count the follow-up turns (and their hits)
	// that started in [scale_ready, scale_ready + window);
	// ScaleHitRate = ScaleHits / ScaleFollowUps.
	ScaleFollowUps, ScaleHits int
	ScaleHitRate              float64
	// MovedEligible counts conversations with a successful turn starting
	// before scale_ready and another starting at or after it; Moved those
	// whose first such turn after was served by a different replica than
	// their last turn before. MovedShare = Moved / MovedEligible.
	MovedEligible, Moved int
	MovedShare           float64

	// LatencyP50S and LatencyP95S are percentiles (linear interpolation
	// between order statistics) of successful requests' latency, seconds;
	// TTFTP50S the median time to first token of successful requests that
	// report one (ttft_ms > 0).
	LatencyP50S, LatencyP95S, TTFTP50S float64

	// Work is the processed tokens (prompt_n + predicted_n of successful
	// requests) per replica named in the rows, sorted by name.
	Work []ReplicaWork
	// ReplicaCount is the number of replicas the imbalance averages over:
	// the replicas at start plus the scale-up replica if it became ready, or
	// the number of names in the rows if larger.
	ReplicaCount int
	// Imbalance = busiest replica's processed tokens / mean over
	// ReplicaCount replicas (an idle replica counts as 0).
	Imbalance float64
	// CachedShare = Σ cache_n / Σ (cache_n + prompt_n) over successful
	// requests: the share of prompt tokens the caches saved.
	CachedShare float64
}

// ReplicaWork is the work one replica did in a run.
type ReplicaWork struct {
	Replica string
	Tokens  int64 // Σ prompt_n + predicted_n of its successful requests
}

// Successful reports whether a request succeeded: status 200 and no error.
func Successful(r *record.Request) bool { return r.Status == 200 && r.Error == "" }

// followUp is one follow-up turn, classified.
type followUp struct {
	startMS  float64
	hit      bool
	redirect bool // served by another replica than its previous turn
}

type turnKey struct {
	conv string
	turn int
}

// followUps classifies the follow-up turns of rows, in row order.
func followUps(rows []record.Request, hitFraction float64) []followUp {
	byTurn := make(map[turnKey]int, len(rows))
	for i := range rows {
		byTurn[turnKey{rows[i].Conversation, rows[i].Turn}] = i
	}
	var out []followUp
	for i := range rows {
		r := &rows[i]
		if r.Turn < 2 || !Successful(r) {
			continue
		}
		j, ok := byTurn[turnKey{r.Conversation, r.Turn - 1}]
		if !ok || !Successful(&rows[j]) {
			continue
		}
		prev := &rows[j]
		out = append(out, followUp{
			startMS:  r.StartMS,
			hit:      float64(r.CacheN) >= hitFraction*float64(prev.CacheN+prev.PromptN),
			redirect: r.Replica != prev.Replica,
		})
	}
	return out
}

// ComputeMetrics computes one run's metrics. It is pure: the same run and
// options always give the same result.
func ComputeMetrics(run *Run, opts Options) Metrics {
	opts = opts.WithDefaults()
	info := &run.Info
	rows := run.Requests
	m := Metrics{
		RunID: info.RunID, Policy: info.Policy, Seed: info.Seed, Mode: info.Mode, Order: info.Order,
		Requests: len(rows),
	}
	work := m.answers(rows)
	fus := followUps(rows, opts.HitFraction)
	m.hits(fus)
	m.scaleUp(info, rows, fus, opts.WindowS)
	m.balance(info, work)
	return m
}

// answers sets the errors, the latency and TTFT percentiles and the cached
// share from the rows, and returns each replica's work (prompt and
// predicted tokens of its answered requests; a replica that only erred
// counts, with none).
func (m *Metrics) answers(rows []record.Request) map[string]int64 {
	var lat, ttft []float64
	var cached, prompt int64
	work := map[string]int64{}
	for i := range rows {
		r := &rows[i]
		if r.Replica != "" {
			work[r.Replica] += 0 // an erroring replica still counts as a replica
		}
		if !Successful(r) {
			m.Errors++
			continue
		}
		lat = append(lat, r.LatencyMS/1000)
		if r.TTFTMS > 0 {
			ttft = append(ttft, r.TTFTMS/1000)
		}
		cached += int64(r.CacheN)
		prompt += int64(r.CacheN + r.PromptN)
		work[r.Replica] += int64(r.PromptN + r.PredictedN)
	}
	m.LatencyP50S = Percentile(lat, 0.50)
	m.LatencyP95S = Percentile(lat, 0.95)
	m.TTFTP50S = Percentile(ttft, 0.50)
	m.CachedShare = math.NaN()
	if prompt > 0 {
		m.CachedShare = float64(cached) / float64(prompt)
	}
	return work
}

// hits sets the follow-up turns' hits, misses (avoidable: the turn was
// sent elsewhere than its conversation's previous turn) and redirects.
func (m *Metrics) hits(fus []followUp) {
	m.FollowUps = len(fus)
	for _, f := range fus {
		switch {
		case f.hit:
			m.Hits++
		case f.redirect:
			m.Misses++
			m.AvoidableMisses++
		default:
			m.Misses++
		}
		if f.redirect {
			m.Redirects++
		}
	}
	m.HitRate = ratio(m.Hits, m.FollowUps)
	m.MissRate = ratio(m.Misses, m.FollowUps)
	m.AvoidableShare = ratio(m.AvoidableMisses, m.Misses)
}

// scaleUp sets the scale-up metrics (NaN without one): the hit rate of the
// follow-ups started within windowS seconds after the extra replica was
// ready, and the share of conversations moved to it.
func (m *Metrics) scaleUp(info *record.Run, rows []record.Request, fus []followUp, windowS float64) {
	m.ScaleReadyS, m.ScaleHitRate, m.MovedShare = math.NaN(), math.NaN(), math.NaN()
	if info.ScaleReadyMS <= 0 {
		return
	}
	ready := info.ScaleReadyMS
	m.ScaleUp = true
	m.ScaleReadyS = ready / 1000
	end := ready + windowS*1000
	for _, f := range fus {
		if f.startMS >= ready && f.startMS < end {
			m.ScaleFollowUps++
			if f.hit {
				m.ScaleHits++
			}
		}
	}
	m.ScaleHitRate = ratio(m.ScaleHits, m.ScaleFollowUps)
	m.MovedEligible, m.Moved = moved(rows, ready)
	m.MovedShare = ratio(m.Moved, m.MovedEligible)
}

// balance sets each replica's work, sorted by name, the replica count (at
// least the run's, with its extra replica) and the imbalance: the busiest
// replica's work over the mean.
func (m *Metrics) balance(info *record.Run, work map[string]int64) {
	delete(work, "") // successful rows without a replica name (should not happen)
	expected := info.Replicas
	if info.ScaleReadyMS > 0 {
		expected++
		if info.ScaleReplica != "" {
			work[info.ScaleReplica] += 0
		}
	}
	var total, busiest int64
	for name, t := range work {
		m.Work = append(m.Work, ReplicaWork{name, t})
		total += t
		busiest = max(busiest, t)
	}
	slices.SortFunc(m.Work, func(a, b ReplicaWork) int { return cmp.Compare(a.Replica, b.Replica) })
	m.ReplicaCount = max(len(m.Work), expected)
	m.Imbalance = math.NaN()
	if total > 0 {
		m.Imbalance = float64(busiest) / (float64(total) / float64(m.ReplicaCount))
	}
}

// moved counts, among conversations with a successful turn starting before
// readyMS and another starting at or after it, those whose first turn after
// was served by a different replica than their last turn before.
func moved(rows []record.Request, readyMS float64) (eligible, movedN int) {
	type edge struct {
		before, after int // row index of last turn before, first turn after; -1 if none
	}
	convs := map[string]*edge{}
	var order []string // first-seen order, for determinism
	for i := range rows {
		r := &rows[i]
		if !Successful(r) {
			continue
		}
		e := convs[r.Conversation]
		if e == nil {
			e = &edge{-1, -1}
			convs[r.Conversation] = e
			order = append(order, r.Conversation)
		}
		if r.StartMS < readyMS {
			if e.before < 0 || rows[e.before].StartMS < r.StartMS {
				e.before = i
			}
		} else if e.after < 0 || r.StartMS < rows[e.after].StartMS {
			e.after = i
		}
	}
	for _, c := range order {
		e := convs[c]
		if e.before < 0 || e.after < 0 {
			continue
		}
		eligible++
		if rows[e.before].Replica != rows[e.after].Replica {
			movedN++
		}
	}
	return eligible, movedN
}

func ratio(n, d int) float64 {
	if d == 0 {
		return math.NaN()
	}
	return float64(n) / float64(d)
}

// Percentile is stats.Percentile (type-7 interpolation, NaN for no
// values), which the simulator's own tables use too.
func Percentile(xs []float64, q float64) float64 { return stats.Percentile(xs, q) }
