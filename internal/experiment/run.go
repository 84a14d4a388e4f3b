package experiment

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/llm-ring/llm-ring/internal/record"
	"github.com/llm-ring/llm-ring/internal/traffic"
)

// ErrInterrupted is returned (wrapped) by Run when ctx was cancelled: the run
// in progress was written with the rows recorded so far.
var ErrInterrupted = errors.New("interrupted")

// RunFile is the run JSON the live runner writes: record.Run, which the
// analysis reads, and what only a live run knows.
type RunFile struct {
	record.Run
	// Interrupted: the run was stopped (Ctrl-C) before its traffic ended;
	// the CSV holds the requests recorded until then.
	Interrupted bool `json:"interrupted"`
	// ExpectedRequests is the sum of the conversations' turns: an upper
	// bound, as a conversation ends early when its next turn would not fit
	// the context budget, or after a failed turn.
	ExpectedRequests int `json:"expected_requests"`
	// ConversationsCut counts conversations ended early by the context budget.
	ConversationsCut int `json:"conversations_cut"`
	// ScaleError says why the scale-up failed, if it did.
	ScaleError string `json:"scale_error,omitempty"`
	// ReplicaEvents are the profile's replica events as applied: when each
	// started and when it took effect (model ms), or why it failed.
	ReplicaEvents []AppliedEvent `json:"replica_events,omitempty"`
	// MetricsError says why the router's metrics could not be read, if so.
	MetricsError string `json:"metrics_error,omitempty"`
	// ReplicaMetrics holds each embedded replica's final /metrics
	// (llamacpp:* and llm_ring_sim_* series, such as the RAM cache's
	// evictions), by replica name.
	ReplicaMetrics map[string]map[string]float64 `json:"replica_metrics,omitempty"`
}

// AppliedEvent is a profile's replica event as the live runner applied it.
type AppliedEvent struct {
	traffic.ReplicaEvent
	// StartMS is when the runner started it; DoneMS when it took effect (a
	// returned or added replica is then healthy and in the router's set).
	StartMS float64 `json:"start_ms"`
	DoneMS  float64 `json:"done_ms,omitempty"`
	Error   string  `json:"error,omitempty"`
}

// Result is one run, finished or interrupted.
type Result struct {
	File     RunFile
	CSVPath  string
	JSONPath string
}

// Run executes the spec's runs in Plan order and writes each run's CSV and
// JSON into spec.OutDir. It refuses to start when a run's files already
// exist (unless spec.Force). It stops at the first run that fails; when ctx
// is cancelled it writes the run in progress and returns ErrInterrupted.
func Run(ctx context.Context, spec Spec) ([]Result, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	mode := spec.Mode()
	plan := Plan(spec.Policies, spec.Seeds, spec.Alternate, mode)
	if err := os.MkdirAll(spec.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("output folder: %w", err)
	}
	if !spec.Force {
		for _, pl := range plan {
			for _, ext := range []string{".csv", ".json"} {
				path := filepath.Join(spec.OutDir, pl.RunID+ext)
				if _, err := os.Stat(path); err == nil {
					return nil, fmt.Errorf("%s already exists: a run %s was recorded there before "+
						"(use another output folder, remove it, or force overwriting)", path, pl.RunID)
				} else if !errors.Is(err, fs.ErrNotExist) {
					return nil, err
				}
			}
		}
	}
	client := newClient(&spec)
	defer client.CloseIdleConnections()
	var tgt target
	if mode == ModeExternal {
		x := &external{spec: &spec, client: client}
		if spec.Prepare {
			if spec.Progress != nil {
				fmt.Fprintf(spec.Progress, "[prepare] running %q, waiting for the extra replica, then %q\n", spec.ScaleCmd, spec.UnscaleCmd)
			}
			if err := x.prepare(ctx); err != nil {
				return nil, err
			}
		}
		tgt = x
	} else {
		tgt = newEmbedded(&spec, client)
	}
	convs := map[int64][]traffic.Conversation{}
	var results []Result
	for _, pl := range plan {
		cs, ok := convs[pl.Seed]
		if !ok && spec.Trace == nil && spec.Workload == nil {
			var err error
			if cs, err = traffic.Generate(spec.Profile, pl.Seed); err != nil {
				return results, err
			}
			convs[pl.Seed] = cs
		}
		sp := &spec
		if spec.Workload != nil {
			sp = spec.seedWorkload(pl.Seed)
		}
		res, err := runOne(ctx, sp, tgt, pl, cs, client)
		if res != nil {
			results = append(results, *res)
		}
		if err != nil {
			return results, err
		}
	}
	return results, nil
}

