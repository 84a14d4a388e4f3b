package router

import (
	_ "embed"
	"fmt"
	"net/http"
	"time"

	"github.com/llm-ring/llm-ring/internal/cluster"
)

// The status page: GET admin.status_path (default /) on the admin listener
// serves one self-contained HTML page (no external assets, no build step)
// that polls GET status.json beside it (/status.json by default) on the
// same listener. Both are read-only and, like the
// client listener's /replicas and /metrics, need no bearer token; the
// admin API's writes keep theirs.

//go:embed status.html
var statusHTML []byte

// serveStatus answers the status page's two read-only routes and reports
// whether it did (the admin handler's hook, before its token check).
func (r *Router) serveStatus(w http.ResponseWriter, req *http.Request) bool {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		return false
	}
	switch req.URL.Path {
	case r.statusPage:
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:")
		h.Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
		w.Write(statusHTML)
	case r.statusData:
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusOK, r.statusInfo(time.Now()))
	default:
		return false
	}
	return true
}

// StatusInfo is the body of GET status.json.
type StatusInfo struct {
	Now              time.Time        `json:"now"`
	Policy           string           `json:"policy"`
	Draining         bool             `json:"draining"`
	Inflight         int64            `json:"inflight"`
	PlacementEntries int              `json:"placement_entries"`
	Replicas         []ReplicaInfo    `json:"replicas"`
	Pools            []PoolInfo       `json:"pools,omitempty"` // by model (issue 23): absent with the catch-all alone
	IntervalSeconds  int              `json:"interval_seconds"`
	History          []StatusInterval `json:"history"`   // oldest first
	Requests         int              `json:"requests"`  // recorded since start
	Decisions        []DecisionInfo   `json:"decisions"` // newest first
	Cluster          *cluster.Status  `json:"cluster,omitempty"`
	Admission        *AdmissionInfo   `json:"admission,omitempty"` // status_admission.go
}

// StatusInterval is one history interval's totals; the rates are absent
// when nothing in the interval tells them.
type StatusInterval struct {
	Start       time.Time `json:"start"`
	Requests    int       `json:"requests"`
	Errors      int       `json:"errors"`
	Known       int       `json:"known"`
	Hits        int       `json:"hits"`
	HitRate     *float64  `json:"hit_rate,omitempty"`     // hits / known
	CachedShare *float64  `json:"cached_share,omitempty"` // cached / prompt tokens
	TTFTMS      *float64  `json:"ttft_ms,omitempty"`      // mean
	LatencyMS   *float64  `json:"latency_ms,omitempty"`   // mean
}

// DecisionInfo is one recent request and its decision's trace.
type DecisionInfo struct {
	At           time.Time `json:"at"`
	Conversation string    `json:"conversation"`
	Path         string    `json:"path"`
	Policy       string    `json:"policy"`
	Replica      string    `json:"replica"`
	Reason       string    `json:"reason"`
	Status       int       `json:"status"`
	Attempts     int       `json:"attempts"`
	EstPrompt    int       `json:"est_prompt_tokens"`
	ExpectCached int       `json:"expect_cached"`
	CountsKnown  bool      `json:"counts_known"`
	CacheN       int       `json:"cache_n"`
	PromptN      int       `json:"prompt_n"`
	PredictedN   int       `json:"predicted_n"`
	LatencyMS    float64   `json:"latency_ms"`
	TTFTMS       *float64  `json:"ttft_ms,omitempty"`
	ErrorKind    string    `json:"error_kind,omitempty"`
	Trace        string    `json:"trace"`
}

func (r *Router) statusInfo(now time.Time) StatusInfo {
	st := r.view()
	out := StatusInfo{Now: now, Policy: st.Policy, Draining: r.draining.Load(), Inflight: r.inflight.Load(),
		PlacementEntries: st.Memory, Replicas: []ReplicaInfo{}, IntervalSeconds: int(statusBucket / time.Second),
		Cluster: r.clusterStatus(), Admission: r.admissionInfo(now)}
	if len(st.Pools) > 1 {
		out.Pools = st.Pools
	}
	for _, x := range st.Replicas {
		out.Replicas = append(out.Replicas, replicaInfo(&x, now))
	}
	recs, ivs := r.status.snapshot(now)
	r.status.mu.Lock()
	out.Requests = r.status.n
	r.status.mu.Unlock()
	for _, iv := range ivs {
		out.History = append(out.History, intervalInfo(iv))
	}
	out.Decisions = make([]DecisionInfo, 0, len(recs))
	for i := range recs {
		out.Decisions = append(out.Decisions, decisionInfo(&recs[i]))
	}
	return out
}

func intervalInfo(iv statusInterval) StatusInterval {
	ratio := func(a, b float64) *float64 {
		if b == 0 {
			return nil
		}
		v := a / b
		return &v
	}
	return StatusInterval{
		Start: time.Unix(iv.start, 0).UTC(), Requests: iv.requests, Errors: iv.errors, Known: iv.known, Hits: iv.hits,
		HitRate:     ratio(float64(iv.hits), float64(iv.known)),
		CachedShare: ratio(float64(iv.cachedTokens), float64(iv.promptTokens)),
		TTFTMS:      ratio(ms(iv.ttftSum), float64(iv.ttftN)),
		LatencyMS:   ratio(ms(iv.latencySum), float64(iv.latencyN)),
	}
}

func decisionInfo(rec *decisionRecord) DecisionInfo {
	di := DecisionInfo{
		At: rec.at.UTC(), Conversation: fmt.Sprintf("%016x", rec.conv), Path: rec.path, Policy: rec.d.Trace.Policy,
		Replica: rec.replica, Reason: rec.d.Reason.String(), Status: rec.status, Attempts: rec.attempts,
		EstPrompt: rec.estPrompt, ExpectCached: rec.expectCached, CountsKnown: rec.known,
		CacheN: rec.cacheN, PromptN: rec.promptN, PredictedN: rec.predictedN,
		LatencyMS: ms(rec.latency), ErrorKind: rec.errKind, Trace: traceText(&rec.d),
	}
	if rec.ttft > 0 {
		v := ms(rec.ttft)
		di.TTFTMS = &v
	}
	return di
}
