// Package replica is the HTTP face of a simulated llama.cpp server: the same
// endpoints, JSON shapes, streaming and metrics as llama.cpp's server, with
// the work done by internal/model instead of a model on a GPU or CPU.
//
// A Host runs one model time line (a model.Group) in a goroutine and serves
// any number of replicas on it; with Options.SharedCPU they share one compute
// budget, as replicas on one laptop do. Model time runs Options.Speed times
// faster than the wall clock; every timing a replica reports is in model time.
//
//	h, _ := replica.NewHost(replica.Options{Model: model.DefaultConfig(), Speed: 50})
//	defer h.Close()
//	r, _ := h.Add("llm-0", 0)           // an http.Handler
//	_ = replica.Serve(ctx, ln, r)
package replica

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/llm-ring/llm-ring/internal/model"
)

// DefaultAlias is the model name the replicas report.
const DefaultAlias = "qwen2.5-0.5b-instruct-sim"

// Options configures a Host.
type Options struct {
	// Model is the configuration of every replica of the host.
	Model model.Config
	// SharedCPU makes the replicas share one compute budget: while k of
	// them are busy, each one's steps take k times longer.
	SharedCPU bool
	// Speed is how many times faster than the wall clock model time runs
	// (0 means 1). Timings in answers stay in model time.
	Speed float64
	// Clock is the wall clock (nil: the system clock).
	Clock Clock
	// Alias is the model name in answers ("" means DefaultAlias).
	Alias string
	// Logger receives one line per request (nil: none).
	Logger *slog.Logger
	// API is the engine whose HTTP face the replicas wear: APILlamaCpp
	// (""), APIVLLM or APISGLang. The model behind them is the same.
	API string
	// APIKeys, when not empty, are the keys a request must present
	// (Authorization: Bearer KEY, or X-Api-Key), as llama.cpp's --api-key
	// and vLLM's --api-key ask; without one the answer is 401.
	APIKeys []string
	// CacheReport adds usage.prompt_tokens_details.cached_tokens to the
	// OpenAI-compatible answers of the vLLM and SGLang faces (vLLM's
	// --enable-prompt-tokens-details, SGLang's --enable-cache-report).
	// llama.cpp always reports it.
	CacheReport bool
	// Models are the base models served (vLLM's --served-model-name with
	// several names; `llm-ring replica --models a,b`), listed by GET
	// /v1/models; a request naming another model gets 404. nil: any
	// model name is accepted and GET /v1/models lists Alias (as before).
	Models []string
	// Adapters are the LoRA adapters served (vLLM's --lora-modules): a
	// request naming one runs with it (model.Request.Adapter), taking an
	// adapter slot when Model.MaxLoras > 0.
	Adapters []Adapter
}

// The engine faces of Options.API.
const (
	APILlamaCpp = "llamacpp"
	APIVLLM     = "vllm"
	APISGLang   = "sglang"
)

// APIs lists the engine faces a replica can wear.
var APIs = []string{APILlamaCpp, APIVLLM, APISGLang}

// ErrClosed is returned for requests cut short by Host.Close.
var ErrClosed = errors.New("replica host closed")

// Host runs a model time line and the replicas on it.
type Host struct {
	clock Clock
	speed float64
	alias string
	log   *slog.Logger
	start time.Time

	modelConfig model.Config
	api         string
	apiKeys     []string
	cacheReport bool
	vocab       *vocab
	served      served

	mu       sync.Mutex
	group    *model.Group
	last     time.Duration // last model time read (model time never goes back)
	replicas []*Replica
	waiters  map[wkey]*waiter
	evs      []model.Event
	closed   bool

	wake chan struct{}
	quit chan struct{}
	done chan struct{}
}

type wkey struct {
	member int
	id     model.ID
}