func newClient(spec *Spec) *http.Client {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: max(spec.Profile.Concurrency, 248) + 8, // a trace is open loop: many at once
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // SSE must arrive as sent
	}
	if spec.Mode() == ModeExternal {
		tr.Proxy = http.ProxyFromEnvironment
	}
	return &http.Client{Transport: tr}
}

// runOne runs one policy on one seed's conversations and writes its files.
func runOne(ctx context.Context, spec *Spec, tgt target, pl Planned, convs []traffic.Conversation,
	client *http.Client) (*Result, error) {
	r := &liveRun{ctx: ctx, spec: spec, tgt: tgt, pl: pl, client: client}
	var err error
	if r.urls, r.replicas, err = tgt.start(ctx, pl.Policy); err != nil {
		return nil, fmt.Errorf("run %s: %w", pl.RunID, err)
	}
	defer r.stop() // everything started must stop, whatever happens below
	before, err := scrapeAll(ctx, client, r.urls)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", pl.RunID, err)
	}
	r.newDriver(convs)
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	r.d.start = time.Now()
	scaleDone, eventsDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(scaleDone); r.scaleUp(runCtx) }()
	go func() { defer close(eventsDone); r.replicaEvents(runCtx) }()
	r.d.run(runCtx)
	end := time.Now()
	interrupted := ctx.Err() != nil
	cancelRun()
	<-scaleDone
	<-eventsDone

	file := r.runFile(end, interrupted)
	r.measure(&file, before)
	// Our own unused connections would hold up the router's shutdown.
	client.CloseIdleConnections()
	stopErr := r.stop()
	file.Config = r.config()
	rows := sortedRows(r.d.rows)
	file.Requests = len(rows)
	for i := range rows {
		if rows[i].Error != "" || rows[i].Status != http.StatusOK {
			file.Errors++
		}
	}
	res := &Result{
		File:     file,
		CSVPath:  filepath.Join(spec.OutDir, pl.RunID+".csv"),
		JSONPath: filepath.Join(spec.OutDir, pl.RunID+".json"),
	}
	if err := writeRun(res, rows); err != nil {
		return nil, fmt.Errorf("run %s: %w", pl.RunID, err)
	}
	r.summarize(res, end, interrupted)
	switch {
	case interrupted:
		return res, fmt.Errorf("%w: run %s stopped after %d requests; they are in %s", ErrInterrupted, pl.RunID, file.Requests, res.CSVPath)
	case r.scaleErr != nil:
		return res, fmt.Errorf("run %s: scale-up: %w", pl.RunID, r.scaleErr)
	case stopErr != nil:
		return res, fmt.Errorf("run %s: stop: %w", pl.RunID, stopErr)
	}
	return res, nil
}

// liveRun is one run in progress: its phases are runOne's steps. The scale
// and event goroutines write their fields; runOne reads them only after
// both have ended.
type liveRun struct {
	ctx      context.Context
	spec     *Spec
	tgt      target
	pl       Planned
	client   *http.Client
	urls     []string
	replicas int
	d        *driver
	prog     *progress
	expected int

	stopped, scaled         bool
	scaleAtMS, scaleReadyMS float64
	scaleName               string
	scaleErr                error
	applied                 []AppliedEvent
}

// stop stops what the run started, once; after an interruption it still
// gives the target two minutes.
func (r *liveRun) stop() error {
	if r.stopped {
		return nil
	}
	r.stopped = true
	sctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), 2*time.Minute)
	defer cancel()
	if r.ctx.Err() == nil {
		sctx = r.ctx
	}
	return r.tgt.stop(sctx, r.scaled)
}

