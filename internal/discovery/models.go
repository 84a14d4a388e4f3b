package discovery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/llm-ring/llm-ring/internal/engine"
	"github.com/llm-ring/llm-ring/internal/replicaset"
)

// Bounds of one poll of a replica's model list, where ModelPollOptions
// leaves them zero.
const (
	// DefaultModelPollTimeout bounds one poll, connection to last byte.
	// A poll that outlasts the refresh interval delays that replica's
	// next one (one in flight per replica), never another's.
	DefaultModelPollTimeout = 5 * time.Second
	// DefaultModelPollMaxBytes bounds one answer: a vLLM list entry is
	// about 300 bytes, so this holds thousands of adapters.
	DefaultModelPollMaxBytes = 1 << 20
	// DefaultModelPollConcurrency bounds the polls in flight at once.
	DefaultModelPollConcurrency = 8
)

// ModelPollOptions configure a ModelPoller.
type ModelPollOptions struct {
	// Refresh is the interval between two polls of one replica (> 0).
	Refresh time.Duration
	// Timeout bounds one poll; 0: DefaultModelPollTimeout.
	Timeout time.Duration
	// MaxBytes bounds one answer; 0: DefaultModelPollMaxBytes.
	MaxBytes int64
	// Concurrency bounds the polls in flight; 0: DefaultModelPollConcurrency.
	Concurrency int
	// Engine is the engine of a replica that names none (package engine's
	// presets): its ModelsPath is polled, read as its ModelsFormat.
	Engine string
	// Client makes the requests; nil: a client of its own.
	Client *http.Client
	// Logger receives one line per change of a replica's model list or of
	// its poll's state (failing, recovered); nil discards them.
	Logger *slog.Logger
}

// ModelPoller decorates a Source with each replica's models, polled from
// the replica itself (discovery.model_source replicas; issue 23).
//
// It publishes the wrapped source's sets with Replica.Models filled in. A
// replica that joins is polled at once and held back from the published
// set until that poll ends (or for at most two Refresh intervals, when it
// is slow or waits for a slot), so that it does not serve as a replica of
// unknown models for the milliseconds its answer takes; then it is polled
// every Refresh. Its models are nil (unknown: it serves anything) until a
// poll succeeds, then the last list it answered, kept while later polls
// fail. A replica whose source already gave its models (a static replica
// that lists them) is not polled nor held. One that leaves is forgotten at
// once. A new set is published when the wrapped source publishes one and
// whenever a replica's list changes, never twice the same set.
//
// Concurrency: the wrapped source's update callback only stores its set
// (under a mutex) and signals; polls run in goroutines of their own, at
// most Concurrency at once, each bounded by Timeout and MaxBytes; what is
// known of each replica belongs to Run's goroutine, which alone calls
// update. A slow update delays the next publication, never the wrapped
// source.
type ModelPoller struct {
	src Source
	o   ModelPollOptions
	log *slog.Logger
}

var _ Source = (*ModelPoller)(nil)

