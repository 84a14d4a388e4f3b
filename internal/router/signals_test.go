package router

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/discovery"
	"github.com/llm-ring/llm-ring/internal/replicaset"
)

// TestReplicaSignals (issue 9): the router scrapes each replica's /metrics
// on signals.interval and the routing state's rows carry what it said; a
// replica whose /metrics fails keeps serving and its signals become unknown.
func TestReplicaSignals(t *testing.T) {
	var broken atomic.Bool
	metrics := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if broken.Load() {
			http.Error(w, "no", http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 3\n"+
			"# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 2\n"+
			"# TYPE llamacpp:kv_cache_usage_ratio gauge\nllamacpp:kv_cache_usage_ratio 0.5\n")
	}))
	t.Cleanup(metrics.Close)
	rs := []replicaset.Replica{{Name: "llm-0", URL: metrics.URL}}
	rt, err := New(Options{Config: testConfig(t, "consistent", rs, func(c *config.Router) {
		c.Signals.Interval = config.Duration(10 * time.Millisecond)
	})})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- rt.Serve(ctx, ln, discovery.Static(rs)) }()
	t.Cleanup(func() { cancel(); <-served })

	wait := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s: %+v", what, rt.Table().Status().Replicas)
			}
		}
	}
	reported := func() (running, waiting, kv float64, queue, hasKV bool) {
		st := rt.Table().Status()
		if len(st.Replicas) == 0 {
			return
		}
		r := st.Replicas[0].Reported
		return r.Running, r.Waiting, r.KVUse, r.HasQueue, r.HasKV
	}
	wait("the replica's signals", func() bool {
		run, wt, kv, q, k := reported()
		return q && k && run == 3 && wt == 2 && kv == 0.5
	})
	// Operators read them in /replicas.
	rec := httptest.NewRecorder()
	rt.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/replicas", nil))
	var info ReplicasInfo
	if err := json.Unmarshal(rec.Body.Bytes(), &info); err != nil || len(info.Replicas) != 1 {
		t.Fatalf("/replicas: %v %s", err, rec.Body.String())
	}
	if r := info.Replicas[0].Reported; r == nil || r.Running == nil || *r.Running != 3 || r.KVUse == nil || *r.KVUse != 0.5 {
		t.Errorf("/replicas reported = %+v, want running 3 and kv_use 0.5", r)
	}
	broken.Store(true)
	wait("unknown signals after failed scrapes", func() bool {
		_, _, _, q, k := reported()
		return !q && !k
	})
}
