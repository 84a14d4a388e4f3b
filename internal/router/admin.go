package router

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/llm-ring/llm-ring/internal/cluster"
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/pool"
	"github.com/llm-ring/llm-ring/internal/state"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// initAdmin builds the admin API's handler and, when admin.listen is set,
// reads its bearer token from admin.token_file.
func (r *Router) initAdmin() error {
	if err := r.initOperator(); err != nil { // operator hook (issue 25): status page and tracing, status.go
		return err
	}
	if r.cfg.Admin.Listen != "" {
		b, err := os.ReadFile(r.cfg.Admin.TokenFile)
		if err != nil {
			return fmt.Errorf("admin.token_file: %w", err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return fmt.Errorf("admin.token_file: %s is empty; the admin API needs a bearer token", r.cfg.Admin.TokenFile)
		}
		r.adminToken, r.hasToken = sha256.Sum256([]byte(tok)), true
	}
	r.admin = http.NewServeMux()
	r.admin.HandleFunc("GET /admin/policy", r.serveGetPolicy)
	r.admin.HandleFunc("PUT /admin/policy", r.servePutPolicy)
	r.admin.HandleFunc("POST /admin/reset", r.serveReset)
	r.admin.HandleFunc("/", func(w http.ResponseWriter, req *http.Request) {
		r.writeError(w, &httpError{http.StatusNotFound, wire.ErrTypeNotFound,
			fmt.Sprintf("no admin route for %s %s; the admin API serves GET and PUT /admin/policy, POST /admin/reset", req.Method, clip(req.URL.Path, 128))})
	})
	return nil
}

// AdminHandler is the admin API (GET/PUT /admin/policy, POST /admin/reset)
// behind its bearer token: a request without "Authorization: Bearer
// <admin.token_file's token>" gets 401. Serve it on its own listener
// (ServeAdmin); the client listener never serves it.
func (r *Router) AdminHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.serveStatus(w, req) { // operator hook (issue 25): the read-only status page, status_page.go
			return
		}
		if !r.authorized(req) {
			r.log.Warn("admin_unauthorized", slog.String("caller", req.RemoteAddr),
				slog.String("method", clip(req.Method, 16)), slog.String("path", clip(req.URL.Path, 128)))
			w.Header().Set("WWW-Authenticate", `Bearer realm="llm-ring admin"`)
			r.writeError(w, &httpError{http.StatusUnauthorized, wire.ErrTypeInvalidRequest,
				"the admin API requires Authorization: Bearer <the token in admin.token_file>"})
			return
		}
		r.admin.ServeHTTP(w, req)
	})
}

// authorized compares the request's bearer token with the admin token in
// constant time (both hashed, so that not even the length leaks).
func (r *Router) authorized(req *http.Request) bool {
	if !r.hasToken {
		return false
	}
	tok, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(got[:], r.adminToken[:]) == 1
}

