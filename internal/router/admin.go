package router

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/llm-ring/llm-ring/internal/config"
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
}

// ReplicasInfo is the body of GET /replicas.
type ReplicasInfo struct {
	Policy           string        `json:"policy"`
	Replicas         []ReplicaInfo `json:"replicas"`
	PlacementEntries int           `json:"placement_entries"`
}

func (r *Router) serveReplicas(w http.ResponseWriter, _ *http.Request) {
	st := r.table.Status()
	out := ReplicasInfo{Policy: st.Policy, PlacementEntries: st.Memory, Replicas: []ReplicaInfo{}}
	for _, x := range st.Replicas {
		out.Replicas = append(out.Replicas, ReplicaInfo{Name: x.Name, URL: x.URL,
			InflightRequests: x.Load.Requests, InflightTokens: x.Load.Tokens, RingShare: x.RingShare})
	}
	writeJSON(w, http.StatusOK, out)
}

// PolicySettings is the body of GET and PUT /admin/policy. In a PUT every
// field is optional: absent fields keep their current value.
type PolicySettings struct {
	Policy          string           `json:"policy,omitempty"`
	Epsilon         *float64         `json:"epsilon,omitempty"`
	BoundedLoadUnit string           `json:"bounded_load_unit,omitempty"`
	LLMAware        *config.LLMAware `json:"llm_aware,omitempty"`
	// Reset, in a PUT, also forgets placement memory and the round-robin
	// position (as POST /admin/reset), so the next run starts afresh.
	Reset bool `json:"reset,omitempty"`
}

func (r *Router) settings() PolicySettings {
	p := r.params
	return PolicySettings{
		Policy: r.name, Epsilon: &p.Epsilon, BoundedLoadUnit: p.Unit.String(),
		LLMAware: &config.LLMAware{CacheAwareLoad: p.CacheAwareLoad, PlacementMemory: p.PlacementMemory,
			LongStickiness: p.LongStickiness, LongPromptTokens: p.LongPromptTokens, LongCapFactor: p.LongCapFactor},
	}
}

func (r *Router) serveGetPolicy(w http.ResponseWriter, _ *http.Request) {
	r.mu.Lock()
	s := r.settings()
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
	var in PolicySettings
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		r.fail(w, badRequest("invalid policy settings: %v", err))
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	name, p := r.name, r.params
	if in.Policy != "" {
		name = in.Policy
	}
	if in.Epsilon != nil {
		p.Epsilon = *in.Epsilon
	}
	if in.BoundedLoadUnit != "" {
		if p.Unit, err = policy.ParseUnit(in.BoundedLoadUnit); err != nil {
			r.fail(w, badRequest("bounded_load_unit: %v", err))
			return
		}
	}
	if a := in.LLMAware; a != nil {
		p.CacheAwareLoad, p.PlacementMemory, p.LongStickiness = a.CacheAwareLoad, a.PlacementMemory, a.LongStickiness
		p.LongPromptTokens, p.LongCapFactor = a.LongPromptTokens, a.LongCapFactor
	}
	pol, err := policy.New(name, p)
	if err != nil {
		r.fail(w, badRequest("%v", err))
		return
	}
	r.table.SetPolicy(pol)
	r.name, r.params = name, p
	if in.Reset {
		r.table.Reset()
	}
	r.log.Info("policy_changed", slog.String("policy", name), slog.Bool("reset", in.Reset), slog.String("settings", fmt.Sprintf("%+v", p)))
	writeJSON(w, http.StatusOK, r.settings())
}

func (r *Router) serveReset(w http.ResponseWriter, _ *http.Request) {
	r.table.Reset()
	r.log.Info("state_reset")
	writeJSON(w, http.StatusOK, map[string]string{"status": "reset"})
}
