package replica

import (
	"time"

	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/prometheus/client_golang/prometheus"
)

// The metrics of GET /metrics: llama.cpp's names (llamacpp:…) and meanings,
// read from the model at scrape time; times are model time. The llm_ring_sim_
// metrics are the simulator's own (the RAM prompt cache).
var (
	descPromptTokens                        = prometheus.NewDesc("llamacpp:prompt_tokens_total", "Number of prompt tokens processed.", nil, nil)
	descPromptSeconds                       = prometheus.NewDesc("llamacpp:prompt_seconds_total", "Prompt process time", nil, nil)
	descPredicted                           = prometheus.NewDesc("llamacpp:tokens_predicted_total", "Number of generation tokens processed.", nil, nil)
	descPredictedSecs                       = prometheus.NewDesc("llamacpp:tokens_predicted_seconds_total", "Predict process time", nil, nil)
	descDecodes                             = prometheus.NewDesc("llamacpp:n_decode_total", "Total number of llama_decode() calls", nil, nil)
	descBusyPerDecode                       = prometheus.NewDesc("llamacpp:n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call", nil, nil)
	descPromptRate                          = prometheus.NewDesc("llamacpp:prompt_tokens_seconds", "Average prompt throughput in tokens/s.", nil, nil)
	descPredictedRate                       = prometheus.NewDesc("llamacpp:predicted_tokens_seconds", "Average generation throughput in tokens/s.", nil, nil)
	descKVUsage                             = prometheus.NewDesc("llamacpp:kv_cache_usage_ratio", "KV-cache usage. 1 means 100 percent usage.", nil, nil)
	descKVTokens                            = prometheus.NewDesc("llamacpp:kv_cache_tokens", "KV-cache tokens.", nil, nil)
	descProcessing                          = prometheus.NewDesc("llamacpp:requests_processing", "Number of requests processing.", nil, nil)
	descDeferred                            = prometheus.NewDesc("llamacpp:requests_deferred", "Number of requests deferred.", nil, nil)
	descCacheReused                         = prometheus.NewDesc("llm_ring_sim_prompt_tokens_reused_total", "Prompt tokens reused from a slot or the RAM prompt cache (cache_n).", nil, nil)
	descRAMEntries                          = prometheus.NewDesc("llm_ring_sim_ram_cache_entries", "Entries of the RAM prompt cache.", nil, nil)
	descRAMBytes                            = prometheus.NewDesc("llm_ring_sim_ram_cache_bytes", "Size of the RAM prompt cache.", nil, nil)
	descRAMEvictions                        = prometheus.NewDesc("llm_ring_sim_ram_cache_evictions_total", "RAM prompt cache entries evicted for room.", nil, nil)
	descModelTime                           = prometheus.NewDesc("llm_ring_sim_model_time_seconds", "Model time of the replica's host.", nil, nil)
	descRequestsServed                      = prometheus.NewDesc("llm_ring_sim_requests_total", "Requests finished.", nil, nil)
	allDescs                                = []*prometheus.Desc{descPromptTokens, descPromptSeconds, descPredicted, descPredictedSecs, descDecodes, descBusyPerDecode, descPromptRate, descPredictedRate, descKVUsage, descKVTokens, descProcessing, descDeferred, descCacheReused, descRAMEntries, descRAMBytes, descRAMEvictions, descModelTime, descRequestsServed}
	_                  prometheus.Collector = (*collector)(nil)
)

// collector reads a replica's statistics at scrape time.
type collector struct{ r *Replica }

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	var st model.Stats
	var now time.Duration
	c.r.h.inspect(c.r.index, func(s *model.Server, t time.Duration) { st, now = s.Stats(), t })
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	counter(descPromptTokens, float64(st.PromptTokens))
	counter(descPromptSeconds, st.PromptTime.Seconds())
	counter(descPredicted, float64(st.PredictedTokens))
	counter(descPredictedSecs, st.PredictedTime.Seconds())
	counter(descDecodes, float64(st.Decodes))
	gauge(descBusyPerDecode, ratio(float64(st.BusySlotSteps), float64(st.Decodes)))
	gauge(descPromptRate, ratio(float64(st.PromptTokens), st.PromptTime.Seconds()))
	gauge(descPredictedRate, ratio(float64(st.PredictedTokens), st.PredictedTime.Seconds()))
	gauge(descKVUsage, st.KVUsage)
	gauge(descKVTokens, float64(st.KVTokens))
	gauge(descProcessing, float64(st.Processing))
	gauge(descDeferred, float64(st.Deferred))
	counter(descCacheReused, float64(st.CacheN))
	gauge(descRAMEntries, float64(st.CacheEntries))
	gauge(descRAMBytes, float64(st.CacheBytes))
	counter(descRAMEvictions, float64(st.CacheEvictions))
	gauge(descModelTime, now.Seconds())
	counter(descRequestsServed, float64(st.Requests))
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
