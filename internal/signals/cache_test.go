package signals

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestParseCacheConfig: vLLM's vllm:cache_config_info gives the KV pool
// (num_gpu_blocks × block_size) and the block size, the smaller engine's
// under data parallelism; the other labels are ignored.
func TestParseCacheConfig(t *testing.T) {
	got, err := parseFile(t, "vllm_cache.prom", mustPreset(t, "vllm"))
	if err != nil {
		t.Fatal(err)
	}
	want := Sample{Running: 3, Waiting: 0, KVUse: 0.25, HasRunning: true, HasWaiting: true, HasKV: true,
		CacheTokens: 27000 * 16, BlockSize: 16}
	if got != want {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	// The other presets do not read it.
	if got, err := parseFile(t, "vllm_cache.prom", mustPreset(t, "sglang")); err != nil || got.CacheTokens != 0 || got.BlockSize != 0 {
		t.Errorf("sglang preset on vLLM: %+v, %v", got, err)
	}
}

func TestParseCacheConfigSeries(t *testing.T) {
	m := Mapping{Running: []string{"r"}, CacheConfig: []string{"info"}, CacheTokens: []string{"tok"}}
	tests := []struct {
		name, text string
		tokens     float64
		block      int
		err        string
	}{
		{"one engine", `info{block_size="32",num_gpu_blocks="100"} 1`, 3200, 32, ""},
		{"untyped", "# TYPE info untyped\n" + `info{block_size="16",num_gpu_blocks="10"} 1`, 160, 16, ""},
		{"not profiled yet", `info{block_size="16",num_gpu_blocks="None"} 1`, 0, 0, ""},
		{"no block size", `info{num_gpu_blocks="100"} 1`, 0, 0, ""},
		{"negative", `info{block_size="-16",num_gpu_blocks="100"} 1`, 0, 0, ""},
		{"absurd", `info{block_size="1048576",num_gpu_blocks="1099511627776"} 1`, 0, 0, ""},
		{"smallest engine", `info{engine="0",block_size="16",num_gpu_blocks="100"} 1` + "\n" +
			`info{engine="1",block_size="16",num_gpu_blocks="None"} 1` + "\n" +
			`info{engine="2",block_size="16",num_gpu_blocks="90"} 1`, 1440, 16, ""},
		// SGLang's gauge when no info family gives the pool; the info wins.
		{"token gauge", "# TYPE tok gauge\n" + `tok{dp_rank="0"} 161721` + "\n" + `tok{dp_rank="1"} 150000.5`, 150000, 0, ""},
		{"info wins", "# TYPE tok gauge\ntok 5\n" + `info{block_size="16",num_gpu_blocks="2"} 1`, 32, 16, ""},
		{"token gauge NaN", "# TYPE tok gauge\ntok NaN", 0, 0, ""},
		{"histogram", "# TYPE info histogram\ninfo_bucket{le=\"+Inf\"} 1\ninfo_sum 1\ninfo_count 1", 0, 0, "want an info gauge"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse(strings.NewReader("# TYPE r gauge\nr 1\n"+tt.text+"\n"), m)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.CacheTokens != tt.tokens || s.BlockSize != tt.block {
				t.Errorf("got %v tokens, block %d; want %v, %d", s.CacheTokens, s.BlockSize, tt.tokens, tt.block)
			}
		})
	}
}

func TestMappingCacheKeys(t *testing.T) {
	m := mustPreset(t, "vllm").With(Mapping{CacheConfig: []string{"x:info"}, CacheTokens: []string{"x:tokens"}})
	if m.CacheConfig[0] != "x:info" || m.CacheTokens[0] != "x:tokens" {
		t.Errorf("With: %+v", m)
	}
	bad := Mapping{Running: []string{"r"}, CacheConfig: []string{""}, CacheTokens: []string{""}}
	err := bad.Validate("signals.mapping")
	if err == nil || !strings.Contains(err.Error(), "signals.mapping.cache_config[0]") ||
		!strings.Contains(err.Error(), "signals.mapping.cache_tokens[0]") {
		t.Errorf("Validate: %v", err)
	}
}

// TestScrapeProps: the llama.cpp preset asks GET /props once for
// total_slots and reports it with every later sample; an engine whose
// /props fails is not asked again.
func TestScrapeProps(t *testing.T) {
	for _, tt := range []struct {
		name, props string
		status      int
		want        int
	}{
		{"slots", `{"total_slots": 8, "model_alias": "m"}`, http.StatusOK, 8},
		{"no slots", `{"model_alias": "m"}`, http.StatusOK, 0},
		{"not found", `{"error": "no"}`, http.StatusNotFound, 0},
		{"absurd", `{"total_slots": 1e9}`, http.StatusOK, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var asked atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/props" {
					asked.Add(1)
					w.WriteHeader(tt.status)
					io.WriteString(w, tt.props)
					return
				}
				io.WriteString(w, "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 1\n")
			}))
			defer srv.Close()
			sink := &propsSink{}
			s, err := New(Config{Interval: 5 * time.Millisecond, Timeout: time.Second, Mapping: mustPreset(t, "llamacpp")}, sink, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			s.SetTargets([]Target{{Name: "llm-0", URL: srv.URL}})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			for deadline := time.Now().Add(10 * time.Second); sink.count() < 4; time.Sleep(2 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("timed out waiting for scrapes")
				}
			}
			cancel()
			<-done
			if got := sink.last(); got.Slots != tt.want || !got.HasRunning {
				t.Errorf("last sample %+v, want slots %d", got, tt.want)
			}
			if n := asked.Load(); n != 1 {
				t.Errorf("/props asked %d times, want once", n)
			}
		})
	}
}

type propsSink struct {
	mu sync.Mutex
	n  int
	s  Sample
}

func (p *propsSink) Report(_ string, s Sample, ok bool, _ time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ok {
		p.n, p.s = p.n+1, s
	}
}
func (p *propsSink) count() int   { p.mu.Lock(); defer p.mu.Unlock(); return p.n }
func (p *propsSink) last() Sample { p.mu.Lock(); defer p.mu.Unlock(); return p.s }
