package experiment

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/discovery"
	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/replica"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/router"
	"github.com/llm-ring/llm-ring/internal/strict"
	"github.com/llm-ring/llm-ring/internal/traffic"
)

// target is where a run's traffic goes.
type target interface {
	// start readies a run under policy and returns the base URLs of the
	// router's instances (one, or several active-active ones) and the
	// number of replicas it starts with.
	start(ctx context.Context, policy string) (urls []string, replicas int, err error)
	// scale starts the extra replica (its start is the scale-up time) and
	// returns its name once the router routes to it.
	scale(ctx context.Context) (name string, err error)
	// stop ends the run: embedded replicas and router are stopped, an
	// external scale-up is undone. scaled says whether scale was called.
	stop(ctx context.Context, scaled bool) error
	// describe returns the run's settings for the run JSON.
	describe() map[string]any
}

// embedded runs fresh simulated replicas (one replica.Host) and a fresh
// in-process router on loopback for each run.
type embedded struct {
	spec  *Spec
	model model.Config
	base  *config.Router

	cfg      *config.Router // this run's router configuration
	host     *replica.Host  // the shared host (SharedCPU), else nil
	rt       *router.Router
	upstream *http.Transport      // the router's connections to the replicas
	replicas []replicaset.Replica // the router's replica set
	members  []*member            // every replica started in this run, by start order
	// The router stops before the replicas: two contexts, two groups.
	routerCtx, replicaCtx    context.Context
	stopRouter, stopReplicas context.CancelFunc
	routerWG, replicaWG      sync.WaitGroup
	mu                       sync.Mutex
	errs                     []error // servers that failed
	client                   *http.Client
}

// member is one replica the run started: its own host (a CPU of its own),
// or the shared host, and its server.
type member struct {
	index  int
	rep    replicaset.Replica
	host   *replica.Host // nil: on the shared host
	cancel context.CancelFunc
	failed bool
}

func newEmbedded(spec *Spec, client *http.Client) *embedded {
	m := spec.Model
	if m == (model.Config{}) {
		m = model.DefaultConfig()
	}
	base := spec.RouterConfig
	if base == nil {
		base = DefaultRouterConfig()
	}
	return &embedded{spec: spec, model: m, base: base, client: client}
}

func (e *embedded) serve(ctx context.Context, wg *sync.WaitGroup, what string, fn func(context.Context) error) {
	wg.Go(func() {
		if err := fn(ctx); err != nil {
			e.mu.Lock()
			e.errs = append(e.errs, fmt.Errorf("%s: %w", what, err))
			e.mu.Unlock()
		}
	})
}

