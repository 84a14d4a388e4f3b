package replica

import (
	"strconv"
	"time"

	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/policy"
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

// The engine faces' names (Options.API): vLLM's vllm/v1/metrics/loggers.py
// and SGLang's python/sglang/srt/metrics/collector.py, with their model_name
// label.
var (
	descVLLMRunning = prometheus.NewDesc("vllm:num_requests_running", "Number of requests in model execution batches.", []string{"model_name"}, nil)
	descVLLMWaiting = prometheus.NewDesc("vllm:num_requests_waiting", "Number of requests waiting to be processed.", []string{"model_name"}, nil)
	descVLLMKV      = prometheus.NewDesc("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", []string{"model_name"}, nil)
	descVLLMPrompt  = prometheus.NewDesc("vllm:prompt_tokens_total", "Number of prefill tokens processed.", []string{"model_name"}, nil)
	descVLLMGen     = prometheus.NewDesc("vllm:generation_tokens_total", "Number of generation tokens processed.", []string{"model_name"}, nil)
	// The paged engine's own (Config.Engine vllm or sglang), vLLM's names
	// (vllm/v1/metrics/loggers.py): token counters of prefix-cache
	// lookups at admission and their hits, preemptions, and the cache
	// configuration as an info gauge.
	descVLLMQueries     = prometheus.NewDesc("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", []string{"model_name"}, nil)
	descVLLMHits        = prometheus.NewDesc("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", []string{"model_name"}, nil)
	descVLLMPreemptions = prometheus.NewDesc("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", []string{"model_name"}, nil)
	descVLLMCacheConfig = prometheus.NewDesc("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", []string{"block_size", "num_gpu_blocks", "enable_prefix_caching", "engine"}, nil)
	descSGRunning       = prometheus.NewDesc("sglang:num_running_reqs", "The number of running requests.", []string{"model_name"}, nil)
	descSGQueue         = prometheus.NewDesc("sglang:num_queue_reqs", "The number of requests in the waiting queue.", []string{"model_name"}, nil)
	descSGUsage         = prometheus.NewDesc("sglang:token_usage", "The token usage.", []string{"model_name"}, nil)
	descSGPrompt        = prometheus.NewDesc("sglang:prompt_tokens_total", "Number of prefill tokens processed.", []string{"model_name"}, nil)
	descSGGen           = prometheus.NewDesc("sglang:generation_tokens_total", "Number of generation tokens processed.", []string{"model_name"}, nil)
	descSGCacheHit      = prometheus.NewDesc("sglang:cache_hit_rate", "The prefix cache hit rate.", []string{"model_name"}, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	descs := allDescs
	switch c.r.h.api {
	case APIVLLM:
		descs = []*prometheus.Desc{descVLLMRunning, descVLLMWaiting, descVLLMKV, descVLLMPrompt, descVLLMGen}
		if c.r.h.modelConfig.Paged() {
			descs = append(descs, descVLLMQueries, descVLLMHits, descVLLMPreemptions, descVLLMCacheConfig)
		}
	case APISGLang:
		descs = []*prometheus.Desc{descSGRunning, descSGQueue, descSGUsage, descSGPrompt, descSGGen, descSGCacheHit}
	}
	descs = append(descs[:len(descs):len(descs)], c.loraDescs()...)
	for _, d := range descs {
		ch <- d
	}
}

// collectEngine writes the vLLM or SGLang series; it reports whether it did.
func (c *collector) collectEngine(ch chan<- prometheus.Metric, st model.Stats) bool {
	m := c.r.h.baseModels()[0] // the model_name label: the first served model (vLLM: served_model_name)
	g := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, m)
	}
	k := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, m)
	}
	switch c.r.h.api {
	case APIVLLM:
		g(descVLLMRunning, float64(st.Processing))
		g(descVLLMWaiting, float64(st.Deferred))
		g(descVLLMKV, st.KVUsage)
		k(descVLLMPrompt, float64(st.PromptTokens))
		k(descVLLMGen, float64(st.PredictedTokens))
		if c.r.h.modelConfig.Paged() {
			k(descVLLMQueries, float64(st.PrefixQueries))
			k(descVLLMHits, float64(st.PrefixHits))
			k(descVLLMPreemptions, float64(st.Preemptions))
			ch <- prometheus.MustNewConstMetric(descVLLMCacheConfig, prometheus.GaugeValue, 1,
				strconv.Itoa(st.BlockSize), strconv.Itoa(st.NumBlocks), "True", "0")
		}
	case APISGLang:
		g(descSGRunning, float64(st.Processing))
		g(descSGQueue, float64(st.Deferred))
		g(descSGUsage, st.KVUsage)
		k(descSGPrompt, float64(st.PromptTokens))
		k(descSGGen, float64(st.PredictedTokens))
		g(descSGCacheHit, ratio(float64(st.CacheN), float64(st.PromptTokens+st.CacheN)))
	default:
		return false
	}
	return true
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	var st model.Stats
	var now time.Duration
	var ad policy.Adapters
	var resident int
	c.r.h.inspect(c.r.index, func(s *model.Server, t time.Duration) {
		st, now, ad, resident = s.Stats(), t, s.Adapters(), len(s.ResidentAdapters())
	})
	if c.collectEngine(ch, st) {
		c.collectLoRA(ch, ad, resident)
		return
	}
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
