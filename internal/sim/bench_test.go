package sim

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/record"
	"github.com/llm-ring/llm-ring/internal/traffic"
)

// discard counts rows and drops them.
type discard struct{ n int }

func (d *discard) Write(*record.Request) error { d.n++; return nil }

// BenchmarkRun simulates whole runs and reports events per second of wall
// time (the loop's events: sends, replica wake-ups, scale-up steps) and
// requests per second.
//
//   - standard: the standard profile on 3 replicas (llm-aware), one run per
//     iteration, as each of the 50 runs of a 5-policy × 10-seed study;
//   - scale: a slice of the 1,000-replica scale test: 100 replicas,
//     1,600 users, 10,000 conversations of 8–14 turns.
func BenchmarkRun(b *testing.B) {
	std, err := traffic.LoadProfile(os.DirFS("."), "standard")
	if err != nil {
		b.Fatal(err)
	}
	scale, err := traffic.LoadProfile(os.DirFS("."), "testdata/scale.json")
	if err != nil {
		b.Fatal(err)
	}
	scale.Conversations, scale.Concurrency = 10_000, 1_600
	for _, c := range []struct {
		name     string
		prof     traffic.Profile
		replicas int
		shared   bool
	}{
		{"standard/replicas=3", std, 3, false},
		{"standard/replicas=3/shared-cpu", std, 3, true},
		{"scale/replicas=100", scale, 100, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			spec := Spec{RunID: "bench", Policy: "llm-aware", Seed: 1, Profile: c.prof, Replicas: c.replicas,
				Model: model.DefaultConfig(), SharedCPU: c.shared, Router: DefaultRouter()}
			var events, requests int64
			b.ReportAllocs()
			for b.Loop() {
				var d discard
				res, err := Run(context.Background(), spec, &d)
				if err != nil {
					b.Fatal(err)
				}
				events += res.Events
				requests += int64(d.n)
			}
			s := b.Elapsed().Seconds()
			b.ReportMetric(float64(events)/s, "events/s")
			b.ReportMetric(float64(requests)/s, "requests/s")
			b.ReportMetric(float64(events)/float64(b.N), "events/run")
		})
	}
}

var sinkHeap event

// BenchmarkQueue measures the event queue alone: push then pop with
// 10,000 events pending.
func BenchmarkQueue(b *testing.B) {
	var q queue
	for i := range 10_000 {
		q.push(durationOf(i*7919%10_007), evSend, int32(i), 0)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		e := q.pop()
		sinkHeap = e
		q.push(e.at+durationOf(i%977), evSend, e.who, 0)
		i++
	}
}

func durationOf(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }

func ExampleReplicaName() {
	fmt.Println(ReplicaName(0), ReplicaName(12))
	// Output: llm-0 llm-12
}