// NewHost validates opts and starts the host's driver goroutine. Close
// stops it.
func NewHost(opts Options) (*Host, error) {
	if err := opts.Model.Validate(); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	speed := opts.Speed
	if speed == 0 {
		speed = 1
	}
	if !(speed > 0) || math.IsInf(speed, 0) {
		return nil, fmt.Errorf("speed: must be a positive number, got %v", opts.Speed)
	}
	switch opts.API {
	case "", APILlamaCpp, APIVLLM, APISGLang:
	default:
		return nil, fmt.Errorf("api: must be one of %v, got %q", APIs, opts.API)
	}
	g, err := model.NewGroup(opts.SharedCPU)
	if err != nil {
		return nil, err
	}
	alias := opts.Alias
	if alias == "" {
		alias = DefaultAlias
	}
	sv, err := newServed(opts, alias)
	if err != nil {
		return nil, err
	}
	h := &Host{
		clock:   opts.Clock,
		speed:   speed,
		alias:   alias,
		log:     opts.Logger,
		served:  sv,
		group:   g,
		waiters: map[wkey]*waiter{},
		wake:    make(chan struct{}, 1),
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	if h.clock == nil {
		h.clock = SystemClock()
	}
	if h.log == nil {
		h.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	h.start = h.clock.Now()
	h.modelConfig = opts.Model
	h.api = opts.API
	if h.api == "" {
		h.api = APILlamaCpp
	}
	h.apiKeys = opts.APIKeys
	h.cacheReport = opts.CacheReport || h.api == APILlamaCpp
	h.vocab = newVocab()
	go h.loop()
	return h, nil
}

// Add starts a replica on the host. It answers 503 "Loading model" for
// loadDelay of model time, then serves.
func (h *Host) Add(name string, loadDelay time.Duration) (*Replica, error) {
	if name == "" {
		return nil, errors.New("replica name: must not be empty")
	}
	if loadDelay < 0 {
		return nil, fmt.Errorf("load delay: must not be negative, got %v", loadDelay)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	for _, r := range h.replicas {
		if r.name == name {
			return nil, fmt.Errorf("replica name %q: already on this host", name)
		}
	}
	i, err := h.group.Add(h.modelConfig)
	if err != nil {
		return nil, err
	}
	r := newReplica(h, i, name, h.nowLocked()+loadDelay)
	h.replicas = append(h.replicas, r)
	h.poke()
	return r, nil
}

// ModelNow returns the host's model time.
func (h *Host) ModelNow() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nowLocked()
}

// Close stops the driver; requests still running fail with ErrClosed.
func (h *Host) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	for k, w := range h.waiters {
		w.close()
		delete(h.waiters, k)
	}
	h.mu.Unlock()
	close(h.quit)
	<-h.done
	return nil
}

// nowLocked returns the model time: wall time since the start × speed.
func (h *Host) nowLocked() time.Duration {
	wall := h.clock.Now().Sub(h.start)
	m := time.Duration(float64(wall) * h.speed)
	if m < h.last {
		m = h.last
	}
	h.last = m
	return m
}

// wallUntil returns the wall time until model time t (rounded up, so that
// at that wall time the model time has reached t).
func (h *Host) wallUntil(t time.Duration) time.Duration {
	deadline := time.Duration(math.Ceil(float64(t)/h.speed)) + 1
	return max(deadline-h.clock.Now().Sub(h.start), 0)
}

func (h *Host) poke() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// loop drives the model: it advances it to the current model time,
// hands the events to the waiting requests, and sleeps until the next
// event, a readiness change, or a new request.
func (h *Host) loop() {
	defer close(h.done)
	for {
		h.mu.Lock()
		now := h.nowLocked()
		h.evs = h.group.Advance(now, h.evs[:0])
		for _, ev := range h.evs {
			k := wkey{ev.Replica, ev.ID}
			w := h.waiters[k]
			if w == nil {
				continue
			}
			if ev.Kind == model.EventDone {
				delete(h.waiters, k)
			}
			w.push(ev)
		}
		clear(h.evs)
		next, ok := h.group.NextEvent()
		for _, r := range h.replicas {
			if r.readyAt > now && (!ok || r.readyAt < next) {
				next, ok = r.readyAt, true
			}
		}
		var wait time.Duration
		if ok {
			wait = h.wallUntil(next)
		}
		h.mu.Unlock()

		var timer Timer
		var fire <-chan time.Time
		if ok {
			timer = h.clock.NewTimer(wait)
			fire = timer.C()
		}
		select {
		case <-h.wake:
		case <-fire:
		case <-h.quit:
			if timer != nil {
				timer.Stop()
			}
			return
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// submit queues req on replica member and registers w for its events.
func (h *Host) submit(member int, req model.Request, w *waiter) (model.ID, time.Duration, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return 0, 0, ErrClosed
	}
	now := h.nowLocked()
	id, err := h.group.Submit(now, member, req)
	if err != nil {
		return 0, now, err
	}
	h.waiters[wkey{member, id}] = w
	h.poke()
	return id, now, nil
}

// abandon cancels a request whose client went away: like llama.cpp, the
// replica stops working on it at the next step and frees its slot.
func (h *Host) abandon(member int, id model.ID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.waiters, wkey{member, id})
	if !h.closed && h.group.Cancel(h.nowLocked(), member, id) {
		h.poke()
	}
}

// inspect runs fn on a replica's server (as of the driver's last step)
// and the current model time.
func (h *Host) inspect(member int, fn func(s *model.Server, now time.Duration)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.nowLocked()
	fn(h.group.Server(member), now)
}

// waiter collects the events of one request for its handler.
type waiter struct {
	mu     sync.Mutex
	evs    []model.Event
	closed bool
	notify chan struct{}
}

func newWaiter() *waiter { return &waiter{notify: make(chan struct{}, 1)} }

func (w *waiter) push(ev model.Event) {
	w.mu.Lock()
	w.evs = append(w.evs, ev)
	w.mu.Unlock()
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

func (w *waiter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// take returns the events received so far.
func (w *waiter) take(buf []model.Event) ([]model.Event, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	buf = append(buf, w.evs...)
	clear(w.evs)
	w.evs = w.evs[:0]
	return buf, w.closed
}