// newDriver sets up the traffic driver and the progress line.
func (r *liveRun) newDriver(convs []traffic.Conversation) {
	spec := r.spec
	r.expected = len(spec.Trace)
	for i := range convs {
		r.expected += len(convs[i].Turns)
	}
	r.d = &driver{
		urls:    r.urls,
		client:  r.client,
		profile: spec.Profile,
		convs:   convs,
		speed:   spec.Speed,
		headers: !spec.NoHeaders && spec.Profile.Headers(),
		model:   spec.RequestModel,
		trace:   spec.Trace,
		names:   spec.names,
		speedup: spec.TraceSpeedup,
		base:    record.Request{RunID: r.pl.RunID, Policy: r.pl.Policy, Seed: r.pl.Seed},
	}
	r.prog = newProgress(spec.Progress, spec.Terminal, fmt.Sprintf("%s seed %d", r.pl.Policy, r.pl.Seed), r.expected)
	r.d.onRow = func(row *record.Request) {
		r.prog.add(row.Error != "" || row.Status != http.StatusOK)
		if spec.OnRequest != nil {
			spec.OnRequest(row)
		}
	}
}

// scaleUp adds a replica at --scale-at, if set, and records when it was
// ready.
func (r *liveRun) scaleUp(ctx context.Context) {
	d := r.d
	if r.spec.ScaleAt <= 0 || !sleep(ctx, d.wall(r.spec.ScaleAt.Seconds())) {
		return
	}
	r.scaled = true
	r.scaleAtMS = d.modelMS(time.Since(d.start))
	r.prog.note("scale-up: adding a replica at %.1f s", r.scaleAtMS/1000)
	name, err := r.tgt.scale(ctx)
	if err != nil {
		if ctx.Err() == nil {
			r.scaleErr = err
			r.prog.note("scale-up failed: %v", err)
		}
		return
	}
	r.scaleReadyMS, r.scaleName = d.modelMS(time.Since(d.start)), name
	r.prog.note("scale-up: %s ready and routed to at %.1f s", name, r.scaleReadyMS/1000)
}

// replicaEvents applies the profile's replica events at their times.
func (r *liveRun) replicaEvents(ctx context.Context) {
	e, ok := r.tgt.(*embedded)
	if !ok {
		return // Validate refuses replica events with an external router
	}
	d := r.d
	for _, ev := range r.spec.Profile.ReplicaEvents {
		if !sleep(ctx, time.Until(d.start.Add(d.wall(ev.AtS)))) {
			return
		}
		a := AppliedEvent{ReplicaEvent: ev, StartMS: d.modelMS(time.Since(d.start))}
		r.prog.note("replica event: %s llm-%d at %.1f s", ev.Action, ev.Replica, a.StartMS/1000)
		if err := e.event(ctx, ev); err != nil {
			if ctx.Err() != nil {
				return
			}
			a.Error = err.Error()
			r.prog.note("replica event %s llm-%d failed: %v", ev.Action, ev.Replica, err)
		} else {
			a.DoneMS = d.modelMS(time.Since(d.start))
		}
		r.applied = append(r.applied, a)
	}
}

// runFile is the run's record without its metrics and configuration.
func (r *liveRun) runFile(end time.Time, interrupted bool) RunFile {
	d, pl := r.d, r.pl
	file := RunFile{
		Run: record.Run{
			RunID:        pl.RunID,
			Policy:       pl.Policy,
			Seed:         pl.Seed,
			Profile:      r.spec.TrafficName(),
			Mode:         r.spec.Mode(),
			Replicas:     r.replicas,
			Order:        pl.Order,
			Started:      d.start.UTC().Format(time.RFC3339),
			Finished:     end.UTC().Format(time.RFC3339),
			DurationMS:   d.modelMS(end.Sub(d.start)),
			ScaleAtMS:    r.scaleAtMS,
			ScaleReadyMS: r.scaleReadyMS,
			ScaleReplica: r.scaleName,
		},
		Interrupted:      interrupted,
		ReplicaEvents:    r.applied,
		ExpectedRequests: r.expected,
		ConversationsCut: int(d.cut.Load()),
	}
	if r.scaleErr != nil {
		file.ScaleError = r.scaleErr.Error()
	}
	return file
}

