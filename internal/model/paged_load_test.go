package model

import (
	"testing"
	"time"
)

// TestPagedLoadIsTheEngines: the cheap Load the simulated scraper reads
// is the paged engine's own running and waiting requests and block use
// (it read the unused llama.cpp slots before: zeros).
func TestPagedLoadIsTheEngines(t *testing.T) {
	r := newPagedReplica(t, pagedCfg())
	for i := 0; i < 6; i++ {
		if _, err := r.Submit(0, Request{Tokens: toksFrom(100*(i+1), 30), NPredict: 20}); err != nil {
			t.Fatal(err)
		}
	}
	r.Advance(5*time.Millisecond, nil)
	l, st := r.Server().Load(), r.Server().Stats()
	if l.Processing != st.Processing || l.Deferred != st.Deferred || l.KVUsage != st.KVUsage {
		t.Fatalf("Load %+v, Stats running %d waiting %d usage %v", l, st.Processing, st.Deferred, st.KVUsage)
	}
	if l.Processing+l.Deferred != 6 || l.KVUsage == 0 {
		t.Fatalf("Load %+v: want 6 requests in the engine and blocks in use", l)
	}
}
