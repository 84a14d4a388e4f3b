package signals

import (
	"bytes"
	"flag"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

var update = flag.Bool("update", false, "rewrite the generated files in testdata/")

func mustPreset(t testing.TB, name string) Mapping {
	t.Helper()
	m, err := Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func parseFile(t testing.TB, name string, m Mapping) (Sample, error) {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return Parse(f, m)
}

func TestParseGolden(t *testing.T) {
	tests := []struct {
		file, preset string
		want         Sample
	}{
		// Current llama.cpp (tools/server): no KV family any more, so KV is
		// unknown, not zero.
		{"llamacpp.prom", "llamacpp", Sample{Running: 3, Waiting: 2, HasRunning: true, HasWaiting: true}},
		// Older llama.cpp (examples/server) still had kv_cache_usage_ratio.
		{"llamacpp_kv.prom", "llamacpp", Sample{Running: 1, Waiting: 0, KVUse: 0.3125, HasRunning: true, HasWaiting: true, HasKV: true}},
		// vLLM V1 with two data-parallel engines: counts summed (3+2, 1+0),
		// KV the fuller engine's (max of 0.42, 0.17); the histogram and
		// the labelled counters around them are ignored.
		{"vllm.prom", "vllm", Sample{Running: 5, Waiting: 1, KVUse: 0.42, HasRunning: true, HasWaiting: true, HasKV: true}},
		// vLLM 0.6 (V0): only gpu_cache_usage_perc, read through the
		// preset's fallback.
		{"vllm_v0.prom", "vllm", Sample{Running: 4, Waiting: 6, KVUse: 0.9375, HasRunning: true, HasWaiting: true, HasKV: true}},
		// SGLang, one scheduler (tp_rank 0) with its four labels.
		{"sglang.prom", "sglang", Sample{Running: 7, Waiting: 2, KVUse: 0.28, HasRunning: true, HasWaiting: true, HasKV: true}},
		// The wrong preset finds nothing: every signal unknown, no error.
		{"sglang.prom", "vllm", Sample{}},
	}
	for _, tt := range tests {
		t.Run(tt.file+"/"+tt.preset, func(t *testing.T) {
			got, err := parseFile(t, tt.file, mustPreset(t, tt.preset))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseSeries(t *testing.T) {
	m := Mapping{Running: []string{"r"}, Waiting: []string{"w"}, KVUse: []string{"kv", "kv_old"}, KVScale: 1}
	tests := []struct {
		name, text string
		want       Sample
	}{
		{"empty exposition: all unknown",
			"", Sample{}},
		{"zero is known, not unknown",
			"r 0\nw 0\nkv 0\n", Sample{HasRunning: true, HasWaiting: true, HasKV: true}},
		{"untyped and counter families are read too",
			"# TYPE r counter\nr 4\nw 2\n", Sample{Running: 4, Waiting: 2, HasRunning: true, HasWaiting: true}},
		{"NaN, +Inf and negative series are skipped, the rest combined",
			`r{e="0"} NaN` + "\n" + `r{e="1"} 2` + "\n" + `r{e="2"} -1` + "\n" + `kv{e="0"} +Inf` + "\n" + `kv{e="1"} 0.5` + "\n",
			Sample{Running: 2, KVUse: 0.5, HasRunning: true, HasKV: true}},
		{"a family whose every series is NaN is unknown",
			"w NaN\n", Sample{}},
		{"the first family of the list wins even when the later one is fuller",
			"kv 0.1\nkv_old 0.9\n", Sample{KVUse: 0.1, HasKV: true}},
		{"the fallback is read when the first is absent",
			"kv_old 0.9\n", Sample{KVUse: 0.9, HasKV: true}},
		{"a ratio a rounding hair above 1 is clamped to 1",
			"kv 1.0000000001\n", Sample{KVUse: 1, HasKV: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tt.text), m)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseKVScale(t *testing.T) {
	pct := Mapping{KVUse: []string{"kv_pct"}, KVScale: 0.01}
	got, err := Parse(strings.NewReader("kv_pct 57\n"), pct)
	if err != nil {
		t.Fatal(err)
	}
	if !got.HasKV || math.Abs(got.KVUse-0.57) > 1e-12 {
		t.Errorf("KV in percent with kv_scale 0.01: got %+v, want KVUse 0.57", got)
	}
}

func TestParseErrors(t *testing.T) {
	m := Mapping{Running: []string{"r"}, Waiting: []string{"w"}, KVUse: []string{"kv"}, KVScale: 1}
	tests := []struct {
		name, text string
		want       string // in the error
	}{
		{"not an exposition", "<html>502 Bad Gateway</html>\n", "parse metrics"},
		{"a value that is not a number", "r three\n", "parse metrics"},
		{"unterminated label set", `r{engine="0" 3` + "\n", "parse metrics"},
		{"two TYPE lines for one family", "# TYPE r gauge\nr 1\n# TYPE r counter\n", "parse metrics"},
		{"truncated mid-line", "r 1\nw", "parse metrics"},
		{"mapped family is a histogram", "# TYPE r histogram\nr_bucket{le=\"+Inf\"} 1\nr_sum 1\nr_count 1\n", "r is a histogram"},
		{"KV in percent with kv_scale 1", "kv 57\n", "above 1 after kv_scale 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tt.text), m)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestPreset(t *testing.T) {
	for _, name := range PresetNames() {
		m := mustPreset(t, name)
		if err := m.Validate("signals.mapping"); err != nil {
			t.Errorf("preset %s: %v", name, err)
		}
	}
	if got := strings.Join(PresetNames(), ","); got != "llamacpp,sglang,vllm" {
		t.Errorf("presets %s, want llamacpp,sglang,vllm", got)
	}
	_, err := Preset("tgi")
	if err == nil || !strings.Contains(err.Error(), `unknown preset "tgi" (known: llamacpp, sglang, vllm)`) {
		t.Errorf("Preset(tgi) error %v", err)
	}
	// Preset returns a copy: changing it does not change the next one.
	m := mustPreset(t, "vllm")
	m.KVUse[0] = "changed"
	if mustPreset(t, "vllm").KVUse[0] != "vllm:kv_cache_usage_perc" {
		t.Error("Preset shares its slices with the caller")
	}
}

func TestMappingWith(t *testing.T) {
	base := mustPreset(t, "vllm")
	got := base.With(Mapping{Waiting: []string{"my:queue"}})
	if got.Waiting[0] != "my:queue" || got.Running[0] != "vllm:num_requests_running" || len(got.KVUse) != 2 || got.KVScale != 1 {
		t.Errorf("override of waiting only: got %+v", got)
	}
	if got = base.With(Mapping{KVScale: 0.01}); got.KVScale != 0.01 || got.KVUse[0] != "vllm:kv_cache_usage_perc" {
		t.Errorf("override of kv_scale only: got %+v", got)
	}
}

func TestMappingValidate(t *testing.T) {
	tests := []struct {
		name string
		m    Mapping
		want string // "" means valid
	}{
		{"a preset", Mapping{Running: []string{"vllm:num_requests_running"}}, ""},
		{"nothing mapped", Mapping{}, "signals.mapping: maps no signal"},
		{"empty name", Mapping{Waiting: []string{""}}, `signals.mapping.waiting[0]: "" is not a metric name`},
		{"KV without a scale", Mapping{KVUse: []string{"kv"}}, "signals.mapping.kv_scale: must be > 0, got 0"},
		{"negative scale", Mapping{KVUse: []string{"kv"}, KVScale: -1}, "signals.mapping.kv_scale: must be > 0, got -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.m.Validate("signals.mapping")
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("unexpected error %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// vllmBenchExposition builds what one vLLM V1 engine's /metrics shows after
// some traffic: the scheduler gauges, the counters and the request
// histograms with vLLM's own names, help texts and buckets
// (vllm/v1/metrics/loggers.py), max_model_len 4096. It is written to
// testdata/vllm_bench.prom with -update; BenchmarkParse reads that file.
func vllmBenchExposition(t testing.TB) []byte {
	reg := prometheus.NewRegistry()
	labels := prometheus.Labels{"model_name": "Qwen/Qwen2.5-7B-Instruct", "engine": "0"}
	gauge := func(name, help string, v float64) {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels})
		g.Set(v)
		reg.MustRegister(g)
	}
	counter := func(name, help string, v float64) {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
		c.Add(v)
		reg.MustRegister(c)
	}
	histogram := func(name, help string, buckets []float64, observe func(i int) float64) {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: labels})
		for i := range 500 {
			h.Observe(observe(i))
		}
		reg.MustRegister(h)
	}
	tokens := []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000}
	latency := []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
	gauge("vllm:num_requests_running", "Number of requests in model execution batches.", 12)
	gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", 3)
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", 0.61)
	counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", 812345)
	counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", 524288)
	counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", 4)
	counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", 1203456)
	counter("vllm:generation_tokens_total", "Number of generation tokens processed.", 304512)
	success := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:request_success_total",
		Help: "Count of successfully processed requests.", ConstLabels: labels}, []string{"finished_reason"})
	for i, reason := range []string{"stop", "length", "abort"} {
		success.WithLabelValues(reason).Add(float64(400 / (i + 1)))
	}
	reg.MustRegister(success)
	histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens, func(i int) float64 { return float64(50 + i*7%3000) })
	histogram("vllm:request_generation_tokens", "Number of generation tokens processed.", tokens, func(i int) float64 { return float64(20 + i*3%400) })
	histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
		[]float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}, func(i int) float64 { return float64(1 + i*13%2048) })
	histogram("vllm:request_params_n", "Histogram of the n request parameter.", []float64{1, 2, 5, 10, 20}, func(int) float64 { return 1 })
	histogram("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", tokens, func(i int) float64 { return float64(256 + i%3*256) })
	histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
		[]float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0},
		func(i int) float64 { return 0.02 + float64(i%40)*0.01 })
	histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
		[]float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0},
		func(i int) float64 { return 0.015 + float64(i%20)*0.002 })
	for _, h := range []struct{ name, help string }{
		{"vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds."},
		{"vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request."},
		{"vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request."},
		{"vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request."},
		{"vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request."},
	} {
		histogram(h.name, h.help, latency, func(i int) float64 { return 0.2 + float64(i%90)*0.1 })
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func TestVLLMBenchFixture(t *testing.T) {
	path := filepath.Join("testdata", "vllm_bench.prom")
	gen := vllmBenchExposition(t)
	if *update {
		if err := os.WriteFile(path, gen, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, gen) {
		t.Fatalf("%s is not what vllmBenchExposition writes; run go test -update", path)
	}
	series := 0
	for _, line := range strings.Split(string(got), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			series++
		}
	}
	// About 200 series, as one busy vLLM engine shows.
	if series < 180 || series > 320 {
		t.Errorf("%d series, want about 200", series)
	}
	s, err := Parse(bytes.NewReader(got), mustPreset(t, "vllm"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Sample{Running: 12, Waiting: 3, KVUse: 0.61, HasRunning: true, HasWaiting: true, HasKV: true}); s != want {
		t.Errorf("got %+v, want %+v", s, want)
	}
	t.Logf("%s: %d bytes, %d series", path, len(got), series)
}

var sinkSample Sample

// cpuTime is the CPU time this process has used (user + system), all
// threads: the garbage collector's work counts too.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkParse parses one busy vLLM engine's exposition (testdata/
// vllm_bench.prom, 244 series, 27 KB). "fresh" is Parse (a new parser per
// call); "reused" is what a scrape loop does (one parser per target).
// cpu-ns/op is the process's CPU time per parse: on a shared box, where
// ns/op (wall time) grows with other people's load, it is the number to
// budget with.
func BenchmarkParse(b *testing.B) {
	text, err := os.ReadFile(filepath.Join("testdata", "vllm_bench.prom"))
	if err != nil {
		b.Fatal(err)
	}
	m := mustPreset(b, "vllm")
	b.Run("fresh", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(text)))
		cpu := cpuTime(b)
		for b.Loop() {
			s, err := Parse(bytes.NewReader(text), m)
			if err != nil {
				b.Fatal(err)
			}
			sinkSample = s
		}
		b.ReportMetric(float64(cpuTime(b)-cpu)/float64(b.N), "cpu-ns/op")
	})
	b.Run("reused", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(text)))
		p := newParser()
		cpu := cpuTime(b)
		for b.Loop() {
			s, err := parse(&p, bytes.NewReader(text), m)
			if err != nil {
				b.Fatal(err)
			}
			sinkSample = s
		}
		b.ReportMetric(float64(cpuTime(b)-cpu)/float64(b.N), "cpu-ns/op")
	})
}

