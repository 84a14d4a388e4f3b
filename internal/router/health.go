package router

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"strings"
	"sync"
	"time"
)

// healthChecker probes every replica's health endpoint every
// health_check.interval and drives state.Table.SetHealthy:
// unhealthy_threshold failures in a row take a replica out of routing (it
// stays on the ring, so conversations keep their homes), healthy_threshold
// successes in a row bring it back. A replica is healthy when it joins.
//
// The path is the replica's engine's (engine.Preset.HealthPath: llama.cpp's
// /health answers 503 while loading, Ollama's /api/version) unless
// health_check.path names one. A replica that answers the path with 404,
// 405 or 501 does not serve it: that is a configuration mismatch (the
// engine setting is wrong), not an unhealthy replica. It is logged once per
// replica and path as health_path_mismatch, the answer counts as liveness
// (the replica answered HTTP in time), and /readyz and /replicas show it.
type healthChecker struct {
	r      *Router
	client *http.Client
	fails  map[string]int // consecutive failures, by replica
	oks    map[string]int // consecutive successes, by replica
}

// healthNotes is what the health checker tells /readyz and /replicas: the
// replicas whose health path is a mismatch. Safe for concurrent use.
type healthNotes struct {
	mu       sync.Mutex
	mismatch map[string]string // replica → what its health path answered
}

// set records (note != "") or clears a replica's mismatch and reports
// whether it is new.
func (h *healthNotes) set(name, note string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	old, had := h.mismatch[name]
	if note == "" {
		delete(h.mismatch, name)
		return false
	}
	if h.mismatch == nil {
		h.mismatch = map[string]string{}
	}
	h.mismatch[name] = note
	return !had || old != note
}

// get returns a replica's mismatch note ("" when none).
func (h *healthNotes) get(name string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mismatch[name]
}

// all returns every mismatch, by replica (nil when none).
func (h *healthNotes) all() map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.mismatch) == 0 {
		return nil
	}
	return maps.Clone(h.mismatch)
}

// keep forgets the replicas not in names.
func (h *healthNotes) keep(names map[string]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for n := range h.mismatch {
		if !names[n] {
			delete(h.mismatch, n)
		}
	}
}

// runHealthChecks checks until ctx is done; health_check.interval 0
// disables it.
func (r *Router) runHealthChecks(ctx context.Context) {
	hc := r.cfg.HealthCheck
	if hc.Interval <= 0 {
		return
	}
	c := &healthChecker{r: r, client: &http.Client{Transport: r.base, Timeout: hc.Timeout.D()},
		fails: map[string]int{}, oks: map[string]int{}}
	t := time.NewTicker(hc.Interval.D())
	defer t.Stop()
	for {
		c.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probeResult is one probe's outcome: err for a failure, mismatch for a
// path the replica does not serve (it answered, so it is alive).
type probeResult struct {
	err      error
	mismatch string
}

// round probes every replica at once and applies the results in name order.
func (c *healthChecker) round(ctx context.Context) {
	st := c.r.view()
	res := make([]probeResult, len(st.Replicas))
	var wg sync.WaitGroup
	for i, rep := range st.Replicas {
		_, path := c.r.cfg.ReplicaEngine(rep.Engine)
		wg.Go(func() { res[i] = c.probe(ctx, rep.URL, path) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	seen := map[string]bool{}
	for i, rep := range st.Replicas {
		seen[rep.Name] = true
		c.note(rep.Name, rep.Engine, res[i].mismatch)
		c.apply(rep.Name, rep.Healthy, res[i].err)
	}
	for name := range c.fails {
		if !seen[name] {
			delete(c.fails, name)
			delete(c.oks, name)
		}
	}
	c.r.health.keep(seen)
}

// note records a replica's health-path mismatch, logging it loudly the
// first time (and again if what it answers changes).
func (c *healthChecker) note(name, own, mismatch string) {
	if !c.r.health.set(name, mismatch) {
		return
	}
	p, path := c.r.cfg.ReplicaEngine(own)
	c.r.log.Error("health_path_mismatch", slog.String("replica", name), slog.String("engine", p.Name),
		slog.String("path", path), slog.String("answer", mismatch),
		slog.String("meaning", "the replica does not serve this health path: the engine setting (engine, or the replica's "+
			"engine, or health_check.path) does not match it; it stays routable while it answers HTTP"))
}

// apply counts one probe's outcome and moves the replica in or out of
// routing when a threshold is reached.
func (c *healthChecker) apply(name string, healthy bool, err error) {
	hc := c.r.cfg.HealthCheck
	if err != nil {
		c.fails[name]++
		c.oks[name] = 0
		if healthy && c.fails[name] >= hc.UnhealthyThreshold && c.r.pools.SetHealthy(name, false) {
			c.r.log.Warn("replica_unhealthy", slog.String("replica", name), slog.Int("failures", c.fails[name]),
				slog.String("error", clip(err.Error(), 256)))
		}
		return
	}
	c.oks[name]++
	c.fails[name] = 0
	if !healthy && c.oks[name] >= hc.HealthyThreshold && c.r.pools.SetHealthy(name, true) {
		c.r.log.Info("replica_healthy", slog.String("replica", name), slog.Int("successes", c.oks[name]))
	}
}

// probe is one health check of GET base+path: a success when the replica
// answers 200 in time, a mismatch (alive) when it answers that it has no
// such path, a failure otherwise.
func (c *healthChecker) probe(ctx context.Context, base, path string) probeResult {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+path, nil)
	if err != nil {
		return probeResult{err: err}
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return probeResult{err: err}
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return probeResult{}
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return probeResult{mismatch: fmt.Sprintf("GET %s answered %s", path, resp.Status)}
	}
	return probeResult{err: fmt.Errorf("%s answered %s", path, resp.Status)}
}