func (e *embedded) start(ctx context.Context, policyName string) ([]string, int, error) {
	e.host, e.errs, e.replicas, e.members = nil, nil, nil, nil
	if e.spec.SharedCPU {
		h, err := replica.NewHost(e.replicaOptions(e.model, true))
		if err != nil {
			return nil, 0, err
		}
		e.host = h
	}
	// The servers outlive ctx (Ctrl-C) until stop, so that the router's
	// metrics can still be read.
	e.routerCtx, e.stopRouter = context.WithCancel(context.WithoutCancel(ctx))
	e.replicaCtx, e.stopReplicas = context.WithCancel(context.WithoutCancel(ctx))
	for i := range e.spec.Replicas {
		r, err := e.addReplica(i, 0)
		if err != nil {
			e.stop(ctx, false)
			return nil, 0, err
		}
		e.replicas = append(e.replicas, r)
	}
	cfg := *e.base
	cfg.Policy = policyName
	if e.spec.ReplicaAPI != "" {
		cfg.Signals.Engine = e.spec.ReplicaAPI // the replicas' metric names
	}
	cfg.Listen = "127.0.0.1:0"
	cfg.Discovery = config.Discovery{Mode: "static", Static: slices.Clone(e.replicas)}
	if err := cfg.Validate(); err != nil {
		e.stop(ctx, false)
		return nil, 0, fmt.Errorf("router config: %w", err)
	}
	e.cfg = &cfg
	// The router's connections to the replicas, as the router would make
	// them, but closable: an unused connection left from a dial race would
	// hold up a replica's shutdown.
	e.upstream = &http.Transport{
		DialContext:           (&net.Dialer{Timeout: cfg.Upstream.DialTimeout.D(), KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: cfg.Upstream.ResponseTimeout.D(),
	}
	rt, err := router.New(router.Options{Config: &cfg, Logger: e.spec.Log, Transport: e.upstream})
	if err != nil {
		e.stop(ctx, false)
		return nil, 0, fmt.Errorf("router: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.stop(ctx, false)
		return nil, 0, err
	}
	e.rt = rt
	// The replica set goes in before the first request can arrive; the
	// static source then publishes the same set (no change).
	rt.SetReplicas(e.replicas)
	e.serve(e.routerCtx, &e.routerWG, "router", func(ctx context.Context) error {
		return rt.Serve(ctx, ln, discovery.Static(e.replicas))
	})
	return []string{"http://" + ln.Addr().String()}, len(e.replicas), nil
}

// replicaOptions are an embedded host's options: the model, the run's
// speed, and the engine face (with its cached-token report on).
func (e *embedded) replicaOptions(m model.Config, shared bool) replica.Options {
	return replica.Options{Model: m, SharedCPU: shared, Speed: e.spec.Speed, API: e.spec.ReplicaAPI, CacheReport: true}
}

// addReplica starts replica llm-<index> and serves it on a loopback port:
// on the shared host, or else on a host of its own running at the
// profile's speed factor for that index.
func (e *embedded) addReplica(index int, loadDelay time.Duration) (replicaset.Replica, error) {
	name := fmt.Sprintf("llm-%d", index)
	m := &member{index: index, host: e.host}
	if e.host == nil {
		h, err := replica.NewHost(e.replicaOptions(e.model.WithSpeed(e.spec.Profile.ReplicaSpeed(index)), false))
		if err != nil {
			return replicaset.Replica{}, err
		}
		m.host = h
	}
	fail := func(err error) (replicaset.Replica, error) {
		if m.host != e.host {
			m.host.Close()
		}
		return replicaset.Replica{}, err
	}
	r, err := m.host.Add(name, loadDelay)
	if err != nil {
		return fail(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	var ctx context.Context
	ctx, m.cancel = context.WithCancel(e.replicaCtx)
	e.serve(ctx, &e.replicaWG, "replica "+name, func(ctx context.Context) error { return replica.Serve(ctx, ln, r) })
	m.rep = replicaset.Replica{Name: name, URL: "http://" + ln.Addr().String()}
	e.members = append(e.members, m)
	return m.rep, nil
}

// scale adds replica llm-<N> with the spec's load delay, polls its /health
// until it answers 200 (its model is loaded), then gives the router the new
// replica set.
func (e *embedded) scale(ctx context.Context) (string, error) {
	r, err := e.addReplica(len(e.replicas), e.spec.LoadDelay)
	if err != nil {
		return "", err
	}
	if err := e.waitHealthy(ctx, r); err != nil {
		return "", err
	}
	e.replicas = append(e.replicas, r)
	e.rt.SetReplicas(e.replicas)
	return r.Name, nil
}

// waitHealthy polls r's /health every 100 ms of model time (so the ready
// time is known to that) until it answers 200.
func (e *embedded) waitHealthy(ctx context.Context, r replicaset.Replica) error {
	every := min(max(time.Duration(float64(100*time.Millisecond)/e.spec.Speed), time.Millisecond), 100*time.Millisecond)
	for {
		ok, err := healthy(ctx, e.client, r.URL)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if !sleep(ctx, every) {
			return ctx.Err()
		}
	}
}

// event applies a profile's replica event (traffic.ReplicaEvent):
//   - fail: the replica's host closes (its in-flight requests fail, its
//     cache is gone), its server stops, and it leaves the router's set;
//   - return, add: a fresh replica llm-<index> starts on a new port, loads
//     for the spec's load delay, and joins the router's set when healthy
//     (return: the failed replica's name, cold);
//   - remove: it leaves the router's set; its server keeps running, so
//     requests in flight finish (a drain), until the run ends.
func (e *embedded) event(ctx context.Context, ev traffic.ReplicaEvent) error {
	name := fmt.Sprintf("llm-%d", ev.Replica)
	switch ev.Action {
	case traffic.ActionFail, traffic.ActionRemove:
		e.replicas = slices.DeleteFunc(e.replicas, func(r replicaset.Replica) bool { return r.Name == name })
		if ev.Action == traffic.ActionFail {
			for _, m := range e.members {
				if m.rep.Name == name && !m.failed {
					m.failed = true
					m.host.Close()
					m.cancel()
				}
			}
		}
		e.rt.SetReplicas(e.replicas)
		return nil
	case traffic.ActionReturn, traffic.ActionAdd:
		r, err := e.addReplica(ev.Replica, e.spec.LoadDelay)
		if err != nil {
			return err
		}
		if err := e.waitHealthy(ctx, r); err != nil {
			return err
		}
		e.replicas = append(e.replicas, r)
		e.rt.SetReplicas(e.replicas)
		return nil
	}
	return fmt.Errorf("unknown replica event action %q", ev.Action)
}

// healthy reports whether GET /health answers 200. A 503 (loading) is not
// an error.
func healthy(ctx context.Context, client *http.Client, base string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health", nil)
	if err != nil {
		return false, err
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, fmt.Errorf("health of the new replica: %w", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusServiceUnavailable:
		return false, nil
	}
	return false, fmt.Errorf("health of the new replica: HTTP %d", resp.StatusCode)
}

// replicaMetrics reads every replica's /metrics (its engine's series,
// llamacpp:* or vllm:* or sglang:*, and the simulator's own, such as RAM cache evictions).
func (e *embedded) replicaMetrics(ctx context.Context) (map[string]map[string]float64, error) {
	out := map[string]map[string]float64{}
	var errs []error
	for _, m := range e.members {
		if m.failed {
			continue // its metrics went with it
		}
		r := m.rep
		m := map[string]float64{}
		for _, prefix := range []string{cmp.Or(e.spec.ReplicaAPI, replica.APILlamaCpp) + ":", "llm_ring_sim_"} {
			s, err := scrapePrefix(ctx, e.client, r.URL, prefix)
			if err != nil {
				errs = append(errs, fmt.Errorf("replica %s: %w", r.Name, err))
				break
			}
			for k, v := range s {
				m[k] = v.value
			}
		}
		out[r.Name] = m
	}
	return out, errors.Join(errs...)
}

// stop stops the router, closes its connections to the replicas, then
// stops the replicas and their host.
func (e *embedded) stop(ctx context.Context, _ bool) error {
	if e.stopRouter != nil {
		e.stopRouter()
		e.routerWG.Wait()
	}
	if e.upstream != nil {
		e.upstream.CloseIdleConnections()
	}
	if e.host != nil {
		e.host.Close()
	}
	for _, m := range e.members {
		if m.host != e.host {
			m.host.Close() // closing twice is harmless
		}
	}
	if e.stopReplicas != nil {
		e.stopReplicas()
		e.replicaWG.Wait()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return errors.Join(e.errs...)
}

func (e *embedded) describe() map[string]any {
	return map[string]any{
		"router":       toMap(e.cfg),
		"replica":      e.replicaRecord(),
		"load_delay_s": e.spec.LoadDelay.Seconds(),
	}
}

// replicaRecord is what the record says of the replicas: their model's keys
// (the optional ones where set, as the simulator's run records write them),
// its preset and HTTP face.
func (e *embedded) replicaRecord() map[string]any {
	out := strict.Fields(e.model)
	out["preset"] = e.spec.ReplicaPreset
	out["api"] = cmp.Or(e.spec.ReplicaAPI, replica.APILlamaCpp)
	out["shared_cpu"] = e.spec.SharedCPU
	out["speeds"] = e.spec.Profile.ReplicaSpeeds
	return out
}

// toMap turns v into a JSON object (a map), through its JSON encoding.
func toMap(v any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		return map[string]any{"error": err.Error()}
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return map[string]any{"error": err.Error()}
	}
	return m
}