// ServeAdmin serves the admin API on ln until ctx is done.
func (r *Router) ServeAdmin(ctx context.Context, ln net.Listener) error {
	srv := r.newServer(r.AdminHandler())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	r.log.Info("admin listening", slog.String("addr", ln.Addr().String()))
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// clip bounds a string from a request before it is logged or echoed.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func (r *Router) serveHealth(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// serveReady: ready when at least one replica is healthy (on the ring and
// passing its health checks), and the router is not draining.
func (r *Router) serveReady(w http.ResponseWriter, _ *http.Request) {
	if r.draining.Load() {
		r.writeError(w, &httpError{http.StatusServiceUnavailable, wire.ErrTypeUnavailable, "draining: the router is shutting down"})
		return
	}
	st := r.view()
	n, healthy := len(st.Replicas), 0
	for _, x := range st.Replicas {
		if x.Healthy {
			healthy++
		}
	}
	if healthy == 0 {
		r.writeError(w, &httpError{http.StatusServiceUnavailable, wire.ErrTypeUnavailable,
			fmt.Sprintf("no healthy replica (%d on the ring, none passing its health checks)", n)})
		return
	}
	body := map[string]any{"status": "ready", "replicas": n, "healthy": healthy}
	if mm := r.health.all(); len(mm) > 0 {
		body["health_path_mismatch"] = mm // routable on liveness; the engine setting is wrong
	}
	writeJSON(w, http.StatusOK, body)
}

// ReplicaInfo is one row of GET /replicas.
type ReplicaInfo struct {
	Name             string  `json:"name"`
	URL              string  `json:"url"`
	InflightRequests int64   `json:"inflight_requests"`
	InflightTokens   int64   `json:"inflight_tokens"`
	RingShare        float64 `json:"ring_share"`
	// Healthy is false while the replica fails its health checks: it stays
	// on the ring but takes no new request.
	Healthy bool `json:"healthy"`
	// Engine is the replica's engine (its own setting, or the set's).
	Engine string `json:"engine"`
	// Models are the models it serves (an adapter as "name (base)"),
	// absent while unknown: it is then in the catch-all pool and serves
	// whatever a request asks for (issue 23).
	Models []string `json:"models,omitempty"`
	// Pools are the pools it is a member of (absent: only the catch-all).
	Pools []string `json:"pools,omitempty"`
	// HealthPathMismatch says what its health path answered when the
	// replica does not serve it (404): the engine setting is wrong, and the
	// replica is routed on liveness. Absent when the path is right.
	HealthPathMismatch string `json:"health_path_mismatch,omitempty"`
	// PeerInflight*: the other router instances' load on it (cluster mode).
	PeerInflightRequests int64 `json:"peer_inflight_requests,omitempty"`
	PeerInflightTokens   int64 `json:"peer_inflight_tokens,omitempty"`
	// Reported is what the replica last said about itself (its /metrics);
	// absent while unknown (never scraped, or the last scrape failed).
	Reported *ReportedInfo `json:"reported,omitempty"`
	// Speed is what its answers taught the router (absent before the first).
	Speed *SpeedInfo `json:"speed,omitempty"`
}

// ReportedInfo is a replica's own signals, as the policies see them.
type ReportedInfo struct {
	Running *float64 `json:"running,omitempty"`
	Waiting *float64 `json:"waiting,omitempty"`
	KVUse   *float64 `json:"kv_use,omitempty"`
	AgeMS   float64  `json:"age_ms"`
}

// SpeedInfo is a replica's learned rates.
type SpeedInfo struct {
	PrefillTPS float64 `json:"prefill_tokens_per_second"`
	DecodeTPS  float64 `json:"decode_tokens_per_second"`
	Samples    int     `json:"samples"`
}

// replicaSignals returns the /replicas view of a row's reported signals and
// learned speed (nil when unknown).
func replicaSignals(rep policy.Reported, sp policy.Speed, now time.Time) (*ReportedInfo, *SpeedInfo) {
	var ri *ReportedInfo
	if rep.HasQueue || rep.HasKV {
		ri = &ReportedInfo{AgeMS: ms(now.Sub(time.Unix(0, rep.At)))}
		if rep.HasQueue {
			ri.Running, ri.Waiting = &rep.Running, &rep.Waiting
		}
		if rep.HasKV {
			ri.KVUse = &rep.KVUse
		}
	}
	var si *SpeedInfo
	if sp.Samples > 0 {
		si = &SpeedInfo{PrefillTPS: sp.Prefill, DecodeTPS: sp.Decode, Samples: sp.Samples}
	}
	return ri, si
}

// ReplicasInfo is the body of GET /replicas.
type ReplicasInfo struct {
	Policy           string        `json:"policy"`
	Replicas         []ReplicaInfo `json:"replicas"`
	PlacementEntries int           `json:"placement_entries"`
	// Pools are the routing pools by model (issue 23), absent while the
	// catch-all pool is the only one (no models configured or discovered).
	Pools []PoolInfo `json:"pools,omitempty"`
	// Cluster is this instance's view of its peers (absent when
	// cluster.mode is none).
	Cluster *cluster.Status `json:"cluster,omitempty"`
}

func (r *Router) serveReplicas(w http.ResponseWriter, _ *http.Request) {
	now := time.Now()
	st := r.view()
	out := ReplicasInfo{Policy: st.Policy, PlacementEntries: st.Memory, Replicas: []ReplicaInfo{}, Cluster: r.clusterStatus()}
	if len(st.Pools) > 1 {
		out.Pools = st.Pools
	}
	for _, x := range st.Replicas {
		ri := replicaInfo(&x, now)
		ri.HealthPathMismatch = r.health.get(x.Name)
		p, _ := r.cfg.ReplicaEngine(x.Engine)
		ri.Engine = p.Name
		out.Replicas = append(out.Replicas, ri)
	}
	writeJSON(w, http.StatusOK, out)
}

// replicaInfo is a replica's row of /replicas and the status page.
func replicaInfo(x *replicaRow, now time.Time) ReplicaInfo {
	ri := ReplicaInfo{Name: x.Name, URL: x.URL, InflightRequests: x.Load.Requests, InflightTokens: x.Load.Tokens,
		RingShare: x.RingShare, Healthy: x.Healthy, PeerInflightRequests: x.Peer.Requests, PeerInflightTokens: x.Peer.Tokens,
		Models: replicaModels(x.Models)}
	if len(x.Pools) > 1 || x.Pools[0] != "" {
		ri.Pools = x.Pools
	}
	ri.Reported, ri.Speed = replicaSignals(x.Reported, x.Speed, now)
	return ri
}

// PolicySettings is the body of GET /admin/policy and of a PUT's answer:
// the current policy of a pool and its settings (the policy's own keys).
type PolicySettings struct {
	// Model is the pool's model (issue 23), absent for the catch-all pool
	// (every replica's without a model list: the whole router without
	// models configured).
	Model    string         `json:"model,omitempty"`
	Policy   string         `json:"policy"`
	Settings map[string]any `json:"settings,omitempty"`
}

// PolicyUpdate is the body of PUT /admin/policy. Every field is optional:
// Policy switches the policy (absent: keep it); Settings sets some of the
// policy's keys, validated by the same rules as the configuration file (a
// key it does not name keeps its value: the current one when the policy
// stays, the configured one when it changes).
type PolicyUpdate struct {
	Policy   string          `json:"policy,omitempty"`
	Settings json.RawMessage `json:"settings,omitempty"`
	// Reset also forgets placement memory, the prefix index and the
	// round-robin position (as POST /admin/reset), so the next run starts
	// afresh.
	Reset bool `json:"reset,omitempty"`
}

// adminPool is the pool an admin request addresses: ?model=NAME (an alias
// names its model's pool), absent or empty the catch-all pool. An unknown
// model is a 404 naming the pools.
func (r *Router) adminPool(req *http.Request) (*pool.Pool, error) {
	model := req.URL.Query().Get("model")
	if m, ok := r.pcfg.Aliases[model]; ok {
		model = m
	}
	if p := r.pools.Pool(model); p != nil {
		return p, nil
	}
	var names []string
	for _, p := range r.pools.Pools() {
		names = append(names, strconv.Quote(p.Model()))
	}
	return nil, &httpError{http.StatusNotFound, wire.ErrTypeNotFound,
		fmt.Sprintf("no pool for model %q; the pools are %s (\"\": the catch-all)", clip(model, 128), strings.Join(names, ", "))}
}

// current returns a pool's policy settings in force.
func current(p *pool.Pool) PolicySettings {
	pol := p.Table().Policy()
	return PolicySettings{Model: p.Model(), Policy: pol.Name(), Settings: policy.SettingsMap(policy.SettingsOf(pol))}
}

func (r *Router) serveGetPolicy(w http.ResponseWriter, req *http.Request) {
	p, err := r.adminPool(req)
	if err != nil {
		r.fail(w, err)
		return
	}
	r.mu.Lock()
	s := current(p)
	r.mu.Unlock()
	writeJSON(w, http.StatusOK, s)
}

// servePutPolicy switches the policy (or its settings) at run time: the
// experiment runner's way to compare policies on one deployed router.
// ?model=NAME addresses one pool; without it the update applies to every
// pool, and to the pools created later (a model discovered after the
// switch), as a switch of the router's policy. In-flight requests keep the
// load they were charged. The answer is the addressed pool's settings (the
// catch-all's for every pool).
func (r *Router) servePutPolicy(w http.ResponseWriter, req *http.Request) {
	all := !req.URL.Query().Has("model")
	p, err := r.adminPool(req)
	if err != nil {
		r.fail(w, err)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, 1<<16))
	if err != nil {
		r.fail(w, badRequest("could not read the body: %v", err))
		return
	}
	var in PolicyUpdate
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		r.fail(w, badRequest("invalid policy update: %v", err))
		return
	}
	pools := []*pool.Pool{p}
	if all {
		pools = r.pools.Pools()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := current(p)
	pols := make([]policy.Policy, len(pools))
	for i, q := range pools { // every pool's update is checked before any is applied
		if pols[i], err = r.updatedPolicy(q.Model(), q.Table(), in); err != nil {
			r.fail(w, err)
			return
		}
	}
	for i, q := range pools {
		q.Table().SetPolicy(pols[i])
		if in.Reset {
			q.Table().Reset()
		}
	}
	if all {
		u := in
		u.Reset = false
		r.adminAll.Store(&u)
	}
	now := current(p)
	r.log.Info("policy_changed", slog.String("caller", req.RemoteAddr), slog.Any("old", old), slog.Any("new", now),
		slog.Int("pools", len(pools)), slog.Bool("reset", in.Reset))
	writeJSON(w, http.StatusOK, now)
}

