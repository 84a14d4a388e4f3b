package experiment

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/analysis"
	"github.com/llm-ring/llm-ring/internal/discovery"
	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/record"
	"github.com/llm-ring/llm-ring/internal/replica"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/ring"
	"github.com/llm-ring/llm-ring/internal/router"
	"github.com/llm-ring/llm-ring/internal/testlog"
	"github.com/llm-ring/llm-ring/internal/traffic"
)

// testSpeed runs model time 100× faster than the wall clock: a tiny-profile
// run takes a fraction of a second.
const testSpeed = 100

func embeddedSpec(t *testing.T, policies ...string) Spec {
	return Spec{
		Policies:  policies,
		Seeds:     []int64{1},
		Profile:   tinyProfile(),
		Replicas:  3,
		Speed:     testSpeed,
		SharedCPU: true,
		OutDir:    t.TempDir(),
	}
}

func expectedTurns(t *testing.T, p traffic.Profile, seed int64) int {
	t.Helper()
	cs, err := traffic.Generate(p, seed)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range cs {
		n += len(c.Turns)
	}
	return n
}

func readRun(t *testing.T, r Result) (RunFile, []record.Request) {
	t.Helper()
	b, err := os.ReadFile(r.JSONPath)
	if err != nil {
		t.Fatal(err)
	}
	var f RunFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	fh, err := os.Open(r.CSVPath)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	rows, err := record.ReadRequests(fh)
	if err != nil {
		t.Fatal(err)
	}
	return f, rows
}

