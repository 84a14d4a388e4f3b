package router

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"

	"github.com/llm-ring/llm-ring/internal/cluster"
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/wire"
)

func (r *Router) serveHealth(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// serveReady: ready when at least one replica is on the ring.
func (r *Router) serveReady(w http.ResponseWriter, _ *http.Request) {
	n := len(r.table.Status().Replicas)
	if n == 0 {
		r.writeError(w, &httpError{http.StatusServiceUnavailable, wire.ErrTypeUnavailable, "no ready replica"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "replicas": n})
}

// ReplicaInfo is one row of GET /replicas.
type ReplicaInfo struct {
	Name             string  `json:"name"`
	URL              string  `json:"url"`
	InflightRequests int64   `json:"inflight_requests"`
	InflightTokens   int64   `json:"inflight_tokens"`
	RingShare        float64 `json:"ring_share"`
	// PeerInflight*: the other router instances' load on it (cluster mode).
	PeerInflightRequests int64 `json:"peer_inflight_requests,omitempty"`
	PeerInflightTokens   int64 `json:"peer_inflight_tokens,omitempty"`
}

// ReplicasInfo is the body of GET /replicas.
type ReplicasInfo struct {
	Policy           string        `json:"policy"`
	Replicas         []ReplicaInfo `json:"replicas"`
	PlacementEntries int           `json:"placement_entries"`
	// Cluster is this instance's view of its peers (absent when
	// cluster.mode is none).
	Cluster *cluster.Status `json:"cluster,omitempty"`
}

func (r *Router) serveReplicas(w http.ResponseWriter, _ *http.Request) {
	st := r.table.Status()
	out := ReplicasInfo{Policy: st.Policy, PlacementEntries: st.Memory, Replicas: []ReplicaInfo{}, Cluster: r.clusterStatus()}
	peer := r.table.PeerLoad()
	for i, x := range st.Replicas {
		out.Replicas = append(out.Replicas, ReplicaInfo{Name: x.Name, URL: x.URL,
			InflightRequests: x.Load.Requests, InflightTokens: x.Load.Tokens, RingShare: x.RingShare})
		if i < len(peer) {
			out.Replicas[i].PeerInflightRequests, out.Replicas[i].PeerInflightTokens = peer[i].Requests, peer[i].Tokens
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// PolicySettings is the body of GET /admin/policy and of a PUT's answer:
// the current policy and its settings (the policy's own keys).
type PolicySettings struct {
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

// current returns the policy settings in force; r.mu is held.
func (r *Router) current() PolicySettings {
	return PolicySettings{Policy: r.name, Settings: policy.SettingsMap(r.settings)}
}

func (r *Router) serveGetPolicy(w http.ResponseWriter, _ *http.Request) {
	r.mu.Lock()
	s := r.current()
	r.mu.Unlock()
	writeJSON(w, http.StatusOK, s)
}

// servePutPolicy switches the policy (or its settings) at run time: the
// experiment runner's way to compare policies on one deployed router.
// In-flight requests keep the load they were charged.
func (r *Router) servePutPolicy(w http.ResponseWriter, req *http.Request) {
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
	r.mu.Lock()
	defer r.mu.Unlock()
	name, base := r.name, r.settings
	if in.Policy != "" && in.Policy != r.name {
		name = in.Policy
		if base, err = r.cfg.PolicySettings(name); err != nil {
			r.fail(w, badRequest("policy: %v", err))
			return
		}
	}
	sp, _ := policy.Lookup(name)
	set, err := sp.Decode(base, in.Settings)
	if err != nil {
		r.fail(w, badRequest("settings.%v", err))
		return
	}
	pol, err := policy.New(name, set)
	if err != nil {
		r.fail(w, badRequest("%v", err))
		return
	}
	old := r.current()
	r.table.SetPolicy(pol)
	r.name, r.settings = name, set
	if in.Reset {
		r.table.Reset()
	}
	now := r.current()
	r.log.Info("policy_changed", slog.String("remote", req.RemoteAddr), slog.Bool("reset", in.Reset),
		slog.Any("old", old), slog.Any("new", now))
	writeJSON(w, http.StatusOK, now)
}

func (r *Router) serveReset(w http.ResponseWriter, _ *http.Request) {
	r.table.Reset()
	r.log.Info("state_reset")
	writeJSON(w, http.StatusOK, map[string]string{"status": "reset"})
}
