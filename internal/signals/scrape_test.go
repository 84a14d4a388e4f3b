package signals

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/testlog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// deadline bounds every wait: generous, because the box is shared; no test
// asserts on speed.
const deadline = 30 * time.Second

// report is one call of Sink.Report.
type report struct {
	s  Sample
	ok bool
	at time.Time
}

// recorder is a Sink that keeps every report, by replica.
type recorder struct {
	mu  sync.Mutex
	got map[string][]report
}

func newRecorder() *recorder { return &recorder{got: map[string][]report{}} }

func (r *recorder) Report(name string, s Sample, ok bool, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got[name] = append(r.got[name], report{s, ok, at})
}

func (r *recorder) reports(name string) []report {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]report(nil), r.got[name]...)
}

// waitFor polls until cond holds, failing the test after deadline (with
// what show says then, if given).
func waitFor(t *testing.T, what string, cond func() bool, show ...func() string) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			for _, f := range show {
				t.Log(f())
			}
			t.Fatalf("gave up after %v waiting for %s", deadline, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitReport waits for a report of name that satisfies pred and returns it.
func (r *recorder) waitReport(t *testing.T, name, what string, pred func(report) bool) report {
	t.Helper()
	var found report
	waitFor(t, name+": "+what, func() bool {
		for _, rep := range r.reports(name) {
			if pred(rep) {
				found = rep
				return true
			}
		}
		return false
	})
	return found
}

// loopGoroutines counts the scrape loops alive in this process.
func loopGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "signals.(*loop).run(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

func goldenText(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// replicas are the fake replicas of the scraper tests, on loopback.
type replicas struct {
	good, fail, hang, huge *httptest.Server
	release                chan struct{} // closing it frees hanging handlers
	hugeWritten            atomic.Int64  // most bytes the huge replica wrote in one answer
}

func startReplicas(t *testing.T) *replicas {
	t.Helper()
	rs := &replicas{release: make(chan struct{})}
	text := goldenText(t, "llamacpp.prom")
	rs.good = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write(text)
	}))
	rs.fail = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "engine dead", http.StatusInternalServerError)
	}))
	rs.hang = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-rs.release:
		}
	}))
	rs.huge = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// 100 MB of valid comment lines: only the cap stops the reader.
		chunk := bytes.Repeat([]byte("# padding padding padding padding padding padding padding\n"), 1<<10)
		var written int64
		defer func() {
			for {
				old := rs.hugeWritten.Load()
				if written <= old || rs.hugeWritten.CompareAndSwap(old, written) {
					return
				}
			}
		}()
		for written < 100<<20 {
			n, err := w.Write(chunk)
			written += int64(n)
			if err != nil {
				return
			}
		}
	}))
	t.Cleanup(func() {
		close(rs.release)
		for _, s := range []*httptest.Server{rs.good, rs.fail, rs.hang, rs.huge} {
			s.Close()
		}
	})
	return rs
}