// updatedPolicy is the policy of model's pool (table t) after update in:
// the named policy from the pool's configured settings (or its current
// one), in.Settings on top.
func (r *Router) updatedPolicy(model string, t *state.Table, in PolicyUpdate) (policy.Policy, error) {
	name, base := t.Policy().Name(), policy.SettingsOf(t.Policy())
	if in.Policy != "" && in.Policy != name {
		name = in.Policy
		var err error
		if base, err = r.poolPolicySettings(model, name); err != nil {
			return nil, badRequest("policy: %v", err)
		}
	}
	sp, _ := policy.Lookup(name)
	set, err := sp.Decode(base, in.Settings)
	if err != nil {
		return nil, badRequest("settings.%v", err)
	}
	pol, err := policy.New(name, set)
	if err != nil {
		return nil, badRequest("%v", err)
	}
	return pol, nil
}

// withAdminPolicy gives a pool created after a PUT /admin/policy for every
// pool that update (its table is new: nothing to reset).
func (r *Router) withAdminPolicy(model string, t *state.Table) error {
	u := r.adminAll.Load()
	if u == nil {
		return nil
	}
	pol, err := r.updatedPolicy(model, t, *u)
	if err != nil {
		return fmt.Errorf("pool %q: the admin API's policy: %w", model, err)
	}
	t.SetPolicy(pol)
	return nil
}

// serveReset forgets placement memory, the prefix index and the
// round-robin position: of the pool ?model= names, or of every pool.
func (r *Router) serveReset(w http.ResponseWriter, req *http.Request) {
	pools := r.pools.Pools()
	if req.URL.Query().Has("model") {
		p, err := r.adminPool(req)
		if err != nil {
			r.fail(w, err)
			return
		}
		pools = []*pool.Pool{p}
	}
	for _, p := range pools {
		p.Table().Reset()
	}
	r.log.Info("state_reset", slog.String("caller", req.RemoteAddr), slog.Int("pools", len(pools)))
	writeJSON(w, http.StatusOK, map[string]string{"status": "reset"})
}