// The runner end to end on embedded replicas, with a scale-up: every turn is
// recorded once, without errors, with the replica's counts; the scale-up is
// recorded; the analysis accepts the folder.
func TestRunEmbeddedEndToEnd(t *testing.T) {
	spec := embeddedSpec(t, "consistent", "llm-aware")
	spec.ScaleAt = 2 * time.Second
	spec.LoadDelay = time.Second
	var progress bytes.Buffer
	spec.Progress = &progress
	results, err := Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 {
		t.Fatalf("%d results, want 2", len(results))
	}
	want := expectedTurns(t, spec.Profile, 1)
	for i, res := range results {
		f, rows := readRun(t, res)
		id := f.RunID
		if id != RunID(1, spec.Policies[i], ModeEmbedded) || f.Policy != spec.Policies[i] || f.Order != i {
			t.Errorf("run %d: id %q policy %q order %d", i, id, f.Policy, f.Order)
		}
		if f.Mode != ModeEmbedded || f.Replicas != 3 || f.Profile != "tiny" || f.Seed != 1 || f.Interrupted {
			t.Errorf("%s: mode %q replicas %d profile %q seed %d interrupted %v", id, f.Mode, f.Replicas, f.Profile, f.Seed, f.Interrupted)
		}
		// Every turn recorded, none twice, no error (tiny turns all fit).
		if len(rows) != want || f.Requests != want || f.ExpectedRequests != want || f.ConversationsCut != 0 {
			t.Errorf("%s: %d rows, requests %d, expected %d, cut %d; want %d turns all recorded",
				id, len(rows), f.Requests, f.ExpectedRequests, f.ConversationsCut, want)
		}
		if f.Errors != 0 {
			t.Errorf("%s: %d errors", id, f.Errors)
		}
		seen := map[string]bool{}
		followUpHits := 0
		for _, r := range rows {
			key := r.Conversation + "/" + string(rune('0'+r.Turn))
			if seen[key] {
				t.Errorf("%s: %s turn %d recorded twice", id, r.Conversation, r.Turn)
			}
			seen[key] = true
			if r.Status != 200 || r.Error != "" || r.Replica == "" || r.Reason == "" || r.RunID != id {
				t.Errorf("%s: bad row %+v", id, r)
			}
			if r.PromptN+r.CacheN == 0 || r.PredictedN == 0 || r.PredictedN > spec.Profile.MaxTokens {
				t.Errorf("%s: row without the replica's counts: %+v", id, r)
			}
			if !(r.TTFTMS > 0 && r.TTFTMS <= r.LatencyMS && r.StartMS >= 0 && math.Abs(r.EndMS-(r.StartMS+r.LatencyMS)) < 0.01) {
				t.Errorf("%s: inconsistent times: ttft %v latency %v start %v end %v", id, r.TTFTMS, r.LatencyMS, r.StartMS, r.EndMS)
			}
			if r.Turn > 1 && r.CacheN > 0 {
				followUpHits++
			}
		}
		if followUpHits == 0 {
			t.Errorf("%s: no follow-up turn reused a cache: answers are not resent as the replica gave them?", id)
		}
		// Scale-up recorded, in model time.
		if !(f.ScaleAtMS >= 2000 && f.ScaleReadyMS >= f.ScaleAtMS+1000 && f.ScaleReplica == "llm-3") {
			t.Errorf("%s: scale-up at %v ms, ready at %v ms, replica %q; want at ≥ 2000, ready ≥ 1 s later, llm-3",
				id, f.ScaleAtMS, f.ScaleReadyMS, f.ScaleReplica)
		}
		if f.DurationMS < f.ScaleReadyMS {
			t.Errorf("%s: duration %v ms ends before the scale-up (%v ms)", id, f.DurationMS, f.ScaleReadyMS)
		}
		// The router's own counters agree with the rows.
		total := 0.0
		for k, v := range f.Metrics {
			if strings.HasPrefix(k, "llm_ring_requests_total{") {
				if !strings.Contains(k, `policy="`+f.Policy+`"`) {
					t.Errorf("%s: metric %s of another policy", id, k)
				}
				total += v
			}
		}
		if int(total) != want {
			t.Errorf("%s: router counted %v requests, want %d", id, total, want)
		}
		if f.Metrics["llm_ring_replicas"] != 4 {
			t.Errorf("%s: router ends with %v replicas, want 4", id, f.Metrics["llm_ring_replicas"])
		}
		for _, k := range []string{"speed", "router", "replica", "profile", "headers"} {
			if _, ok := f.Config[k]; !ok {
				t.Errorf("%s: config lacks %q", id, k)
			}
		}
	}
	if _, err := analysis.Load(spec.OutDir); err != nil {
		t.Errorf("the analysis refuses the folder: %v", err)
	}
	if !strings.Contains(progress.String(), "[consistent seed 1] scale-up: llm-3 ready") ||
		!strings.Contains(progress.String(), "100%") {
		t.Errorf("progress lacks the scale-up note or the last line:\n%s", progress.String())
	}
}

// Without x-conversation-id the router keys conversations on their start
// (system prompt + first user message): consecutive turns still land on the
// same replica under consistent hashing.
func TestNoHeadersKeepsAffinity(t *testing.T) {
	spec := embeddedSpec(t, "consistent")
	spec.NoHeaders = true
	var log testlog.Buffer
	spec.Log = slog.New(slog.NewJSONHandler(&log, nil))
	results, err := Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	f, rows := readRun(t, results[0])
	if f.Errors != 0 || len(rows) != expectedTurns(t, spec.Profile, 1) {
		t.Fatalf("%d rows, %d errors", len(rows), f.Errors)
	}
	home := map[string]string{}
	replicas := map[string]bool{}
	for _, r := range rows {
		replicas[r.Replica] = true
		if h, ok := home[r.Conversation]; ok && h != r.Replica {
			t.Errorf("%s turn %d on %s, earlier turns on %s", r.Conversation, r.Turn, r.Replica, h)
		}
		home[r.Conversation] = r.Replica
	}
	if len(replicas) < 2 {
		t.Errorf("every conversation on %v: the test cannot tell keys apart", replicas)
	}
	// The router found the conversations by their prefix, not a header.
	var n int
	for line := range strings.Lines(log.String()) {
		var l struct {
			Msg       string `json:"msg"`
			KeySource string `json:"key_source"`
		}
		if json.Unmarshal([]byte(line), &l) != nil || l.Msg != "request" {
			continue
		}
		n++
		if l.KeySource != "prefix" {
			t.Errorf("router keyed a request by %q, want prefix", l.KeySource)
		}
	}
	if n != len(rows) {
		t.Errorf("router logged %d requests, want %d", n, len(rows))
	}
}

