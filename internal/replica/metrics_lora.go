package replica

import (
	"strconv"
	"strings"

	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/prometheus/client_golang/prometheus"
)

// LoRA adapter series, exported when the model has adapter slots
// (Model.MaxLoras > 0), as the engines export them only with LoRA enabled.
//
// vLLM (vllm/v1/metrics/loggers.py): the info gauge vllm:lora_requests_info
// whose labels name the adapters with running and with waiting requests
// (comma-separated) and max_lora, and whose value is the time of the
// sample (set_to_current_time, Unix seconds). vLLM keeps every label
// combination it has set (the newest timestamp is the current one); the
// replica exports only the current one.
//
// SGLang (python/sglang/srt/metrics/collector.py): only counts of the
// adapter pool (no adapter names): sglang:lora_pool_slots_used,
// sglang:lora_pool_slots_total, sglang:lora_pool_utilization.
var (
	descVLLMLoRA = prometheus.NewDesc("vllm:lora_requests_info", "Running stats on lora requests.",
		[]string{"max_lora", "running_lora_adapters", "waiting_lora_adapters"}, nil)
	descSGLoRAUsed  = prometheus.NewDesc("sglang:lora_pool_slots_used", "Number of LoRA adapter slots currently occupied in GPU memory.", []string{"model_name"}, nil)
	descSGLoRATotal = prometheus.NewDesc("sglang:lora_pool_slots_total", "Total number of LoRA adapter slots in GPU memory.", []string{"model_name"}, nil)
	descSGLoRAUtil  = prometheus.NewDesc("sglang:lora_pool_utilization", "Fraction of LoRA adapter slots occupied.", []string{"model_name"}, nil)
)

// loraDescs are the adapter series of the replica's face (none without
// adapter slots, or on the llama.cpp face).
func (c *collector) loraDescs() []*prometheus.Desc {
	if c.r.h.modelConfig.MaxLoras == 0 {
		return nil
	}
	switch c.r.h.api {
	case APIVLLM:
		return []*prometheus.Desc{descVLLMLoRA}
	case APISGLang:
		return []*prometheus.Desc{descSGLoRAUsed, descSGLoRATotal, descSGLoRAUtil}
	}
	return nil
}

// collectLoRA writes the adapter series: ad is the model's report,
// resident the adapters in a slot.
func (c *collector) collectLoRA(ch chan<- prometheus.Metric, ad policy.Adapters, resident int) {
	if len(c.loraDescs()) == 0 {
		return
	}
	switch c.r.h.api {
	case APIVLLM:
		now := float64(c.r.h.clock.Now().UnixNano()) / 1e9
		ch <- prometheus.MustNewConstMetric(descVLLMLoRA, prometheus.GaugeValue, now,
			strconv.Itoa(ad.Max), strings.Join(ad.Running, ","), strings.Join(ad.Waiting, ","))
	case APISGLang:
		total := c.r.h.modelConfig.MaxLoras
		m := c.r.h.baseModels()[0]
		ch <- prometheus.MustNewConstMetric(descSGLoRAUsed, prometheus.GaugeValue, float64(resident), m)
		ch <- prometheus.MustNewConstMetric(descSGLoRATotal, prometheus.GaugeValue, float64(total), m)
		ch <- prometheus.MustNewConstMetric(descSGLoRAUtil, prometheus.GaugeValue, float64(resident)/float64(total), m)
	}
}
