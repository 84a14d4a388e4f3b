package signals

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// Target is one replica to scrape: its name (the label of its metrics and
// the name the Sink is told) and its base URL; the scrape URL is the base
// URL followed by Config.Path. Mapping, when set, replaces Config.Mapping
// for this target (a replica of another engine than the rest).
type Target struct {
	Name    string
	URL     string
	Mapping *Mapping
}

// mapping is the target's mapping: its own, or the Config's.
func (t Target) mapping(c Config) Mapping {
	if t.Mapping != nil {
		return *t.Mapping
	}
	return c.Mapping
}

// Sink receives every scrape's outcome.
type Sink interface {
	// Report is called from the scraper's goroutines, one per target, so it
	// must be safe for concurrent use, and it must not block (a slow Sink
	// delays that replica's next scrape, never routing). ok=false means the
	// scrape failed (timeout, refused connection, HTTP error, oversized or
	// unparsable body): the replica's signals are unknown, s is zero. at is
	// when the answer (or the failure) arrived.
	Report(name string, s Sample, ok bool, at time.Time)
}

// Defaults of Config.
const (
	DefaultPath         = "/metrics"
	DefaultMaxBodyBytes = 4 << 20
)

// Config configures a Scraper.
type Config struct {
	// Interval between two scrapes of one replica (> 0).
	Interval time.Duration
	// Timeout of one scrape, connection to last byte (> 0).
	Timeout time.Duration
	// Path appended to each target's URL ("": DefaultPath).
	Path string
	// Mapping from metric families to signals.
	Mapping Mapping
	// MaxBodyBytes bounds the body read from a replica (0:
	// DefaultMaxBodyBytes); a longer body fails the scrape.
	MaxBodyBytes int64
	// Client does the requests (nil: a client of the Scraper's own, without
	// proxy, keeping connections to each replica alive).
	Client *http.Client
}

// Validate reports every invalid setting, each naming its key as the
// router's config spells it (signals.interval, signals.mapping.kv_scale…).
func (c Config) Validate() error {
	var errs []error
	if c.Interval <= 0 {
		errs = append(errs, fmt.Errorf("signals.interval: must be > 0, got %v", c.Interval))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("signals.timeout: must be > 0, got %v", c.Timeout))
	}
	if c.Path != "" && !strings.HasPrefix(c.Path, "/") {
		errs = append(errs, fmt.Errorf("signals.path: must start with /, got %q", c.Path))
	}
	if c.MaxBodyBytes < 0 {
		errs = append(errs, fmt.Errorf("signals.max_body_bytes: must not be negative, got %d", c.MaxBodyBytes))
	}
	if err := c.Mapping.Validate("signals.mapping"); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Scraper polls each target's /metrics on an interval, one goroutine per
// target, and reports every outcome to its Sink. SetTargets may be called
// at any time, before or during Run.
type Scraper struct {
	cfg    Config
	sink   Sink
	log    *slog.Logger
	client *http.Client

	errors   *prometheus.CounterVec
	duration prometheus.Histogram

	mu      sync.Mutex
	targets []Target         // desired, as last set
	loops   map[string]*loop // running loops, by target name
	runCtx  context.Context  // nil unless Run is running
	running bool
	wg      sync.WaitGroup
}

// New returns a Scraper after validating cfg. Its metrics are registered
// with reg (nil: not registered); log receives one line when a replica's
// scrapes start failing and one when they recover (nil: none).
func New(cfg Config, sink Sink, reg prometheus.Registerer, log *slog.Logger) (*Scraper, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if sink == nil {
		return nil, errors.New("signals: nil Sink")
	}
	if cfg.Path == "" {
		cfg.Path = DefaultPath
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	cfg.Mapping = cfg.Mapping.clone()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	client := cfg.Client
	if client == nil {
		client = &http.Client{Transport: &http.Transport{
			Proxy:               nil, // replicas are reached directly
			DialContext:         (&net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        0, // no global cap: one idle connection per replica
			MaxIdleConnsPerHost: 1,
			IdleConnTimeout:     90 * time.Second,
		}}
	}
	s := &Scraper{
		cfg:    cfg,
		sink:   sink,
		log:    log,
		client: client,
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm_ring_scrape_errors_total",
			Help: "Failed scrapes of a replica's /metrics (timeout, HTTP error, oversized or unparsable body).",
		}, []string{"replica"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "llm_ring_scrape_duration_seconds",
			Help:    "Duration of one scrape of a replica's /metrics, request to parsed sample, failures included.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}),
		loops: map[string]*loop{},
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{s.errors, s.duration, (*stateCollector)(s)} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("signals: register metrics: %w", err)
			}
		}
	}
	return s, nil
}