// Ctrl-C (ctx cancelled) mid-run writes the rows recorded so far; the JSON
// says the run was interrupted; Run returns ErrInterrupted; the analysis
// still reads the folder.
func TestInterruptedRunKeepsItsRows(t *testing.T) {
	spec := embeddedSpec(t, "bounded", "llm-aware")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var n atomic.Int64
	spec.OnRequest = func(*record.Request) {
		if n.Add(1) == 4 {
			cancel()
		}
	}
	results, err := Run(ctx, spec)
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("Run error = %v, want ErrInterrupted", err)
	}
	if len(results) != 1 {
		t.Fatalf("%d results, want only the interrupted first run", len(results))
	}
	f, rows := readRun(t, results[0])
	if !f.Interrupted {
		t.Error("the run JSON does not say it was interrupted")
	}
	if len(rows) < 4 || f.Requests != len(rows) || len(rows) >= expectedTurns(t, spec.Profile, 1) {
		t.Errorf("%d rows kept (JSON says %d); want at least the 4 before the interrupt, and fewer than all", len(rows), f.Requests)
	}
	ok := 0
	for _, r := range rows {
		switch {
		case r.Error == "" && r.Status == 200:
			ok++
		case r.Error != errInterruptedRequest:
			t.Errorf("row %s/%d: error %q, want none or %q", r.Conversation, r.Turn, r.Error, errInterruptedRequest)
		}
	}
	if ok < 4 || f.Errors != len(rows)-ok {
		t.Errorf("%d successful rows, JSON errors %d of %d rows", ok, f.Errors, len(rows))
	}
	if _, err := os.Stat(filepath.Join(spec.OutDir, RunID(1, "llm-aware", ModeEmbedded)+".csv")); err == nil {
		t.Error("the second run started after the interrupt")
	}
	if _, err := analysis.Load(spec.OutDir); err != nil {
		t.Errorf("the analysis refuses the interrupted run: %v", err)
	}
}