// measure adds the router's metrics over the run (once they have settled)
// and, embedded, the replicas' own.
func (r *liveRun) measure(file *RunFile, before map[string]sample) {
	answered := 0
	for i := range r.d.rows {
		if r.d.rows[i].Status != 0 {
			answered++
		}
	}
	mctx, mcancel := context.WithTimeout(context.WithoutCancel(r.ctx), 30*time.Second)
	defer mcancel()
	after, err := settledMetrics(mctx, r.client, r.urls, before, answered)
	if err != nil {
		file.MetricsError = "router: " + err.Error()
		r.prog.note("router %v", err)
	} else {
		file.Metrics = metricsDelta(before, after)
	}
	r.spec.recordIdeal(file)
	if e, ok := r.tgt.(*embedded); ok {
		rm, err := e.replicaMetrics(mctx)
		if err != nil {
			file.MetricsError = strings.TrimPrefix(file.MetricsError+"; ", "; ") + err.Error()
			r.prog.note("%v", err)
		}
		file.ReplicaMetrics = rm
	}
}

// config is the run's configuration as its JSON records it.
func (r *liveRun) config() map[string]any {
	spec := r.spec
	cfg := r.tgt.describe()
	cfg["speed"] = spec.Speed
	cfg["headers"] = !spec.NoHeaders && spec.Profile.Headers() && spec.Trace == nil
	cfg["scale_at_s"] = spec.ScaleAt.Seconds()
	switch {
	case spec.Workload != nil:
		cfg["workload"] = map[string]any{"workload": spec.Workload, "stages": spec.Stages, "requests": len(spec.Trace)}
	case spec.Trace != nil:
		cfg["trace"] = map[string]any{"name": spec.TraceName, "requests": len(spec.Trace), "speedup": spec.TraceSpeedup}
	default:
		cfg["profile"] = toMap(spec.Profile)
	}
	cfg["invocation"] = map[string]any{"policies": spec.Policies, "seeds": spec.Seeds, "alternate": spec.Alternate}
	return cfg
}

// sortedRows orders the rows by start, conversation and turn.
func sortedRows(rows []record.Request) []record.Request {
	slices.SortFunc(rows, func(a, b record.Request) int {
		return cmp.Or(cmp.Compare(a.StartMS, b.StartMS), strings.Compare(a.Conversation, b.Conversation), cmp.Compare(a.Turn, b.Turn))
	})
	return rows
}

// summarize ends the progress line with the run's summary.
func (r *liveRun) summarize(res *Result, end time.Time, interrupted bool) {
	file, spec := &res.File, r.spec
	summary := fmt.Sprintf("%d requests (%d expected at most; %d conversations ended early at the context limit), %d errors, %.1f s of model time in %s → %s",
		file.Requests, r.expected, file.ConversationsCut, file.Errors, file.DurationMS/1000, clock(end.Sub(r.d.start)), res.CSVPath)
	if spec.ScaleAt > 0 && !r.scaled && !interrupted {
		summary += fmt.Sprintf("; no scale-up: the traffic ended before %.1f s", spec.ScaleAt.Seconds())
	}
	r.prog.finish(summary)
}

// writeRun writes the run's CSV, then its JSON.
func writeRun(res *Result, rows []record.Request) error {
	f, err := os.Create(res.CSVPath)
	if err != nil {
		return err
	}
	w, err := record.NewWriter(f)
	if err == nil {
		for i := range rows {
			if err = w.Write(&rows[i]); err != nil {
				break
			}
		}
	}
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", res.CSVPath, err)
	}
	b, err := json.MarshalIndent(&res.File, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(res.JSONPath, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", res.JSONPath, err)
	}
	return nil
}

// settledMetrics reads the router's metrics once it has counted the run's
// answered requests: the router counts a request just after the answer's
// last byte, so a scrape right after the last answer can miss it. It gives
// up waiting after settleTimeout and returns what it read.
func settledMetrics(ctx context.Context, client *http.Client, urls []string, before map[string]sample, answered int) (map[string]sample, error) {
	deadline := time.Now().Add(settleTimeout)
	for {
		after, err := scrapeAll(ctx, client, urls)
		if err != nil {
			return nil, err
		}
		counted := 0.0
		for k, v := range metricsDelta(before, after) {
			if strings.HasPrefix(k, MetricsPrefix+"requests_total{") || strings.HasPrefix(k, MetricsPrefix+"rejected_total{") {
				counted += v
			}
		}
		if int(counted) >= answered || time.Now().After(deadline) || !sleep(ctx, 5*time.Millisecond) {
			return after, nil
		}
	}
}

// settleTimeout bounds settledMetrics' wait.
const settleTimeout = 5 * time.Second