// TestParseAdapters: vllm:lora_requests_info gives the newest series'
// adapters (comma-separated labels, blanks dropped) and max_lora; absent,
// it gives nil; a family of the wrong type is an error.
func TestParseAdapters(t *testing.T) {
	m := mustPreset(t, "vllm")
	expo := `# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql-lora",waiting_lora_adapters=""} 1.7330e+09
vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql-lora, chat-lora",waiting_lora_adapters="tl-lora"} 1.7331e+09
vllm:lora_requests_info{max_lora="4",running_lora_adapters="",waiting_lora_adapters=""} 1.7329e+09
vllm:num_requests_running 2
`
	s, err := Parse(strings.NewReader(expo), m)
	if err != nil {
		t.Fatal(err)
	}
	want := Adapters{Running: []string{"sql-lora", "chat-lora"}, Waiting: []string{"tl-lora"}, Max: 4}
	if s.Adapters == nil || !reflect.DeepEqual(*s.Adapters, want) || s.Running != 2 || !s.HasRunning {
		t.Fatalf("got %+v (adapters %+v), want adapters %+v", s, s.Adapters, want)
	}
	// Nothing running: empty lists, max unknown when not a number.
	s, err = Parse(strings.NewReader(`vllm:lora_requests_info{max_lora="x",running_lora_adapters="",waiting_lora_adapters=""} 5`+"\n"), m)
	if err != nil || s.Adapters == nil || !reflect.DeepEqual(*s.Adapters, Adapters{}) {
		t.Fatalf("idle: %+v, %v", s.Adapters, err)
	}
	if s, err := parseFile(t, "vllm.prom", m); err != nil || s.Adapters != nil {
		t.Fatalf("no LoRA family: %+v, %v", s.Adapters, err)
	}
	_, err = Parse(strings.NewReader("# TYPE vllm:lora_requests_info counter\nvllm:lora_requests_info 1\n"), m)
	if err == nil || !strings.Contains(err.Error(), "vllm:lora_requests_info") {
		t.Fatalf("counter: %v", err)
	}
	if err := (Mapping{Running: []string{"a"}, Adapters: []string{""}}).Validate("signals.mapping"); err == nil ||
		!strings.Contains(err.Error(), "signals.mapping.adapters[0]") {
		t.Fatalf("validate: %v", err)
	}
}
