package router

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"
)

// healthChecker probes every replica's health endpoint (health_check.path,
// llama.cpp's GET /health: 200 ready, 503 while loading) every
// health_check.interval and drives state.Table.SetHealthy:
// unhealthy_threshold failures in a row take a replica out of routing (it
// stays on the ring, so conversations keep their homes), healthy_threshold
// successes in a row bring it back. A replica is healthy when it joins.
type healthChecker struct {
	r      *Router
	client *http.Client
	fails  map[string]int // consecutive failures, by replica
	oks    map[string]int // consecutive successes, by replica
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

// round probes every replica at once and applies the results in name order.
func (c *healthChecker) round(ctx context.Context) {
	st := c.r.table.Status()
	errs := make([]error, len(st.Replicas))
	var wg sync.WaitGroup
	for i, rep := range st.Replicas {
		wg.Go(func() { errs[i] = c.probe(ctx, rep.URL) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	hc := c.r.cfg.HealthCheck
	seen := map[string]bool{}
	for i, rep := range st.Replicas {
		name := rep.Name
		seen[name] = true
		if errs[i] != nil {
			c.fails[name]++
			c.oks[name] = 0
			if rep.Healthy && c.fails[name] >= hc.UnhealthyThreshold && c.r.table.SetHealthy(name, false) {
				c.r.log.Warn("replica_unhealthy", slog.String("replica", name), slog.Int("failures", c.fails[name]),
					slog.String("error", clip(errs[i].Error(), 256)))
			}
			continue
		}
		c.oks[name]++
		c.fails[name] = 0
		if !rep.Healthy && c.oks[name] >= hc.HealthyThreshold && c.r.table.SetHealthy(name, true) {
			c.r.log.Info("replica_healthy", slog.String("replica", name), slog.Int("successes", c.oks[name]))
		}
	}
	for name := range c.fails {
		if !seen[name] {
			delete(c.fails, name)
			delete(c.oks, name)
		}
	}
}

// probe is one health check: nil when the replica answers 200 in time.
func (c *healthChecker) probe(ctx context.Context, base string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+c.r.cfg.HealthCheck.Path, nil)
	if err != nil {
		return err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", c.r.cfg.HealthCheck.Path, resp.Status)
	}
	return nil
}
