package sim

import "fmt"

// engineMetrics adds, for a paged engine (model.Config.Engine vllm or
// sglang), each replica's own counters under vLLM's names (what its
// /metrics would report at the end of the run), and the traffic's ideal
// cached share when known. The llama.cpp runs get nothing new, so the
// study's records stay as they were.
func (s *sim) engineMetrics(m map[string]float64) map[string]float64 {
	if s.spec.IdealCachedShare > 0 {
		m["sim_ideal_cached_share"] = s.spec.IdealCachedShare
	}
	for k, v := range s.spec.IdealByStage {
		m[fmt.Sprintf(`sim_ideal_cached_share{stage="%d"}`, k)] = v
	}
	if !s.spec.Model.Paged() {
		return m
	}
	for _, ref := range s.reps {
		st := s.groups[ref.group].Server(int(ref.member)).Stats()
		name := ref.name
		label := fmt.Sprintf(`{replica="%s"}`, name)
		m["vllm:prefix_cache_queries_total"+label] += float64(st.PrefixQueries)
		m["vllm:prefix_cache_hits_total"+label] += float64(st.PrefixHits)
		m["vllm:num_preemptions_total"+label] += float64(st.Preemptions)
		m["vllm:num_gpu_blocks"+label] = float64(st.NumBlocks)
		m["vllm:block_size"+label] = float64(st.BlockSize)
	}
	return m
}
