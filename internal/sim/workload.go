package sim

import "github.com/llm-ring/llm-ring/internal/traffic"

// WorkloadRun is TraceRun for the requests of an open-loop workload
// (traffic.Workload.Requests): the same open-loop replay, each request
// named by its conversation (traffic.StageConversation) so that the
// analysis can group the rows by stage, and asking for its target (model
// and adapter: traffic.WorkloadRequest.Target; none without models).
func WorkloadRun(name string, reqs []traffic.WorkloadRequest) (traffic.Profile, func() Source, error) {
	trace := make([]traffic.TraceRequest, len(reqs))
	names := make([]string, len(reqs))
	var targets []traffic.Target
	for i := range reqs {
		trace[i] = reqs[i].TraceRequest
		names[i] = reqs[i].Conversation
		if reqs[i].Target != (traffic.Target{}) && targets == nil {
			targets = make([]traffic.Target, len(reqs))
		}
		if targets != nil {
			targets[i] = reqs[i].Target
		}
	}
	p, src, err := TraceRun(name, trace, 1)
	if err != nil {
		return traffic.Profile{}, nil, err
	}
	p.Name = name
	p.Description = "open-loop workload " + name
	return p, func() Source {
		t := src().(*traceSource) // its blocks are shared, read-only
		t.names, t.targets = names, targets
		return t
	}, nil
}