// NewModelPoller checks o and wraps src.
func NewModelPoller(src Source, o ModelPollOptions) (*ModelPoller, error) {
	if src == nil {
		return nil, errors.New("model discovery: no source to decorate")
	}
	if o.Refresh <= 0 {
		return nil, fmt.Errorf("model discovery: refresh must be > 0, got %v", o.Refresh)
	}
	if o.Timeout < 0 || o.MaxBytes < 0 || o.Concurrency < 0 {
		return nil, errors.New("model discovery: timeout, max bytes and concurrency must not be negative")
	}
	if _, err := engine.PresetOf(o.Engine); err != nil {
		return nil, fmt.Errorf("model discovery: %w", err)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultModelPollTimeout
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultModelPollMaxBytes
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultModelPollConcurrency
	}
	if o.Client == nil {
		o.Client = &http.Client{Transport: &http.Transport{
			Proxy:               nil, // replicas are reached directly
			DialContext:         (&net.Dialer{Timeout: o.Timeout, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 1, // one idle connection per replica
			IdleConnTimeout:     2 * o.Refresh,
		}}
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &ModelPoller{src: src, o: o, log: log.With("source", "models")}, nil
}

// pollJob is one poll of one replica.
type pollJob struct {
	name, url string
	gen       uint64 // the replica's entry it belongs to (a stale answer is dropped)
	preset    engine.Preset
}

// pollResult is a poll's outcome.
type pollResult struct {
	name   string
	gen    uint64
	models []replicaset.Model
	err    error
}

// Run runs the wrapped source and the polls until ctx is done or the
// wrapped source returns (its error is Run's).
func (p *ModelPoller) Run(ctx context.Context, update func([]replicaset.Replica)) error {
	ctx, cancel := context.WithCancel(ctx)
	var polls sync.WaitGroup
	srcDone := make(chan error, 1)
	srcRunning := true
	defer func() {
		cancel()
		if srcRunning {
			<-srcDone
		}
		polls.Wait()
	}()

	// The wrapped source's callback only stores its set and signals: it
	// never waits for a poll or for update.
	var mu sync.Mutex
	var latest []replicaset.Replica
	changed := make(chan struct{}, 1)
	go func() {
		srcDone <- p.src.Run(ctx, func(rs []replicaset.Replica) {
			mu.Lock()
			latest = slices.Clone(rs)
			mu.Unlock()
			select {
			case changed <- struct{}{}:
			default:
			}
		})
	}()

	results := make(chan pollResult)
	sem := make(chan struct{}, p.o.Concurrency)
	start := func(j pollJob) {
		polls.Add(1)
		go func() {
			defer polls.Done()
			r := p.runJob(ctx, sem, j)
			select {
			case results <- r:
			case <-ctx.Done():
			}
		}()
	}
	tick := time.NewTicker(p.o.Refresh)
	defer tick.Stop()
	st := newModelState(p.o.Engine)
	var last []replicaset.Replica
	published := false
	for {
		publish := false
		select {
		case <-ctx.Done():
			return nil
		case err := <-srcDone:
			srcRunning = false
			return err
		case <-changed:
			mu.Lock()
			rs := latest
			mu.Unlock()
			st.setMembers(rs)
			publish = true
		case <-tick.C:
			publish = st.tick()
		case r := <-results:
			publish = st.apply(r, p.log)
		}
		for _, j := range st.due(p.log) {
			start(j)
		}
		if cur := st.decorated(); publish && (!published || !slices.EqualFunc(cur, last, replicaset.Equal)) {
			last, published = cur, true
			update(slices.Clone(cur)) // the consumer may keep or change it
		}
	}
}

// runJob waits for a slot, then polls.
func (p *ModelPoller) runJob(ctx context.Context, sem chan struct{}, j pollJob) pollResult {
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		return pollResult{name: j.name, gen: j.gen, err: ctx.Err()}
	}
	defer func() { <-sem }()
	pctx, cancel := context.WithTimeout(ctx, p.o.Timeout)
	defer cancel()
	models, err := p.fetch(pctx, j)
	return pollResult{name: j.name, gen: j.gen, models: models, err: err}
}

// fetch asks one replica for its models.
func (p *ModelPoller) fetch(ctx context.Context, j pollJob) ([]replicaset.Model, error) {
	url := strings.TrimSuffix(j.url, "/") + j.preset.ModelsPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := p.o.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, p.o.MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	if int64(len(body)) > p.o.MaxBytes {
		return nil, fmt.Errorf("GET %s: answer over %d bytes", url, p.o.MaxBytes)
	}
	models, err := engine.ParseModels(j.preset.ModelsFormat, body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return models, nil
}

// modelState is what the poller knows of each member, owned by Run's
// goroutine.
type modelState struct {
	members []replicaset.Replica // the wrapped source's set, as published
	known   map[string]*replicaModels
	gen     uint64 // the last entry generation handed out
	engine  string // of a replica that names none
}

// replicaModels is what is known of one polled replica.
type replicaModels struct {
	url, engine string
	gen         uint64
	models      []replicaset.Model // nil: unknown (no poll has succeeded)
	failing     bool               // the last poll failed (logged when it began)
	inflight    bool
	due         bool // to poll at the next chance
	pending     bool // joined, not published until its first poll ends (or a full Refresh)
	sawTick     bool // pending through one tick already
}

func newModelState(defaultEngine string) *modelState {
	return &modelState{known: map[string]*replicaModels{}, engine: defaultEngine}
}

// setMembers takes the wrapped source's new set: a replica that joined, or
// whose URL or engine changed, is polled at once (its answer to an earlier
// poll is dropped); one that left, or whose source now gives its models, is
// forgotten.
func (s *modelState) setMembers(rs []replicaset.Replica) {
	s.members = rs
	keep := make(map[string]bool, len(rs))
	for _, r := range rs {
		if r.Models != nil {
			continue
		}
		keep[r.Name] = true
		eng := r.Engine
		if eng == "" {
			eng = s.engine
		}
		e := s.known[r.Name]
		if e == nil {
			e = &replicaModels{pending: true}
			s.known[r.Name] = e
		}
		if e.gen == 0 || e.url != r.URL || e.engine != eng {
			s.gen++
			e.url, e.engine, e.gen, e.inflight, e.due = r.URL, eng, s.gen, false, true
		}
	}
	for name := range s.known {
		if !keep[name] {
			delete(s.known, name)
		}
	}
}

// tick makes every polled replica due, and releases a joined replica
// whose first poll has not ended for a whole interval (a slow replica, or a
// wait for a slot): it reports whether one was.
func (s *modelState) tick() bool {
	released := false
	for _, e := range s.known {
		e.due = true
		if e.pending && e.sawTick {
			e.pending, released = false, true
		}
		e.sawTick = true
	}
	return released
}

// due returns the polls to start now (each replica at most one in flight),
// in the order of the set.
func (s *modelState) due(log *slog.Logger) []pollJob {
	var jobs []pollJob
	for _, r := range s.members {
		e := s.known[r.Name]
		if e == nil || !e.due || e.inflight {
			continue
		}
		e.due = false
		preset, err := engine.PresetOf(e.engine)
		if err != nil {
			s.apply(pollResult{name: r.Name, gen: e.gen, err: err}, log)
			continue
		}
		e.inflight = true
		jobs = append(jobs, pollJob{name: r.Name, url: e.url, gen: e.gen, preset: preset})
	}
	return jobs
}

// apply records a poll's outcome and reports whether the replica's models
// changed. A failure keeps the last known list; the first failure after a
// success (or at start) and the first success after failures are logged,
// the polls between are not.
func (s *modelState) apply(r pollResult, log *slog.Logger) bool {
	e := s.known[r.name]
	if e == nil || e.gen != r.gen {
		return false // the replica left, or moved, since the poll began
	}
	e.inflight = false
	joined := e.pending
	e.pending = false
	if r.err != nil {
		if !e.failing {
			e.failing = true
			log.Warn("replica_models_poll_failed", "replica", r.name, "url", e.url, "err", r.err,
				"kept", modelNames(e.models))
		}
		return joined
	}
	if e.failing {
		e.failing = false
		log.Info("replica_models_poll_recovered", "replica", r.name, "url", e.url)
	}
	if e.models != nil && slices.Equal(e.models, r.models) {
		return joined
	}
	e.models = r.models
	log.Info("replica_models_changed", "replica", r.name, "models", modelNames(r.models))
	return true
}

// decorated is the set to publish: the members, each with its models (the
// source's own, else the last polled list, else nil), less the joined
// ones still pending.
func (s *modelState) decorated() []replicaset.Replica {
	out := make([]replicaset.Replica, 0, len(s.members))
	for _, r := range s.members {
		e := s.known[r.Name]
		if r.Models == nil && e != nil {
			if e.pending {
				continue
			}
			if e.models != nil {
				r.Models = slices.Clone(e.models)
				// An engine that ignores the request's model serves
				// other names too (engine.Preset.AnyModel).
				pr, err := engine.PresetOf(e.engine)
				r.AnyModel = err == nil && pr.AnyModel
			}
		}
		out = append(out, r)
	}
	return out
}

// modelNames renders a list for a log line: "name" or "name<parent"; nil
// is "unknown".
func modelNames(ms []replicaset.Model) []string {
	if ms == nil {
		return []string{"unknown"}
	}
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Name
		if m.Parent != "" {
			out[i] += "<" + m.Parent
		}
	}
	return out
}