// SetTargets makes ts the set of replicas to scrape: loops of targets that
// left (or whose URL changed) stop, loops of new targets start (while Run
// runs). Once SetTargets returns, a removed target is neither reported nor
// counted again, and its metric series are deleted, so the label set is the
// current replicas. Later duplicates of a name are ignored.
func (s *Scraper) SetTargets(ts []Target) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[string]bool, len(ts))
	s.targets = s.targets[:0]
	for _, t := range ts {
		if seen[t.Name] {
			s.log.Warn("signals: duplicate target ignored", "replica", t.Name, "url", t.URL)
			continue
		}
		seen[t.Name] = true
		s.targets = append(s.targets, t)
	}
	s.reconcileLocked()
}

// reconcileLocked starts and stops loops so that they match s.targets.
func (s *Scraper) reconcileLocked() {
	want := make(map[string]Target, len(s.targets))
	for _, t := range s.targets {
		want[t.Name] = t
	}
	for name, l := range s.loops {
		if t, ok := want[name]; !ok || t.URL != l.target.URL || !reflect.DeepEqual(t.Mapping, l.target.Mapping) {
			l.stop()
			delete(s.loops, name)
			s.errors.DeleteLabelValues(name)
		}
	}
	if s.runCtx == nil {
		return
	}
	for _, t := range s.targets {
		if _, ok := s.loops[t.Name]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(s.runCtx)
		l := &loop{s: s, target: t, url: strings.TrimRight(t.URL, "/") + s.cfg.Path, cancel: cancel,
			parser: newParser()}
		s.loops[t.Name] = l
		s.errors.WithLabelValues(t.Name) // a series from 0, so that rate() sees the first error
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			l.run(ctx)
		}()
	}
}

// Run scrapes the targets until ctx is done, then stops every loop, waits
// for them and returns nil. Only one Run may run at a time.
func (s *Scraper) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.running {
		s.mu.Unlock()
		return errors.New("signals: Run is already running")
	}
	s.running = true
	s.runCtx = ctx
	s.reconcileLocked()
	s.mu.Unlock()

	<-ctx.Done()

	s.mu.Lock()
	for name, l := range s.loops {
		l.stop()
		delete(s.loops, name)
	}
	s.runCtx = nil
	s.mu.Unlock()
	s.wg.Wait()
	s.mu.Lock()
	s.running = false
	s.mu.Unlock()
	return nil
}

// Offset is the delay before a target's first scrape: a hash of its name
// modulo the interval, so that many replicas are not scraped in lockstep
// and a replica keeps its phase across restarts of the router.
func Offset(name string, interval time.Duration) time.Duration {
	if interval <= 0 {
		return 0
	}
	return time.Duration(xxhash.Sum64String(name) % uint64(interval))
}

// loop scrapes one target.
type loop struct {
	s      *Scraper
	target Target
	url    string
	cancel context.CancelFunc
	parser expfmt.TextParser // used by this loop's goroutine only
	// The slot count from the engine's JSON endpoint (props.go), used by
	// this loop's goroutine only.
	nSlots    int
	propsDone bool

	mu          sync.Mutex // guards the fields below (read by the collector)
	stopped     bool       // set when the loop is stopped: report nothing more
	state       state
	lastSuccess time.Time
}