// A run already in the folder is never overwritten silently.
func TestRefusesToOverwrite(t *testing.T) {
	spec := embeddedSpec(t, "bounded", "llm-aware")
	existing := filepath.Join(spec.OutDir, RunID(1, "llm-aware", ModeEmbedded)+".json")
	if err := os.WriteFile(existing, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Run(context.Background(), spec)
	if err == nil || !strings.Contains(err.Error(), existing) {
		t.Fatalf("Run = %v, want an error naming %s", err, existing)
	}
	if _, err := os.Stat(filepath.Join(spec.OutDir, RunID(1, "bounded", ModeEmbedded)+".csv")); err == nil {
		t.Error("a run started before the check")
	}
}

// fakeCluster is an "external" deployment for tests: replicas on a shared
// host and a router, each on its own loopback listener, plus scale commands
// that add and remove a replica as kubectl scale would.
type fakeCluster struct {
	t        *testing.T
	host     *replica.Host
	rt       *router.Router
	url      string
	adminURL string // the router's admin API, token "t0ken"
	replicas []replicaset.Replica
	ctx      context.Context
	wg       *sync.WaitGroup
	calls    []string
	mu       sync.Mutex
}

func newFakeCluster(t *testing.T, n int) *fakeCluster {
	ctx, cancel := context.WithCancel(context.Background())
	h, err := replica.NewHost(replica.Options{Model: model.DefaultConfig(), Speed: testSpeed, SharedCPU: true})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	c := &fakeCluster{t: t, host: h, ctx: ctx, wg: &wg}
	t.Cleanup(func() { h.Close(); cancel(); wg.Wait() })
	for i := range n + 1 {
		name := "llm-" + string(rune('0'+i))
		r, err := h.Add(name, 0)
		if err != nil {
			t.Fatal(err)
		}
		ln := listen(t)
		wg.Go(func() { replica.Serve(ctx, ln, r) })
		c.replicas = append(c.replicas, replicaset.Replica{Name: name, URL: "http://" + ln.Addr().String()})
	}
	c.rt, c.url, c.adminURL = c.addRouter(n)
	return c
}

// addRouter starts a router (policy round-robin, admin token "t0ken") in
// front of the first n replicas and returns it, its URL and its admin URL.
func (c *fakeCluster) addRouter(n int) (*router.Router, string, string) {
	t := c.t
	cfg := DefaultRouterConfig()
	cfg.Policy = "round-robin"
	cfg.Discovery.Static = c.replicas[:n]
	cfg.Admin.Listen, cfg.Admin.TokenFile = "127.0.0.1:0", filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(cfg.Admin.TokenFile, []byte("t0ken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rt, err := router.New(router.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	rt.SetReplicas(c.replicas[:n])
	ln, aln := listen(t), listen(t)
	c.wg.Go(func() { rt.Serve(c.ctx, ln, discovery.Static(c.replicas[:n])) })
	c.wg.Go(func() { rt.ServeAdmin(c.ctx, aln) })
	return rt, "http://" + ln.Addr().String(), "http://" + aln.Addr().String()
}

func listen(t *testing.T) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// exec plays the scale commands: "scale N" gives the router the first N
// replicas, in the background, as a StatefulSet scale returns before the
// pod is ready.
func (c *fakeCluster) exec(_ context.Context, cmd string) error {
	c.mu.Lock()
	c.calls = append(c.calls, cmd)
	c.mu.Unlock()
	var n int
	switch cmd {
	case "scale 3":
		n = 3
	case "scale 2":
		n = 2
	default:
		return errors.New("unknown command " + cmd)
	}
	go func() {
		time.Sleep(5 * time.Millisecond)
		c.rt.SetReplicas(c.replicas[:n])
	}()
	return nil
}

// External mode against a router on a loopback listener: the policy is
// switched through the admin API before each run, the scale commands add
// and remove the replica, --prepare runs them once first, and each run's
// metrics are its own.
func TestRunExternal(t *testing.T) {
	c := newFakeCluster(t, 2)
	spec := Spec{
		Policies:     []string{"round-robin", "consistent"},
		Seeds:        []int64{1},
		Profile:      tinyProfile(),
		Speed:        testSpeed,
		OutDir:       t.TempDir(),
		RouterURL:    c.url,
		AdminURL:     c.adminURL,
		AdminToken:   "t0ken",
		ScaleAt:      2 * time.Second,
		ScaleCmd:     "scale 3",
		UnscaleCmd:   "scale 2",
		Prepare:      true,
		PollInterval: time.Millisecond,
		exec:         c.exec,
	}
	results, err := Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	want := expectedTurns(t, spec.Profile, 1)
	reasons := map[string]string{"round-robin": "rotate", "consistent": "home"}
	for i, res := range results {
		f, rows := readRun(t, res)
		p := spec.Policies[i]
		if f.RunID != RunID(1, p, ModeExternal) || f.Mode != ModeExternal || f.Replicas != 2 {
			t.Errorf("run %d: id %q mode %q replicas %d", i, f.RunID, f.Mode, f.Replicas)
		}
		if len(rows) != want || f.Errors != 0 {
			t.Errorf("%s: %d rows, %d errors; want %d rows, no error", f.RunID, len(rows), f.Errors, want)
		}
		// The router really ran the run's policy.
		for _, r := range rows {
			if r.Reason != reasons[p] {
				t.Errorf("%s: %s turn %d routed by %q, want %q", f.RunID, r.Conversation, r.Turn, r.Reason, reasons[p])
				break
			}
		}
		// Counters are this run's: the earlier run's requests are subtracted.
		total := 0.0
		for k, v := range f.Metrics {
			if strings.HasPrefix(k, "llm_ring_requests_total{") && v != 0 {
				if !strings.Contains(k, `policy="`+p+`"`) {
					t.Errorf("%s: metric %s = %v belongs to another run", f.RunID, k, v)
				}
				total += v
			}
		}
		if int(total) != want {
			t.Errorf("%s: router counted %v requests in this run, want %d", f.RunID, total, want)
		}
		if !(f.ScaleReadyMS > f.ScaleAtMS && f.ScaleAtMS >= 2000 && f.ScaleReplica == "llm-2") {
			t.Errorf("%s: scale-up at %v ready %v replica %q", f.RunID, f.ScaleAtMS, f.ScaleReadyMS, f.ScaleReplica)
		}
		if f.Config["router_policy"].(map[string]any)["policy"] != p {
			t.Errorf("%s: recorded router settings %v", f.RunID, f.Config["router_policy"])
		}
	}
	wantCalls := []string{"scale 3", "scale 2", "scale 3", "scale 2", "scale 3", "scale 2"}
	if strings.Join(c.calls, ";") != strings.Join(wantCalls, ";") {
		t.Errorf("commands run: %q, want %q (prepare, then scale and unscale per run)", c.calls, wantCalls)
	}
	if n := len(c.rt.Table().Status().Replicas); n != 2 {
		t.Errorf("router left with %d replicas, want the 2 it started with", n)
	}
}

// Issue 13: external mode against three router instances (--router
// URL1,URL2,URL3 --admin A1,A2,A3): the policy is switched on every
// instance, turn t of each conversation goes to instance
// (hash(conversation) + t) mod 3 (each instance counts exactly the turns
// sent to it), and the run's metrics are the sum over the instances.
func TestRunExternalActiveActive(t *testing.T) {
	c := newFakeCluster(t, 2)
	rts := []*router.Router{c.rt}
	urls, admins := []string{c.url}, []string{c.adminURL}
	for range 2 {
		rt, u, a := c.addRouter(2)
		rts, urls, admins = append(rts, rt), append(urls, u), append(admins, a)
	}
	spec := Spec{
		Policies:   []string{"consistent"},
		Seeds:      []int64{1},
		Profile:    tinyProfile(),
		Speed:      testSpeed,
		OutDir:     t.TempDir(),
		RouterURL:  strings.Join(urls, ","),
		AdminURL:   strings.Join(admins, ", "),
		AdminToken: "t0ken",
	}
	results, err := Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	f, rows := readRun(t, results[0])
	if want := expectedTurns(t, spec.Profile, 1); len(rows) != want || f.Errors != 0 {
		t.Fatalf("%d rows, %d errors; want %d rows, no error", len(rows), f.Errors, want)
	}
	var want [3]float64
	spread := 0
	byConv := map[string]map[uint64]bool{}
	for _, r := range rows {
		i := (ring.HashString(r.Conversation) + uint64(r.Turn-1)) % 3
		want[i]++
		if byConv[r.Conversation] == nil {
			byConv[r.Conversation] = map[uint64]bool{}
		}
		byConv[r.Conversation][i] = true
	}
	for _, seen := range byConv {
		if len(seen) > 1 {
			spread++
		}
	}
	if spread == 0 {
		t.Error("no conversation met more than one instance")
	}
	total := 0.0
	for i, rt := range rts {
		if p := rt.Table().Policy().Name(); p != "consistent" {
			t.Errorf("instance %d runs policy %s: the switch did not reach it", i, p)
		}
		got := served(t, rt)
		if got != want[i] {
			t.Errorf("instance %d served %v requests, want %v (turn t to (hash + t) mod 3)", i, got, want[i])
		}
		total += got
	}
	counted := 0.0
	for k, v := range f.Metrics {
		if strings.HasPrefix(k, "llm_ring_requests_total{") {
			counted += v
		}
	}
	if counted != total {
		t.Errorf("run metrics count %v requests, the instances %v: want the sum", counted, total)
	}
}

// served is the router's count of proxied requests (llm_ring_requests_total).
func served(t *testing.T, rt *router.Router) float64 {
	t.Helper()
	mfs, err := rt.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "llm_ring_requests_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// Answers other than 200 are recorded with their status and the error's
// message, and end their conversation.
func TestErrorsAreRecorded(t *testing.T) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			w.Write([]byte("llm_ring_replicas 1\n"))
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"error":{"code":503,"message":"no ready replica to serve the request","type":"unavailable_error"}}`))
		}
	})}
	ln := listen(t)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	p := tinyProfile()
	convs, err := traffic.Generate(p, 1)
	if err != nil {
		t.Fatal(err)
	}
	d := &driver{urls: []string{"http://" + ln.Addr().String()}, client: http.DefaultClient, profile: p, convs: convs,
		speed: 1000, headers: true, start: time.Now()}
	d.run(context.Background())
	if len(d.rows) != len(convs) || int(d.errors.Load()) != len(convs) {
		t.Fatalf("%d rows, %d errors; want one failed first turn per conversation (%d)", len(d.rows), d.errors.Load(), len(convs))
	}
	for _, r := range d.rows {
		if r.Turn != 1 || r.Status != 503 || r.Error != "HTTP 503: no ready replica to serve the request" {
			t.Errorf("row %+v", r)
		}
	}
}

// TestReplicaAPI (issue 14): the runner's embedded replicas wear the
// chosen engine's face. Every turn is recorded with the replica's counts
// (the vLLM and SGLang faces report cached tokens), the run says which
// face it used, and the replicas' engine metrics are kept.
func TestReplicaAPI(t *testing.T) {
	for _, api := range []string{replica.APIVLLM, replica.APISGLang} {
		t.Run(api, func(t *testing.T) {
			spec := embeddedSpec(t, "llm-aware")
			spec.ReplicaAPI = api
			results, err := Run(context.Background(), spec)
			if err != nil {
				t.Fatal(err)
			}
			f, rows := readRun(t, results[0])
			if f.Errors != 0 || len(rows) != expectedTurns(t, spec.Profile, 1) {
				t.Fatalf("%d rows, %d errors", len(rows), f.Errors)
			}
			cached := 0
			for _, r := range rows {
				if r.PromptN+r.CacheN == 0 || r.PredictedN == 0 {
					t.Errorf("%s turn %d: no counts recorded: %+v", r.Conversation, r.Turn, r)
				}
				cached += r.CacheN
			}
			if cached == 0 {
				t.Error("no turn reused a cache: cached tokens not reported")
			}
			if got := f.Config["replica"].(map[string]any)["api"]; got != api {
				t.Errorf("recorded api %v, want %s", got, api)
			}
			for name, m := range f.ReplicaMetrics {
				found := false
				for k := range m {
					found = found || strings.HasPrefix(k, api+":")
				}
				if !found {
					t.Errorf("replica %s: no %s:* metrics kept: %v", name, api, m)
				}
			}
		})
	}
}

// TestReplicaAPIScraped (issue 14): with --replica-api, the embedded
// router's scraper reads the replicas' engine metric names (signals.engine
// follows the face), so a policy sees their queues.
func TestReplicaAPIScraped(t *testing.T) {
	spec := embeddedSpec(t, "llm-aware")
	spec.ReplicaAPI = replica.APIVLLM
	e := newEmbedded(&spec, http.DefaultClient)
	url, _, err := e.start(context.Background(), "llm-aware")
	if err != nil {
		t.Fatal(err)
	}
	defer e.stop(context.Background(), false)
	if e.cfg.Signals.Engine != replica.APIVLLM {
		t.Fatalf("router signals.engine %q, want vllm", e.cfg.Signals.Engine)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		known := 0
		for _, r := range e.rt.Table().Status().Replicas {
			if r.Reported.HasQueue {
				known++
			}
		}
		if known == spec.Replicas {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s, %d of %d replicas' queues known to the router at %s", known, spec.Replicas, url)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