func TestScraper(t *testing.T) {
	rs := startReplicas(t)
	sink := newRecorder()
	reg := prometheus.NewRegistry()
	logs := &testlog.Buffer{}
	s, err := New(Config{
		Interval: 20 * time.Millisecond,
		Timeout:  500 * time.Millisecond,
		Mapping:  mustPreset(t, "llamacpp"),
		// Small, so that the cap, not the timeout, ends the huge body even
		// under -race on a busy box.
		MaxBodyBytes: 64 << 10,
	}, sink, reg, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	before := loopGoroutines()
	s.SetTargets([]Target{
		{Name: "good", URL: rs.good.URL + "/"}, // a trailing slash is fine
		{Name: "fail", URL: rs.fail.URL},
		{Name: "hang", URL: rs.hang.URL},
		{Name: "huge", URL: rs.huge.URL},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stopped := false
	defer func() {
		if !stopped {
			cancel()
			<-done
		}
	}()

	// The good replica's signals arrive, as the golden file says.
	rep := sink.waitReport(t, "good", "an ok report", func(r report) bool { return r.ok })
	if want := (Sample{Running: 3, Waiting: 2, HasRunning: true, HasWaiting: true}); rep.s != want {
		t.Errorf("good: got %+v, want %+v", rep.s, want)
	}
	if rep.at.IsZero() {
		t.Error("good: report without a time")
	}
	// Every failing replica is reported unknown (ok=false, zero sample)
	// and counted; none is ever reported ok.
	for _, name := range []string{"fail", "hang", "huge"} {
		rep := sink.waitReport(t, name, "a failed report", func(r report) bool { return !r.ok })
		if rep.s != (Sample{}) {
			t.Errorf("%s: failed report carries a sample %+v", name, rep.s)
		}
		waitFor(t, name+" counted", func() bool {
			return testutil.ToFloat64(s.errors.WithLabelValues(name)) >= 1
		})
		for _, r := range sink.reports(name) {
			if r.ok {
				t.Errorf("%s: reported ok", name)
			}
		}
	}
	// The huge body was cut at the cap, not read to its end; the hanging
	// one timed out; each failure is logged once, with its cause.
	waitFor(t, "a huge answer to end", func() bool { return rs.hugeWritten.Load() > 0 })
	if w := rs.hugeWritten.Load(); w >= 100<<20 {
		t.Errorf("huge replica wrote all of its %d bytes: the body was not capped", w)
	}
	waitFor(t, "the failures logged", func() bool {
		l := logs.String()
		return strings.Contains(l, "replica=huge") && strings.Contains(l, "body too large") &&
			strings.Contains(l, "replica=hang") && strings.Contains(l, "deadline exceeded") &&
			strings.Contains(l, "replica=fail") && strings.Contains(l, "HTTP 500")
	}, logs.String)
	if n := strings.Count(logs.String(), "replica=fail"); n != 1 {
		t.Errorf("fail logged %d times, want once (on the change of state)", n)
	}

	// Removing targets stops their loops; they report nothing more and
	// their series leave the registry.
	if got := loopGoroutines() - before; got != 4 {
		t.Errorf("%d loops running, want 4", got)
	}
	s.SetTargets([]Target{{Name: "good", URL: rs.good.URL}})
	failReports := len(sink.reports("fail"))
	waitFor(t, "the removed loops to exit", func() bool { return loopGoroutines()-before == 1 })
	n := len(sink.reports("good"))
	sink.waitReport(t, "good", "two more reports", func(report) bool { return len(sink.reports("good")) >= n+2 })
	if got := len(sink.reports("fail")); got != failReports {
		t.Errorf("fail reported %d times after its removal", got-failReports)
	}
	want := `
# HELP llm_ring_scrape_errors_total Failed scrapes of a replica's /metrics (timeout, HTTP error, oversized or unparsable body).
# TYPE llm_ring_scrape_errors_total counter
llm_ring_scrape_errors_total{replica="good"} 0
# HELP llm_ring_scrape_up 1 if the last scrape of the replica's /metrics succeeded, else 0.
# TYPE llm_ring_scrape_up gauge
llm_ring_scrape_up{replica="good"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "llm_ring_scrape_errors_total", "llm_ring_scrape_up"); err != nil {
		t.Error(err)
	}
	if c, err := testutil.GatherAndCount(reg, "llm_ring_scrape_last_success_age_seconds"); err != nil || c != 1 {
		t.Errorf("last-success age: %d series (err %v), want 1 (good)", c, err)
	}
	if c, err := testutil.GatherAndCount(reg, "llm_ring_scrape_duration_seconds"); err != nil || c != 1 {
		t.Errorf("duration histogram: %d series (err %v), want 1", c, err)
	}

	// Cancelling Run stops every loop and returns nil.
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run returned %v", err)
		}
	case <-time.After(deadline):
		t.Fatal("Run did not return after cancel")
	}
	stopped = true
	if got := loopGoroutines() - before; got != 0 {
		t.Errorf("%d loops still running after Run returned", got)
	}
}

func TestScraperBodyCapBoundary(t *testing.T) {
	text := goldenText(t, "llamacpp.prom")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(text) }))
	defer srv.Close()
	tests := []struct {
		name   string
		cap    int64
		wantOK bool
	}{
		{"body exactly at the cap is read", int64(len(text)), true},
		{"one byte over the cap fails", int64(len(text)) - 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink := newRecorder()
			s, err := New(Config{Interval: time.Hour, Timeout: deadline, Mapping: mustPreset(t, "llamacpp"), MaxBodyBytes: tt.cap}, sink, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			l := &loop{s: s, target: Target{Name: "r", URL: srv.URL}, url: srv.URL + "/metrics", parser: newParser()}
			l.scrape(context.Background())
			reps := sink.reports("r")
			if len(reps) != 1 || reps[0].ok != tt.wantOK {
				t.Errorf("reports %+v, want one with ok=%v", reps, tt.wantOK)
			}
		})
	}
}

func TestScraperTargetsBeforeRunAndURLChange(t *testing.T) {
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "llamacpp:requests_processing 1\n")
	}))
	defer a.Close()
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "llamacpp:requests_processing 2\n")
	}))
	defer b.Close()
	sink := newRecorder()
	s, err := New(Config{Interval: 10 * time.Millisecond, Timeout: deadline, Mapping: mustPreset(t, "llamacpp")}, sink, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := loopGoroutines()
	// Targets set before Run wait for it; duplicates keep the first.
	s.SetTargets([]Target{{Name: "r", URL: a.URL}, {Name: "r", URL: b.URL}})
	if got := loopGoroutines() - before; got != 0 {
		t.Errorf("%d loops before Run, want 0", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	sink.waitReport(t, "r", "the first URL's sample", func(r report) bool { return r.ok && r.s.Running == 1 })
	// A second Run is refused while the first runs.
	if err := s.Run(ctx); err == nil {
		t.Error("a second concurrent Run was accepted")
	}
	// The same name at a new URL: the old loop stops, a new one scrapes b.
	s.SetTargets([]Target{{Name: "r", URL: b.URL}})
	n := len(sink.reports("r"))
	sink.waitReport(t, "r", "the new URL's sample", func(r report) bool { return r.ok && r.s.Running == 2 })
	for _, r := range sink.reports("r")[n:] {
		if r.s.Running != 2 {
			t.Errorf("a report from the old URL after the change: %+v", r)
		}
	}
	if got := loopGoroutines() - before; got != 1 {
		t.Errorf("%d loops, want 1", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	waitFor(t, "no loop left", func() bool { return loopGoroutines() == before })
}

func TestOffset(t *testing.T) {
	const interval = 200 * time.Millisecond
	// Deterministic: the same name gets the same phase on every router.
	if Offset("llm-7", interval) != Offset("llm-7", interval) {
		t.Fatal("Offset is not deterministic")
	}
	// 1,000 replicas spread over the interval: each tenth of it holds
	// between half and twice its share.
	var tenths [10]int
	for i := range 1000 {
		o := Offset(fmt.Sprintf("llm-%d", i), interval)
		if o < 0 || o >= interval {
			t.Fatalf("offset %v outside [0, %v)", o, interval)
		}
		tenths[o*10/interval]++
	}
	for i, n := range tenths {
		if n < 50 || n > 200 {
			t.Errorf("tenth %d of the interval holds %d of 1000 first scrapes: %v", i, n, tenths)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{Interval: 200 * time.Millisecond, Timeout: 200 * time.Millisecond, Mapping: Mapping{Running: []string{"r"}}}
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string // "" means valid
	}{
		{"the shipped defaults", func(*Config) {}, ""},
		{"zero interval", func(c *Config) { c.Interval = 0 }, "signals.interval: must be > 0, got 0s"},
		{"negative timeout", func(c *Config) { c.Timeout = -time.Second }, "signals.timeout: must be > 0, got -1s"},
		{"relative path", func(c *Config) { c.Path = "metrics" }, `signals.path: must start with /, got "metrics"`},
		{"negative body cap", func(c *Config) { c.MaxBodyBytes = -1 }, "signals.max_body_bytes: must not be negative"},
		{"empty mapping", func(c *Config) { c.Mapping = Mapping{} }, "signals.mapping: maps no signal"},
		{"KV without scale", func(c *Config) { c.Mapping.KVUse = []string{"kv"} }, "signals.mapping.kv_scale: must be > 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			tt.mutate(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("unexpected error %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
	// New refuses what Validate refuses, and a nil Sink.
	if _, err := New(Config{}, newRecorder(), nil, nil); err == nil {
		t.Error("New accepted a zero Config")
	}
	if _, err := New(good, nil, nil, nil); err == nil {
		t.Error("New accepted a nil Sink")
	}
	// Two scrapers on one registry: the second is refused, not a panic.
	reg := prometheus.NewRegistry()
	if _, err := New(good, newRecorder(), reg, nil); err != nil {
		t.Fatal(err)
	}
	var are prometheus.AlreadyRegisteredError
	if _, err := New(good, newRecorder(), reg, nil); !errors.As(err, &are) {
		t.Errorf("second registration: %v", err)
	}
}

// BenchmarkScrape is one whole scrape of a loopback replica serving
// testdata/vllm_bench.prom: request, body, parse. cpu-ns/op counts both
// sides (the fake replica runs in this process too), so it overstates the
// router's share.
func BenchmarkScrape(b *testing.B) {
	text, err := os.ReadFile(filepath.Join("testdata", "vllm_bench.prom"))
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(text) }))
	defer srv.Close()
	s, err := New(Config{Interval: time.Hour, Timeout: deadline, Mapping: mustPreset(b, "vllm")}, newRecorder(), nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	l := &loop{s: s, target: Target{Name: "r", URL: srv.URL}, url: srv.URL + "/metrics", parser: newParser()}
	b.ReportAllocs()
	cpu := cpuTime(b)
	for b.Loop() {
		smp, err := l.fetch(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		sinkSample = smp
	}
	b.ReportMetric(float64(cpuTime(b)-cpu)/float64(b.N), "cpu-ns/op")
}
