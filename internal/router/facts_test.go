package router

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/replica"
	"github.com/llm-ring/llm-ring/internal/replicaset"
)

// vllmReplica is a simulated replica with vLLM's face and engine (a paged
// KV pool of kvTokens in blocks of block tokens): its /metrics publishes
// vllm:cache_config_info.
func vllmReplica(t *testing.T, name string, kvTokens, block int) replicaset.Replica {
	t.Helper()
	rep := simReplica(t, name, func(o *replica.Options) {
		o.API = replica.APIVLLM
		o.Model.Engine, o.Model.KVTokens, o.Model.BlockSize = model.EngineVLLM, kvTokens, block
	})
	rep.Engine = "vllm"
	return rep
}

func withSignals(c *config.Router) { c.Signals.Interval = config.Duration(10 * time.Millisecond) }

// adminDo sends one admin request with the token and returns its status
// and body.
func adminDo(t *testing.T, rt *Router, method, path, body string) (int, string) {
	t.Helper()
	admin := httptest.NewServer(rt.AdminHandler())
	defer admin.Close()
	req, _ := http.NewRequest(method, admin.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// adminSettings is GET /admin/policy's policy and settings.
func adminSettings(t *testing.T, rt *Router) PolicySettings {
	t.Helper()
	code, body := adminDo(t, rt, http.MethodGet, "/admin/policy", "")
	var s PolicySettings
	if err := json.Unmarshal([]byte(body), &s); code != http.StatusOK || err != nil {
		t.Fatalf("GET /admin/policy: %d %s", code, body)
	}
	return s
}

// TestLiveFacts (issue 19): the live router reads its vLLM replicas'
// cache configuration and gives the pool's policy the smallest pool
// (predictive's cache_tokens) and block size (kv-cost's block_size); GET
// /admin/policy shows them; a policy switched to by PUT takes them; a key
// the PUT sets wins over them when they change.
func TestLiveFacts(t *testing.T) {
	small, large := vllmReplica(t, "llm-0", 8192, 32), vllmReplica(t, "llm-1", 16384, 32)
	rt, _ := poolRouter(t, []replicaset.Replica{small, large}, withAdmin(t, "s3cret"), withSignals,
		func(c *config.Router) { c.Policy = "predictive" })
	waitUntil(t, "predictive's cache_tokens from the replicas", func() bool {
		p, _ := policy.SettingsOf(rt.Table().Policy()).(*policy.Predictive)
		return p != nil && p.CacheTokens == 8192
	})
	if s := adminSettings(t, rt); s.Policy != "predictive" || s.Settings["cache_tokens"] != 8192.0 || s.Settings["slots"] != 4.0 {
		t.Errorf("GET /admin/policy: %+v, want cache_tokens 8192 (the smaller replica's) and slots 4 (unreported: the default)", s)
	}
	code, body := adminDo(t, rt, http.MethodPut, "/admin/policy", `{"policy":"kv-cost"}`)
	if code != http.StatusOK || !strings.Contains(body, `"block_size": 32`) {
		t.Fatalf("PUT kv-cost: %d %s, want block_size 32 (the replicas')", code, body)
	}
	if code, body := adminDo(t, rt, http.MethodPut, "/admin/policy", `{"settings":{"block_size":64}}`); code != http.StatusOK {
		t.Fatalf("PUT block_size: %d %s", code, body)
	}
	// The smaller replica leaves: the facts change (cache 16,384); the
	// admin's block_size stays.
	rt.SetReplicas([]replicaset.Replica{large})
	waitUntil(t, "the pool's facts after the change", func() bool {
		return rt.facts.config("").Facts.CacheTokens == 16384
	})
	if s := adminSettings(t, rt); s.Policy != "kv-cost" || s.Settings["block_size"] != 64.0 {
		t.Errorf("after the change: %+v, want kv-cost with the admin's block_size 64", s)
	}
	// Back to predictive: it starts from the configuration and the facts.
	if code, body := adminDo(t, rt, http.MethodPut, "/admin/policy", `{"policy":"predictive"}`); code != http.StatusOK ||
		!strings.Contains(body, `"cache_tokens": 16384`) {
		t.Errorf("PUT predictive: %d %s, want cache_tokens 16384", code, body)
	}
}

// TestLiveFactsConfigWins: policies.predictive.cache_tokens in the
// configuration wins over what the replicas report; the block size,
// not a predictive key, changes nothing there.
func TestLiveFactsConfigWins(t *testing.T) {
	rep := vllmReplica(t, "llm-0", 8192, 32)
	rt, _ := poolRouter(t, []replicaset.Replica{rep}, withSignals, func(c *config.Router) {
		c.Policy = "predictive"
		c.Policies = map[string]json.RawMessage{"predictive": json.RawMessage(`{"cache_tokens": 1000}`)}
	})
	waitUntil(t, "the replica's facts", func() bool {
		c := rt.facts.config("")
		return c != nil && c.Facts == policy.Facts{CacheTokens: 8192, BlockSize: 32}
	})
	if p, _ := policy.SettingsOf(rt.Table().Policy()).(*policy.Predictive); p == nil || p.CacheTokens != 1000 {
		t.Errorf("predictive = %+v, want the configured cache_tokens 1000", p)
	}
}

// TestLiveFactsLlamaCpp: a llama.cpp replica gives its slots (GET /props
// total_slots, --parallel) and no cache configuration: predictive takes
// the slots and keeps its cache_tokens.
func TestLiveFactsLlamaCpp(t *testing.T) {
	rep := simReplica(t, "llm-0", func(o *replica.Options) { o.Model.NParallel = 6 })
	rt, _ := poolRouter(t, []replicaset.Replica{rep}, withSignals, func(c *config.Router) { c.Policy = "predictive" })
	waitUntil(t, "predictive's slots from /props", func() bool {
		p, _ := policy.SettingsOf(rt.Table().Policy()).(*policy.Predictive)
		return p != nil && p.Slots == 6
	})
	if c := rt.facts.config(""); c == nil || c.Facts != (policy.Facts{Slots: 6}) {
		t.Errorf("facts from llama.cpp: %+v, want slots 6 only", c)
	}
	if p, _ := policy.SettingsOf(rt.Table().Policy()).(*policy.Predictive); p.CacheTokens != 65536 {
		t.Errorf("predictive = %+v, want the default cache_tokens", p)
	}
}

// TestLiveFactsPerPool: each pool takes its own replicas' facts, and
// models.pools.MODEL.policies.predictive.cache_tokens wins in its pool.
func TestLiveFactsPerPool(t *testing.T) {
	a, b := vllmReplica(t, "a-0", 4096, 16), vllmReplica(t, "b-0", 8192, 16)
	a.Models, b.Models = []replicaset.Model{{Name: "model-a"}}, []replicaset.Model{{Name: "model-b"}}
	rt, _ := poolRouter(t, []replicaset.Replica{a, b}, withSignals, func(c *config.Router) {
		c.Policy = "predictive"
		c.Models = config.Models{Pools: map[string]config.ModelPool{"model-a": {
			Policies: map[string]json.RawMessage{"predictive": json.RawMessage(`{"cache_tokens": 2000}`)}}}}
	})
	cache := func(m string) float64 {
		p, _ := policy.SettingsOf(rt.Pools().Pool(m).Table().Policy()).(*policy.Predictive)
		return p.CacheTokens
	}
	waitUntil(t, "model-b's facts", func() bool { return cache("model-b") == 8192 })
	waitUntil(t, "model-a's facts", func() bool {
		c := rt.facts.config("model-a")
		return c != nil && c.Facts.CacheTokens == 4096
	})
	if got := cache("model-a"); got != 2000 {
		t.Errorf("model-a cache_tokens = %v, want the pool's configured 2000", got)
	}
}
