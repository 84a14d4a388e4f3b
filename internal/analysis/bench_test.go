package analysis

import (
	"fmt"
	"io"
	"testing"

	"github.com/llm-ring/llm-ring/internal/record"
)

// benchRuns builds policies × seeds runs of conv conversations with turns
// turns each, spread over 3 replicas, every fourth follow-up a miss.
func benchRuns(policies, seeds, conv, turns int) []Run {
	var runs []Run
	for p := range policies {
		for s := range seeds {
			id := fmt.Sprintf("p%d-s%d", p, s)
			info := record.Run{RunID: id, Policy: fmt.Sprintf("p%d", p), Seed: int64(s), Replicas: 3, ScaleReadyMS: 300000, ScaleReplica: "r3"}
			var rows []record.Request
			for c := range conv {
				prev := 0
				for t := 1; t <= turns; t++ {
					cache := prev
					if t%4 == 0 {
						cache = 0
					}
					replica := fmt.Sprintf("r%d", (c+t/5)%4)
					rows = append(rows, record.Request{
						RunID: id, Policy: info.Policy, Seed: info.Seed, Conversation: fmt.Sprintf("c%d", c), Turn: t,
						Replica: replica, CacheN: cache, PromptN: 100*t - cache + 100, PredictedN: 50,
						LatencyMS: float64(1000 + 37*c + 11*t), TTFTMS: 100, Status: 200,
						StartMS: float64(c*1000 + t*60000), EndMS: float64(c*1000 + t*60000 + 1000),
					})
					prev = 100*t + 100
				}
			}
			runs = append(runs, Run{Info: info, Requests: rows})
		}
	}
	return runs
}

var sinkSummary Summary

// BenchmarkSummarize: 5 policies × 3 seeds × 100 conversations × 10 turns
// (15 000 requests), the size of a full study.
func BenchmarkSummarize(b *testing.B) {
	runs := benchRuns(5, 3, 100, 10)
	b.ReportAllocs()
	for b.Loop() {
		sinkSummary = Summarize(runs, Options{})
	}
}

// BenchmarkCharts renders both PNGs of the same study.
func BenchmarkCharts(b *testing.B) {
	s := Summarize(benchRuns(5, 3, 100, 10), Options{})
	b.ReportAllocs()
	for b.Loop() {
		if err := WriteSummaryChart(io.Discard, s); err != nil {
			b.Fatal(err)
		}
		if err := WriteHitRateChart(io.Discard, s); err != nil {
			b.Fatal(err)
		}
	}
}
