package experiment

import (
	"fmt"

	"github.com/llm-ring/llm-ring/internal/traffic"
)

// seedWorkload is spec with the workload's requests for seed as its trace:
// the same requests the simulator sends for that seed
// (sim.WorkloadRun), named by stage, sent at their timestamps.
func (s *Spec) seedWorkload(seed int64) *Spec {
	reqs := s.Workload.Requests(traffic.OpenArrivals(s.Stages, seed), seed)
	sp := *s
	sp.Trace, sp.names = make([]traffic.TraceRequest, len(reqs)), make([]string, len(reqs))
	for i := range reqs {
		sp.Trace[i], sp.names[i] = reqs[i].TraceRequest, reqs[i].Conversation
	}
	sp.TraceName, sp.TraceSpeedup = s.Workload.Name, 1
	all, by := traffic.IdealCachedShareByStage(reqs)
	sp.ideal = append([]float64{all}, by...)
	return &sp
}

// recordIdeal writes a workload run's ideal cached shares into its metrics
// under the simulator's names (sim_ideal_cached_share, and per stage), which
// the analysis reads beside the measured cached share.
func (s *Spec) recordIdeal(file *RunFile) {
	if len(s.ideal) == 0 {
		return
	}
	if file.Metrics == nil {
		file.Metrics = map[string]float64{}
	}
	file.Metrics["sim_ideal_cached_share"] = s.ideal[0]
	for k, v := range s.ideal[1:] {
		file.Metrics[fmt.Sprintf(`sim_ideal_cached_share{stage="%d"}`, k)] = v
	}
}