// state is the outcome of a loop's last scrape.
type state int8

const (
	stateNone state = iota // no scrape finished yet
	stateUp
	stateDown
)

func (l *loop) run(ctx context.Context) {
	t := time.NewTimer(Offset(l.target.Name, l.s.cfg.Interval))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	tick := time.NewTicker(l.s.cfg.Interval)
	defer tick.Stop()
	for {
		l.scrape(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// errTooLarge fails a scrape whose body is longer than MaxBodyBytes.
var errTooLarge = errors.New("body too large")

func (l *loop) scrape(ctx context.Context) {
	start := time.Now()
	sample, err := l.fetch(ctx)
	at := time.Now()
	// Under l.mu, so that once stop has returned nothing more is reported
	// or counted for this target (Report must not block).
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	l.s.duration.Observe(at.Sub(start).Seconds())
	prev := l.state
	if err != nil {
		l.state = stateDown
		l.s.errors.WithLabelValues(l.target.Name).Inc()
		// One log line per change of state, not one per interval.
		if prev != stateDown {
			l.s.log.Warn("signals: scrape failed; signals unknown", "replica", l.target.Name, "url", l.url, "err", err)
		}
		l.s.sink.Report(l.target.Name, Sample{}, false, at)
		return
	}
	l.state, l.lastSuccess = stateUp, at
	sample.Slots = l.slots(ctx, l.target.mapping(l.s.cfg).Props)
	if prev == stateDown {
		l.s.log.Info("signals: scrape recovered", "replica", l.target.Name, "url", l.url)
	}
	l.s.sink.Report(l.target.Name, sample, true, at)
}

// stop ends the loop: its goroutine exits soon (an in-flight request is
// cancelled), and from now on it reports nothing.
func (l *loop) stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
	l.cancel()
}

func (l *loop) fetch(ctx context.Context) (Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, l.s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.url, nil)
	if err != nil {
		return Sample{}, err
	}
	// The text format: what all three engines serve by default.
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := l.s.client.Do(req)
	if err != nil {
		return Sample{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.CopyN(io.Discard, resp.Body, 4<<10) // let a short error body keep the connection
		return Sample{}, fmt.Errorf("HTTP %s", resp.Status)
	}
	body := &cappedReader{r: resp.Body, left: l.s.cfg.MaxBodyBytes}
	sample, err := parse(&l.parser, body, l.target.mapping(l.s.cfg))
	if body.over {
		return Sample{}, fmt.Errorf("%w: more than %d bytes", errTooLarge, l.s.cfg.MaxBodyBytes)
	}
	return sample, err
}

// cappedReader reads at most left bytes of r and fails with errTooLarge if
// r has more, so that a truncated body is never parsed as a whole one.
type cappedReader struct {
	r    io.Reader
	left int64
	over bool
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		// Probe one byte: at exactly the cap, EOF is fine.
		var one [1]byte
		n, err := c.r.Read(one[:])
		if n > 0 {
			c.over = true
			return 0, errTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// stateCollector exports, per current replica, whether its last scrape
// succeeded and how long ago its last success was; computed at collection
// time from the loops, so it costs nothing between Prometheus scrapes.
type stateCollector Scraper

var (
	descUp  = prometheus.NewDesc("llm_ring_scrape_up", "1 if the last scrape of the replica's /metrics succeeded, else 0.", []string{"replica"}, nil)
	descAge = prometheus.NewDesc("llm_ring_scrape_last_success_age_seconds", "Seconds since the last successful scrape of the replica's /metrics (absent until the first).", []string{"replica"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descUp
	ch <- descAge
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := (*Scraper)(c)
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, l := range s.loops {
		l.mu.Lock()
		st, last := l.state, l.lastSuccess
		l.mu.Unlock()
		v := 0.0
		if st == stateUp {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, v, name)
		if !last.IsZero() {
			ch <- prometheus.MustNewConstMetric(descAge, prometheus.GaugeValue, now.Sub(last).Seconds(), name)
		}
	}
}
