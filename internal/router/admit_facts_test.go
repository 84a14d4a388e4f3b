package router

import (
	"testing"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/replica"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/state"
)

// tokenCapacity is the token capacity admission scores pool t with (its
// controller made if the pool has had no request yet).
func (a *admitter) tokenCapacity(t *state.Table) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pool(t).c.Settings().TokenCapacity
}

func withTokenShare(share float64, capacity int64) func(*config.Router) {
	return func(c *config.Router) {
		c.Admission = config.Admission{Enabled: true, TokenShare: &share, TokenCapacity: capacity}
	}
}

// TestAdmissionTokenShareFromFacts: with token_share 0.5 a pool of vLLM
// replicas reporting KV pools of 8,192 and 16,384 tokens
// (vllm:cache_config_info) gets the token capacity 0.5 × 8,192 = 4,096
// (the smaller pool: the facts' rule); a configured token_capacity wins.
func TestAdmissionTokenShareFromFacts(t *testing.T) {
	rs := []replicaset.Replica{vllmReplica(t, "llm-0", 8192, 32), vllmReplica(t, "llm-1", 16384, 32)}
	rt, _ := poolRouter(t, rs, withSignals, withTokenShare(0.5, 0))
	tab := rt.Pools().Pool("").Table()
	waitUntil(t, "the token capacity from the replicas' KV pools", func() bool { return rt.adm.tokenCapacity(tab) == 4096 })

	rt, _ = poolRouter(t, rs[:1], withSignals, withTokenShare(0.5, 1000))
	tab = rt.Pools().Pool("").Table()
	waitUntil(t, "the replica's facts", func() bool {
		c := rt.facts.config("")
		return c != nil && c.Facts.CacheTokens == 8192
	})
	if got := rt.adm.tokenCapacity(tab); got != 1000 {
		t.Errorf("configured token_capacity 1000 with a reported pool: %d", got)
	}
}

// TestAdmissionTokenShareLlamaCpp: a llama.cpp replica reports its slots
// but no KV pool: the token term stays off, as before token_share.
func TestAdmissionTokenShareLlamaCpp(t *testing.T) {
	rep := simReplica(t, "llm-0", func(o *replica.Options) { o.Model.NParallel = 6 })
	rt, _ := poolRouter(t, []replicaset.Replica{rep}, withSignals, withTokenShare(0.5, 0))
	waitUntil(t, "the replica's slots", func() bool {
		c := rt.facts.config("")
		return c != nil && c.Facts == policy.Facts{Slots: 6}
	})
	if got := rt.adm.tokenCapacity(rt.Pools().Pool("").Table()); got != 0 {
		t.Errorf("no pool reported: token capacity %d, want 0", got)
	}
}

// TestAdmissionWorkShareFromSLO: with work_share 0.5 and default_slo_ttft
// 2 s a pool's work limit is 1 s (admission.WorkLimitFor); without a
// default SLO the term is off.
func TestAdmissionWorkShareFromSLO(t *testing.T) {
	for _, c := range []struct {
		slo  config.Duration
		want int64
	}{{config.Duration(2e9), 1e9}, {0, 0}} {
		share := 0.5
		rt, _ := poolRouter(t, []replicaset.Replica{vllmReplica(t, "llm-0", 8192, 32)}, func(rc *config.Router) {
			rc.Admission = config.Admission{Enabled: true, WorkShare: &share, DefaultSLOTTFT: c.slo}
		})
		a := rt.adm
		a.mu.Lock()
		got := a.pool(rt.Pools().Pool("").Table()).c.Settings().WorkLimitNs
		a.mu.Unlock()
		if got != c.want {
			t.Errorf("default SLO %v: work limit %d, want %d", c.slo, got, c.want)
		}
	}
}
