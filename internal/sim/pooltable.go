package sim

import (
	"cmp"
	"fmt"
	"github.com/llm-ring/llm-ring/internal/stats"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/llm-ring/llm-ring/internal/record"
	"github.com/llm-ring/llm-ring/internal/traffic"
)

// PoolTag is what a pools run's row says of its request, appended to its
// conversation column (the CSV's columns stay those of every run, as
// admission's tag does): the model it was served by (the pool's), the LoRA
// adapter it asked for, whether routing it made its replica load the
// adapter (needsLoad), and the adapter tier of its pick
// (state.Ticket.AdapterTier: 1 resident, 2 free slot, 3 waiting, 4 must
// evict; 0 no adapter, or affinity off).
type PoolTag struct {
	Model, Adapter string
	Load           bool
	Tier           int
}

// poolTagMark starts the tag; conversation ids never contain it, and
// model and adapter names cannot hold '#' (traffic's workloads check).
const poolTagMark = "#model="

// Append returns conv with the tag appended.
func (t PoolTag) Append(conv string) string {
	load := "0"
	if t.Load {
		load = "1"
	}
	return conv + poolTagMark + t.Model + "#adapter=" + t.Adapter + "#adapter_load=" + load + "#adapter_tier=" + strconv.Itoa(t.Tier)
}

// ParsePoolTag splits a conversation column into the conversation and its
// pool tag; ok is false without one (a run without pools). A tag that
// follows it (admission's) is left out of both.
func ParsePoolTag(conv string) (base string, t PoolTag, ok bool) {
	base, rest, found := strings.Cut(conv, poolTagMark)
	if !found {
		return conv, PoolTag{}, false
	}
	m, rest, f1 := strings.Cut(rest, "#adapter=")
	a, rest, f2 := strings.Cut(rest, "#adapter_load=")
	l, rest, f3 := strings.Cut(rest, "#adapter_tier=")
	tr, _, _ := strings.Cut(rest, "#")
	tier, err := strconv.Atoi(tr)
	if !f1 || !f2 || !f3 || (l != "0" && l != "1") || err != nil {
		return conv, PoolTag{}, false
	}
	return base, PoolTag{Model: m, Adapter: a, Load: l == "1", Tier: tier}, true
}

// PoolStat is one run's measurements of one model (Model "*": all).
type PoolStat struct {
	RunID, Policy string
	Seed          int64
	Model         string
	// Requests and Errors count the rows outside the warm-up; Loads the
	// adapter loads they caused (their flags: see needsLoad). ModelLoads
	// is the replica model's own count over the whole run, warm-up
	// included (Stats.AdapterLoads; NaN if the metrics lack it).
	Requests, Errors, Loads int
	ModelLoads              float64
	// LoadsPer1k is Loads per 1,000 requests; TTFTP90 the 90th percentile
	// of the answered requests' TTFT, ms (type 7, as analysis.Percentile);
	// HitRate the cached share of their prompt tokens (cache_n / (cache_n
	// + prompt_n)).
	LoadsPer1k, TTFTP90, HitRate float64
}

// PoolStats measures one run's rows per model, then all together ("*"),
// leaving out an open-loop warm-up (traffic.ParseStage). Rows without a
// pool tag count under model "". metrics are the run's (record.Run).
func PoolStats(rows []record.Request, metrics map[string]float64) []PoolStat {
	type acc struct {
		st            PoolStat
		ttft          []float64
		cached, total int64
	}
	by := map[string]*acc{}
	get := func(r *record.Request, m string) *acc {
		a := by[m]
		if a == nil {
			a = &acc{st: PoolStat{RunID: r.RunID, Policy: r.Policy, Seed: r.Seed, Model: m}}
			by[m] = a
		}
		return a
	}
	for i := range rows {
		r := &rows[i]
		base, tag, _ := ParsePoolTag(r.Conversation)
		if _, _, warm, _ := traffic.ParseStage(base); warm {
			continue
		}
		for _, a := range [2]*acc{get(r, tag.Model), get(r, "*")} {
			a.st.Requests++
			if tag.Load {
				a.st.Loads++
			}
			if r.Status != 200 {
				a.st.Errors++
				continue
			}
			a.ttft = append(a.ttft, r.TTFTMS)
			a.cached += int64(r.CacheN)
			a.total += int64(r.CacheN + r.PromptN)
		}
	}
	var out []PoolStat
	for _, a := range by {
		a.st.ModelLoads = modelLoads(metrics, a.st.Model)
		a.st.LoadsPer1k = 1000 * float64(a.st.Loads) / float64(a.st.Requests)
		a.st.TTFTP90 = stats.Percentile(a.ttft, 0.9)
		a.st.HitRate = math.NaN()
		if a.total > 0 {
			a.st.HitRate = float64(a.cached) / float64(a.total)
		}
		out = append(out, a.st)
	}
	last := func(m string) int { // "*" after the models
		if m == "*" {
			return 1
		}
		return 0
	}
	slices.SortFunc(out, func(x, y PoolStat) int {
		return cmp.Or(cmp.Compare(last(x.Model), last(y.Model)), cmp.Compare(x.Model, y.Model))
	})
	return out
}

