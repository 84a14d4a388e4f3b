package analysis

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"

	"github.com/llm-ring/llm-ring/internal/record"
	"github.com/llm-ring/llm-ring/internal/traffic"
)

// SLO is a goodput target: a request is "good" when it succeeded, its
// TTFT is at most TTFTMS and its TPOT at most TPOTMS.
type SLO struct {
	TTFTMS, TPOTMS float64
}

// Field are the metrics the field compares routers by (inference-perf, the
// llm-d benchmark, vLLM's bench serve), over one run or one stage of it.
// In the simulator a request's inter-token latencies are not recorded one
// by one: ITL is its mean gap, i.e. its TPOT. Undefined values are NaN.
type Field struct {
	Requests                  int
	TTFTP50, TTFTP90, TTFTP99 float64 // ms
	TPOTP50, TPOTP90          float64 // ms: (latency − TTFT) / (tokens − 1)
	E2EP50, E2EP95            float64 // ms
	OutputTokS                float64 // generated tokens per second of the window
	Success                   float64 // share of requests answered with 200
	CachedShare               float64 // cached prompt tokens / prompt tokens
	GoodShare                 float64 // share of requests meeting the SLO
	GoodTokS                  float64 // their generated tokens per second
	IdealCachedShare          float64 // the traffic's (one infinite cache); NaN if unknown
	ShedShare                 float64 // share of requests shed by admission (status 429)
	QueueWaitP90              float64 // ms, admitted requests' wait in the router (NaN: no admission)
}

// FieldOf computes the field metrics of rows over a window of windowMS.
func FieldOf(rows []record.Request, windowMS float64, slo SLO) Field {
	f := Field{Requests: len(rows), IdealCachedShare: math.NaN()}
	var ttft, tpot, e2e []float64
	var out, good, goodTok, ok, cached, prompt int
	for i := range rows {
		r := &rows[i]
		cached += r.CacheN
		prompt += r.CacheN + r.PromptN
		if !Successful(r) {
			continue
		}
		ok++
		out += r.PredictedN
		ttft = append(ttft, r.TTFTMS)
		e2e = append(e2e, r.LatencyMS)
		t := math.NaN()
		if r.PredictedN > 1 {
			t = (r.LatencyMS - r.TTFTMS) / float64(r.PredictedN-1)
			tpot = append(tpot, t)
		}
		if r.TTFTMS <= slo.TTFTMS && (math.IsNaN(t) || t <= slo.TPOTMS) {
			good++
			goodTok += r.PredictedN
		}
	}
	f.TTFTP50, f.TTFTP90, f.TTFTP99 = Percentile(ttft, 0.5), Percentile(ttft, 0.9), Percentile(ttft, 0.99)
	f.TPOTP50, f.TPOTP90 = Percentile(tpot, 0.5), Percentile(tpot, 0.9)
	f.E2EP50, f.E2EP95 = Percentile(e2e, 0.5), Percentile(e2e, 0.95)
	sec := windowMS / 1000
	f.OutputTokS, f.GoodTokS = float64(out)/sec, float64(goodTok)/sec
	f.Success, f.GoodShare, f.CachedShare = ratio(ok, len(rows)), ratio(good, len(rows)), ratio(cached, prompt)
	f.ShedShare, f.QueueWaitP90 = shedAndWait(rows)
	return f
}

// StageField is the field metrics of one stage of one run.
type StageField struct {
	RunID, Policy string
	Seed          int64
	Stage         int
	Rate          float64
	Field
}

// StageFields splits each run's rows by the stage their conversation names
// (traffic.StageConversation), warm-up left out, each stage's window from
// its first request's start to its last request's end. Runs without stages
// give nothing.
func StageFields(runs []Run, slo SLO) []StageField {
	var out []StageField
	for _, run := range runs {
		by := map[int][]record.Request{}
		rate := map[int]float64{}
		for _, r := range run.Requests {
			k, rt, warm, ok := traffic.ParseStage(r.Conversation)
			if !ok || warm {
				continue
			}
			by[k] = append(by[k], r)
			rate[k] = rt
		}
		for k, rows := range by {
			lo, hi := math.Inf(1), math.Inf(-1)
			for i := range rows {
				lo, hi = min(lo, rows[i].StartMS), max(hi, rows[i].EndMS)
			}
			f := FieldOf(rows, max(hi-lo, 1), slo)
			f.IdealCachedShare = math.NaN()
			if v, ok := run.Info.Metrics[fmt.Sprintf(`sim_ideal_cached_share{stage="%d"}`, k)]; ok {
				f.IdealCachedShare = v
			}
			out = append(out, StageField{RunID: run.Info.RunID, Policy: run.Info.Policy, Seed: run.Info.Seed, Stage: k, Rate: rate[k], Field: f})
		}
	}
	slices.SortFunc(out, func(a, b StageField) int {
		return cmp.Or(cmp.Compare(a.Policy, b.Policy), cmp.Compare(a.Stage, b.Stage), cmp.Compare(a.Seed, b.Seed))
	})
	return out
}

func idealOf(run *Run) float64 {
	if v, ok := run.Info.Metrics["sim_ideal_cached_share"]; ok {
		return v
	}
	return math.NaN()
}

// RunFields is the field metrics of every run over its whole length,
// warm-up left out.
func RunFields(runs []Run, slo SLO) []StageField {
	var out []StageField
	for _, run := range runs {
		var rows []record.Request
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, r := range run.Requests {
			if _, _, warm, _ := traffic.ParseStage(r.Conversation); warm {
				continue
			}
			rows = append(rows, r)
			lo, hi = min(lo, r.StartMS), max(hi, r.EndMS)
		}
		f := FieldOf(rows, max(hi-lo, 1), slo)
		f.IdealCachedShare = idealOf(&run)
		out = append(out, StageField{RunID: run.Info.RunID, Policy: run.Info.Policy, Seed: run.Info.Seed, Stage: -1, Field: f})
	}
	return out
}

// FieldHeader is the header of per_stage.csv and field_per_run.csv.
var FieldHeader = []string{"run_id", "policy", "seed", "stage", "rate", "requests",
	"ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p90_ms", "e2e_p50_ms", "e2e_p95_ms",
	"output_tok_s", "success", "cached_share", "ideal_cached_share", "goodput_share", "goodput_tok_s",
	"shed_share", "queue_wait_p90_ms"}

// WriteFieldCSV writes rows as CSV with FieldHeader.
func WriteFieldCSV(w io.Writer, rows []StageField) error {
	g := func(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }
	if _, err := fmt.Fprintln(w, joinCSV(FieldHeader)); err != nil {
		return err
	}
	for _, r := range rows {
		f := r.Field
		rec := []string{r.RunID, r.Policy, strconv.FormatInt(r.Seed, 10), strconv.Itoa(r.Stage), g(r.Rate), strconv.Itoa(f.Requests),
			g(f.TTFTP50), g(f.TTFTP90), g(f.TTFTP99), g(f.TPOTP50), g(f.TPOTP90), g(f.E2EP50), g(f.E2EP95),
			g(f.OutputTokS), g(f.Success), g(f.CachedShare), g(f.IdealCachedShare), g(f.GoodShare), g(f.GoodTokS),
			g(f.ShedShare), g(f.QueueWaitP90)}
		if _, err := fmt.Fprintln(w, joinCSV(rec)); err != nil {
			return err
		}
	}
	return nil
}

func joinCSV(fields []string) string {
	s := ""
	for i, f := range fields {
		if i > 0 {
			s += ","
		}
		s += f
	}
	return s
}
