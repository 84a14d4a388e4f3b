package analysis

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/llm-ring/llm-ring/internal/admission"
	"github.com/llm-ring/llm-ring/internal/record"
	"github.com/llm-ring/llm-ring/internal/traffic"
)

// AdmissionCSV is the per-band and per-flow table of runs with admission
// (written by WriteField when their rows carry admission tags).
const AdmissionCSV = "admission.csv"

// StatusShed is the status of a request shed by admission (by default:
// admission.IsShed tells a shed row by its status, 429 or 503, and text).
const StatusShed = 429

// shedAndWait returns the share of rows shed by admission and the p90 of
// the queue wait of the admitted ones (NaN without admission tags).
func shedAndWait(rows []record.Request) (shed, waitP90 float64) {
	var n int
	var waits []float64
	for i := range rows {
		if admission.IsShed(rows[i].Status, rows[i].Error) {
			n++
			continue
		}
		if _, t, ok := admission.ParseRowTag(rows[i].Conversation); ok {
			waits = append(waits, t.WaitMS)
		}
	}
	return ratio(n, len(rows)), Percentile(waits, 0.9)
}

// AdmissionRow is one class (a band, or a flow) of one stage of one run.
type AdmissionRow struct {
	RunID, Policy string
	Seed          int64
	Stage         int
	Rate          float64
	Kind, Class   string // "band", "flow" or "band-flow"; its priority, name, or "priority/name"
	Requests      int
	Shed          float64 // share shed
	Good          int     // requests meeting the SLO
	TTFTP90       float64 // admitted (answered) requests, ms
	// FairShare is the class's max-min fair share of the stage's good
	// requests given each class's demand; FairRatio is Good / FairShare
	// (flows and band-flows; NaN for bands).
	FairShare, FairRatio float64
}

// AdmissionRows splits each stage of each run by band and by flow.
func AdmissionRows(runs []Run, slo SLO) []AdmissionRow {
	var out []AdmissionRow
	for _, run := range runs {
		type key struct {
			stage int
			kind  string
			class string
		}
		by := map[key][]record.Request{}
		rate := map[int]float64{}
		for _, r := range run.Requests {
			k, rt, warm, ok := traffic.ParseStage(r.Conversation)
			_, tag, tagged := admission.ParseRowTag(r.Conversation)
			if !ok || warm || !tagged {
				continue
			}
			rate[k] = rt
			by[key{k, "band", strconv.Itoa(tag.Priority)}] = append(by[key{k, "band", strconv.Itoa(tag.Priority)}], r)
			by[key{k, "flow", tag.Flow}] = append(by[key{k, "flow", tag.Flow}], r)
			bf := strconv.Itoa(tag.Priority) + "/" + tag.Flow
			by[key{k, "band-flow", bf}] = append(by[key{k, "band-flow", bf}], r)
		}
		var rows []AdmissionRow
		for k, rs := range by {
			f := FieldOf(rs, 1, slo)
			shed, _ := shedAndWait(rs)
			rows = append(rows, AdmissionRow{RunID: run.Info.RunID, Policy: run.Info.Policy, Seed: run.Info.Seed,
				Stage: k.stage, Rate: rate[k.stage], Kind: k.kind, Class: k.class, Requests: len(rs), Shed: shed,
				Good: int(math.Round(f.GoodShare * float64(len(rs)))), TTFTP90: f.TTFTP90, FairShare: math.NaN(), FairRatio: math.NaN()})
		}
		fairShares(rows)
		out = append(out, rows...)
	}
	slices.SortFunc(out, func(a, b AdmissionRow) int {
		return cmp.Or(cmp.Compare(a.Policy, b.Policy), cmp.Compare(a.Stage, b.Stage), cmp.Compare(a.Seed, b.Seed),
			cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Class, b.Class))
	})
	return out
}

// fairShares fills the flows' max-min fair shares of each stage's good
// requests (one run's rows): the good requests are water-filled over the
// flows by demand (requests sent): over all flows ("flow" rows), and within
// each band ("band-flow" rows, class "P/flow": the queue is fair within a
// band, and a higher band goes first).
func fairShares(rows []AdmissionRow) {
	type group struct {
		stage int
		band  string
	}
	groups := map[group][]int{}
	for i := range rows {
		switch rows[i].Kind {
		case "flow":
			groups[group{rows[i].Stage, "*"}] = append(groups[group{rows[i].Stage, "*"}], i)
		case "band-flow":
			b, _, _ := strings.Cut(rows[i].Class, "/")
			groups[group{rows[i].Stage, b}] = append(groups[group{rows[i].Stage, b}], i)
		}
	}
	for _, idx := range groups {
		total := 0.0
		for _, i := range idx {
			total += float64(rows[i].Good)
		}
		fair := MaxMinFair(total, func(yield func(float64)) {
			for _, i := range idx {
				yield(float64(rows[i].Requests))
			}
		})
		for k, i := range idx {
			rows[i].FairShare = fair[k]
			rows[i].FairRatio = float64(rows[i].Good) / fair[k]
		}
	}
}

// MaxMinFair water-fills total over the demands (in the order given):
// no one gets more than its demand, and the rest is split evenly.
func MaxMinFair(total float64, demands func(yield func(float64))) []float64 {
	var d []float64
	demands(func(x float64) { d = append(d, x) })
	out := make([]float64, len(d))
	order := make([]int, len(d))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(d[a], d[b]) })
	left := total
	for k, i := range order {
		share := left / float64(len(d)-k)
		out[i] = min(d[i], share)
		left -= out[i]
	}
	return out
}

// AdmissionHeader is the header of admission.csv.
var AdmissionHeader = []string{"run_id", "policy", "seed", "stage", "rate", "kind", "class", "requests",
	"shed_share", "good", "ttft_p90_ms", "fair_share", "fair_ratio"}

// WriteAdmissionCSV writes rows with AdmissionHeader.
func WriteAdmissionCSV(w io.Writer, rows []AdmissionRow) error {
	g := func(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }
	if _, err := fmt.Fprintln(w, joinCSV(AdmissionHeader)); err != nil {
		return err
	}
	for _, r := range rows {
		rec := []string{r.RunID, r.Policy, strconv.FormatInt(r.Seed, 10), strconv.Itoa(r.Stage), g(r.Rate), r.Kind, r.Class,
			strconv.Itoa(r.Requests), g(r.Shed), strconv.Itoa(r.Good), g(r.TTFTP90), g(r.FairShare), g(r.FairRatio)}
		if _, err := fmt.Fprintln(w, joinCSV(rec)); err != nil {
			return err
		}
	}
	return nil
}