// modelLoads is the run's adapter loads of model m ("*": every model) as
// its metrics record them (poolMetrics), NaN if they do not.
func modelLoads(metrics map[string]float64, m string) float64 {
	if m != "*" {
		if v, ok := metrics[`sim_adapter_loads_total{model="`+m+`"}`]; ok {
			return v
		}
		return math.NaN()
	}
	sum, found := 0.0, false
	for k, v := range metrics {
		if strings.HasPrefix(k, "sim_adapter_loads_total{") {
			sum, found = sum+v, true
		}
	}
	if !found {
		return math.NaN()
	}
	return sum
}

// PoolsHeader is the header of the per-run table (WritePoolStats).
var PoolsHeader = []string{"run_id", "policy", "seed", "model", "requests", "errors", "adapter_loads",
	"adapter_loads_per_1k", "ttft_p90_ms", "hit_rate", "model_adapter_loads"}

// WritePoolStats writes stats as tab-separated rows under PoolsHeader
// (tab-separated: a results folder's *.csv files are runs).
func WritePoolStats(w io.Writer, stats []PoolStat) error {
	if _, err := fmt.Fprintln(w, strings.Join(PoolsHeader, "\t")); err != nil {
		return err
	}
	for _, s := range stats {
		if _, err := fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", s.RunID, s.Policy, s.Seed, s.Model,
			s.Requests, s.Errors, s.Loads, num(s.LoadsPer1k, 2), num(s.TTFTP90, 1), num(s.HitRate, 4), num(s.ModelLoads, 0)); err != nil {
			return err
		}
	}
	return nil
}

func num(x float64, prec int) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	return strconv.FormatFloat(x, 'f', prec, 64)
}

// WritePoolsSummary writes a Markdown table of stats: per policy and
// model, the mean over the seeds of each measurement, with its range.
func WritePoolsSummary(w io.Writer, title string, stats []PoolStat) error {
	type key struct{ policy, model string }
	var keys []key
	by := map[key][]PoolStat{}
	for _, s := range stats {
		k := key{s.Policy, s.Model}
		if by[k] == nil {
			keys = append(keys, k)
		}
		by[k] = append(by[k], s)
	}
	fmt.Fprintf(w, "# %s\n\n| policy | model | seeds | requests | adapter loads / 1k | TTFT p90 (ms) | hit rate |\n|---|---|---|---|---|---|---|\n", title)
	for _, k := range keys {
		ss := by[k]
		var req int
		for _, s := range ss {
			req += s.Requests
		}
		if _, err := fmt.Fprintf(w, "| %s | %s | %d | %d | %s | %s | %s |\n", k.policy, k.model, len(ss), req,
			meanRange(ss, func(s PoolStat) float64 { return s.LoadsPer1k }, 1, 1),
			meanRange(ss, func(s PoolStat) float64 { return s.TTFTP90 }, 1, 0),
			meanRange(ss, func(s PoolStat) float64 { return s.HitRate }, 100, 1)+" %"); err != nil {
			return err
		}
	}
	return nil
}

// meanRange is "mean [min–max]" of f over ss, scaled, NaNs left out.
func meanRange(ss []PoolStat, f func(PoolStat) float64, scale float64, prec int) string {
	var sum float64
	n := 0
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		x := f(s) * scale
		if math.IsNaN(x) {
			continue
		}
		sum += x
		n++
		lo, hi = min(lo, x), max(hi, x)
	}
	if n == 0 {
		return "n/a"
	}
	if n == 1 {
		return num(sum, prec)
	}
	return fmt.Sprintf("%s [%s–%s]", num(sum/float64(n), prec), num(lo, prec), num(hi, prec))
}
