package sim

import (
	"fmt"
	"time"

	"github.com/llm-ring/llm-ring/internal/traffic"
)

// TraceRun returns the profile and the conversation source that replay a
// trace (the Mooncake format, traffic.ParseTrace) open loop: request i is a
// conversation of one turn — no system prompt, its synthesised text
// (traffic.TraceText: equal block ids give equal text), max_tokens its
// output length — sent at its timestamp divided by speedup, whatever the
// others are doing, with no conversation header (the router must find the
// reuse from the prompt alone). In the simulator's closed loop this is one
// user per request, whose only think time is its timestamp.
//
// The source returned makes a new Source for each run: a run's source
// caches block texts, and runs are simulated in parallel.
func TraceRun(name string, reqs []traffic.TraceRequest, speedup float64) (traffic.Profile, func() Source, error) {
	if len(reqs) == 0 {
		return traffic.Profile{}, nil, fmt.Errorf("trace %s: no request", name)
	}
	if !(speedup > 0) {
		return traffic.Profile{}, nil, fmt.Errorf("trace speedup: must be > 0, got %g", speedup)
	}
	maxOut, last := 1, 0.0
	for _, r := range reqs {
		maxOut = max(maxOut, r.OutputLength)
		last = max(last, float64(r.TimestampMS)/1000/speedup)
	}
	no := false
	p := traffic.Profile{
		Name: "trace:" + name, Description: fmt.Sprintf("%d requests replayed open loop from %s, speed-up %g", len(reqs), name, speedup),
		Conversations: len(reqs), Concurrency: len(reqs), TurnsMin: 1, TurnsMax: 1,
		UserWordsMin: 1, UserWordsMax: 1, ThinkSMin: 0, ThinkSMax: last,
		MaxTokens: maxOut, MaxContextTokens: 1 << 30, SystemPrompts: 1, ConversationHeader: &no,
	}
	if err := p.Validate(); err != nil {
		return traffic.Profile{}, nil, fmt.Errorf("trace %s: %w", name, err)
	}
	return p, func() Source { return &traceSource{reqs: reqs, speedup: speedup, text: map[int64]string{}} }, nil
}

// traceSource makes trace request i a one-turn conversation. Block texts
// are cached (a trace reuses its blocks: that is the point of it), so a
// traceSource belongs to one run.
type traceSource struct {
	reqs    []traffic.TraceRequest
	names   []string         // conversation names (nil: trace-LINE)
	targets []traffic.Target // what each asks for (nil: no model named)
	speedup float64
	text    map[int64]string
}

// Conversation implements Source.
func (t *traceSource) Conversation(i int) traffic.Conversation {
	r := &t.reqs[i]
	id := fmt.Sprintf("trace-%d", r.Line)
	if t.names != nil {
		id = t.names[i]
	}
	var tg traffic.Target
	if t.targets != nil {
		tg = t.targets[i]
	}
	return traffic.Conversation{
		ID: id, Model: tg.Model, Adapter: tg.Adapter,
		Turns: []traffic.Turn{{
			User:      traffic.TraceTextCached(r, t.text),
			MaxTokens: r.OutputLength,
			ThinkS:    (time.Duration(r.TimestampMS) * time.Millisecond).Seconds() / t.speedup,
		}},
	}
}
