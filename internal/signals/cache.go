package signals

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// The labels of vLLM's vllm:cache_config_info that give the KV pool's
// size: vLLM's PrometheusStatLogger.log_metrics_info (vllm/v1/metrics/
// loggers.py) publishes CacheConfig.metrics_info(), every field of the
// cache configuration as a string label, on a gauge set to 1, one series
// per engine (label engine). num_gpu_blocks is "None" until the engine has
// profiled its memory.
const (
	labelBlockSize = "block_size"
	labelNumBlocks = "num_gpu_blocks"
)

// maxCacheTokens bounds a reported pool (2^40 tokens): a larger product of
// labels is a broken exposition, not a fact.
const maxCacheTokens = 1 << 40

// cacheConfig reads the first family of names present (an info gauge with
// the labels block_size and num_gpu_blocks) into the KV pool's size in
// tokens and its block size. Several engines (data parallel) each have
// their own pool, and a request is served by one of them: the smallest
// pool and the smallest block are taken. A series whose labels are missing
// or not positive whole numbers is skipped; none usable: unknown (0, 0).
func cacheConfig(fams map[string]*dto.MetricFamily, names []string) (tokens float64, block int, err error) {
	for _, name := range names {
		mf, ok := fams[name]
		if !ok {
			continue
		}
		for _, mt := range mf.GetMetric() {
			if mt.Gauge == nil && mt.Untyped == nil {
				return 0, 0, fmt.Errorf("metric family %s is a %s; want an info gauge (labels %s, %s)",
					name, strings.ToLower(mf.GetType().String()), labelBlockSize, labelNumBlocks)
			}
			bs, nb := labelInt(mt, labelBlockSize), labelInt(mt, labelNumBlocks)
			if bs <= 0 || nb <= 0 || float64(bs)*float64(nb) > maxCacheTokens {
				continue
			}
			if t := float64(bs) * float64(nb); tokens == 0 || t < tokens {
				tokens = t
			}
			if block == 0 || bs < block {
				block = bs
			}
		}
		return tokens, block, nil
	}
	return 0, 0, nil
}

// labelInt is the label key of mt as a positive whole number, or 0.
func labelInt(mt *dto.Metric, key string) int {
	for _, lp := range mt.GetLabel() {
		if lp.GetName() == key {
			n, err := strconv.Atoi(strings.TrimSpace(lp.GetValue()))
			if err != nil || n <= 0 {
				return 0
			}
			return n
		}
	}
	return 0
}

// minOf is the smaller of two values: a fact over several engines (each
// its own pool) is the one a request can count on.
func minOf(acc, v float64) float64 { return min(acc, v) }

// cacheTokens is the KV pool's size in tokens from a gauge that reports
// it (SGLang's sglang:max_total_num_tokens), the smallest over the
// engines; 0 unknown.
func cacheTokens(fams map[string]*dto.MetricFamily, names []string) (float64, error) {
	v, ok, err := pick(fams, names, minOf)
	if err != nil || !ok || v <= 0 || v > maxCacheTokens {
		return 0, err
	}
	return math.Floor(v), nil
}
