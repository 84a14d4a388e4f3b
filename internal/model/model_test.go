package model

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// run advances r until it is idle and returns the results by id.
func run(t testing.TB, r *Replica) map[ID]*Result {
	t.Helper()
	out := map[ID]*Result{}
	var evs []Event
	for i := 0; ; i++ {
		at, ok := r.NextEvent()
		if !ok {
			return out
		}
		if i > 1e6 {
			t.Fatal("replica never goes idle")
		}
		evs = r.Advance(at, evs[:0])
		for _, e := range evs {
			if e.Kind == EventDone {
				out[e.ID] = e.Result
			}
		}
	}
}

// runUntil advances r to time until and returns the events.
func runUntil(r *Replica, until time.Duration) []Event {
	var all []Event
	for {
		at, ok := r.NextEvent()
		if !ok || at > until {
			return r.Advance(until, all)
		}
		all = r.Advance(at, all)
	}
}

func mustNew(t testing.TB, cfg Config) *Replica {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustSubmit(t testing.TB, r *Replica, now time.Duration, req Request) ID {
	t.Helper()
	id, err := r.Submit(now, req)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// seqTokens returns n distinct-looking tokens derived from seed.
func seqTokens(seed, n int) []Token {
	out := make([]Token, n)
	for i := range out {
		out[i] = Token(splitmix64(uint64(seed)<<32|uint64(i)) % NumOrdinary)
	}
	return out
}

func TestCalibrationMatchesTheStudy(t *testing.T) {
	// The study measured a 28-token prompt at 376 ms cold and 32 ms from
	// cache on Qwen2.5-0.5B (CPU). The default costs reproduce both:
	// cold:   19 + 28 × 12.7 + 0.001 × (0+…+27)    = 374.978 ms
	// cached: 19 + 1 × 12.7 + 0.001 × 27 (1 token)  =  31.73 ms
	r := mustNew(t, DefaultConfig())
	prompt := seqTokens(1, 28)
	id1 := mustSubmit(t, r, 0, Request{Tokens: prompt, NPredict: 8})
	cold := run(t, r)[id1]
	id2 := mustSubmit(t, r, 10*time.Second, Request{Tokens: prompt, NPredict: 8})
	warm := run(t, r)[id2]

	if cold.CacheN != 0 || cold.PromptN != 28 {
		t.Errorf("cold: cache_n=%d prompt_n=%d, want 0 and 28", cold.CacheN, cold.PromptN)
	}
	if warm.CacheN != 27 || warm.PromptN != 1 {
		t.Errorf("cached: cache_n=%d prompt_n=%d, want 27 and 1", warm.CacheN, warm.PromptN)
	}
	if got, want := cold.PromptTime(), 374978*time.Microsecond; got != want {
		t.Errorf("cold prompt time %v, want %v", got, want)
	}
	if got, want := warm.PromptTime(), 31727*time.Microsecond; got != want {
		t.Errorf("cached prompt time %v, want %v", got, want)
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"cold", ms(cold.PromptTime()), 376}, {"cached", ms(warm.PromptTime()), 32}} {
		if d := (c.got - c.want) / c.want; d < -0.02 || d > 0.02 {
			t.Errorf("%s: %.1f ms is more than 2%% from the study's %.0f ms", c.name, c.got, c.want)
		}
	}
}

func TestMultiTurnConversationHitsTheCache(t *testing.T) {
	turn1 := []Message{{"user", "Explain consistent hashing with bounded loads in a few sentences."}}
	p1 := ChatTokens(turn1)

	r := mustNew(t, DefaultConfig())
	id1 := mustSubmit(t, r, 0, Request{Tokens: p1, NPredict: 64})
	res1 := run(t, r)[id1]

	turn2 := append(slices.Clone(turn1),
		Message{"assistant", res1.Output.Text},
		Message{"user", "And what changes for LLM serving?"})
	p2 := ChatTokens(turn2)
	id2 := mustSubmit(t, r, time.Minute, Request{Tokens: p2, NPredict: 64})
	res2 := run(t, r)[id2]

	if frac := float64(res2.CacheN) / float64(len(p2)); frac < 0.70 {
		t.Errorf("turn 2 reused %d of %d prompt tokens (%.0f%%), want ≥ 70%%", res2.CacheN, len(p2), 100*frac)
	}
	// The cache holds prompt 1 and all of answer 1 but its last token
	// (sampled, never decoded).
	if want := len(p1) + res1.PredictedN - 1; res2.CacheN != want {
		t.Errorf("turn 2 cache_n = %d, want len(prompt1)+answer1-1 = %d", res2.CacheN, want)
	}
	if res2.CacheN+res2.PromptN != len(p2) {
		t.Errorf("cache_n + prompt_n = %d, want %d", res2.CacheN+res2.PromptN, len(p2))
	}

	fresh := mustNew(t, DefaultConfig())
	id3 := mustSubmit(t, fresh, 0, Request{Tokens: p2, NPredict: 64})
	if res3 := run(t, fresh)[id3]; res3.CacheN != 0 {
		t.Errorf("turn 2 on a fresh replica reused %d tokens, want 0", res3.CacheN)
	}
	if res2.Output.Text == "" || res2.Output.Text == res1.Output.Text {
		t.Errorf("answers should be non-empty and differ between turns")
	}
}

func TestRAMCacheEvictsLeastRecentlyUsed(t *testing.T) {
	// One slot and room for about 3 conversations of ~1,000 tokens in RAM:
	// after 8 conversations, the last ones are still cached, the first
	// ones are gone.
	cfg := DefaultConfig()
	cfg.NParallel, cfg.CtxSize = 1, 4096
	cfg.BytesPerToken = 1 << 10
	cfg.CacheRAMMiB = 3 // 3 MiB / 1 KiB = 3,072 tokens
	r := mustNew(t, cfg)
	const convs = 8
	prompts := make([][]Token, convs)
	now := time.Duration(0)
	for c := range prompts {
		prompts[c] = seqTokens(100+c, 1000)
		mustSubmit(t, r, now, Request{Tokens: prompts[c], NPredict: 4})
		run(t, r)
		now += time.Hour
	}
	st := r.Server().Stats()
	if st.CacheEvictions == 0 || st.CacheBytes > 3<<20 {
		t.Fatalf("evictions=%d bytes=%d: the cache should have evicted and stay under 3 MiB", st.CacheEvictions, st.CacheBytes)
	}
	reuse := make([]int, convs)
	for c := range prompts {
		reuse[c] = r.Server().CachedPrefix(prompts[c])
	}
	for c, n := range reuse {
		switch {
		case c < convs-4 && n != 0:
			t.Errorf("conversation %d (old) still has %d cached tokens, want 0 (evicted)", c, n)
		case c >= convs-3 && n != 1000:
			t.Errorf("conversation %d (recent) has %d cached tokens, want 1000", c, n)
		}
	}
	// Coming back to a recent conversation loads it from RAM.
	id := mustSubmit(t, r, now, Request{Tokens: append(slices.Clone(prompts[convs-2]), seqTokens(999, 20)...), NPredict: 4})
	if res := run(t, r)[id]; res.CacheN != 1000 {
		t.Errorf("recent conversation reused %d tokens, want 1000", res.CacheN)
	}
	if r.Server().Stats().CacheLoads != 1 {
		t.Errorf("expected one load from the RAM cache")
	}
}

func TestCachePromptFalseReusesNothing(t *testing.T) {
	r := mustNew(t, DefaultConfig())
	p := seqTokens(5, 200)
	mustSubmit(t, r, 0, Request{Tokens: p, NPredict: 4})
	run(t, r)
	id := mustSubmit(t, r, time.Minute, Request{Tokens: p, NPredict: 4, NoCache: true})
	if res := run(t, r)[id]; res.CacheN != 0 || res.PromptN != 200 {
		t.Errorf("cache_prompt=false: cache_n=%d prompt_n=%d, want 0 and 200", res.CacheN, res.PromptN)
	}
}

func TestBatchStepCost(t *testing.T) {
	// With no attention cost, N slots generating together step at exactly
	// overhead + N × per-token: the decode time of each request is
	// (tokens − 1) × that.
	cfg := DefaultConfig()
	cfg.AttnCost = 0
	cfg.AnswerMin, cfg.AnswerMax = 1000, 1000 // stop at n_predict
	for _, n := range []int{1, 2, 4} {
		r := mustNew(t, cfg)
		var ids []ID
		for i := 0; i < n; i++ {
			ids = append(ids, mustSubmit(t, r, 0, Request{Tokens: seqTokens(10+i, 50), NPredict: 20}))
		}
		res := run(t, r)
		step := cfg.StepOverhead + time.Duration(n)*cfg.TokenCost
		prefill := cfg.StepOverhead + time.Duration(n*50)*cfg.TokenCost // one step holds every prompt
		for _, id := range ids {
			rr := res[id]
			if rr.PromptTime() != prefill {
				t.Errorf("n=%d: prompt time %v, want one step of %d tokens = %v", n, rr.PromptTime(), n*50, prefill)
			}
			if want := 19 * step; rr.PredictedTime() != want {
				t.Errorf("n=%d: decode time %v, want 19 steps × %v = %v", n, rr.PredictedTime(), step, want)
			}
		}
	}
}

func TestAttentionMakesDeepTokensCostMore(t *testing.T) {
	// One slot decoding alone at positions p, p+1, …: step j costs
	// overhead + TokenCost + AttnCost × (p + j).
	cfg := DefaultConfig()
	cfg.AnswerMin, cfg.AnswerMax = 1000, 1000
	r := mustNew(t, cfg)
	id := mustSubmit(t, r, 0, Request{Tokens: seqTokens(3, 1000), NPredict: 11})
	res := run(t, r)[id]
	var want time.Duration
	for j := 0; j < 10; j++ {
		want += cfg.StepOverhead + cfg.TokenCost + cfg.AttnCost*time.Duration(1000+j)
	}
	if res.PredictedTime() != want {
		t.Errorf("decode time %v, want %v", res.PredictedTime(), want)
	}
	wantPrompt := cfg.StepOverhead + 1000*cfg.TokenCost + cfg.AttnCost*(1000*999/2)
	if res.PromptTime() != wantPrompt {
		t.Errorf("prompt time %v, want %v", res.PromptTime(), wantPrompt)
	}
}

func TestPrefillArrivingMidGenerationSlowsTheOthers(t *testing.T) {
	cfg := DefaultConfig()
	cfg.AttnCost = 0
	cfg.AnswerMin, cfg.AnswerMax = 1000, 1000
	r := mustNew(t, cfg)
	a := mustSubmit(t, r, 0, Request{Tokens: seqTokens(1, 10), NPredict: 100, TokenEvents: true})
	// A's prompt step: 19 + 10×12.7 = 146 ms; then steps of 31.7 ms.
	arrival := 500 * time.Millisecond
	evs := runUntil(r, arrival)
	b := mustSubmit(t, r, arrival, Request{Tokens: seqTokens(2, 300), NPredict: 5})
	evs = append(evs, runUntil(r, time.Hour)...)

	var times []time.Duration
	for _, e := range evs {
		if e.ID == a && e.Replica == 0 && (e.Kind == EventFirstToken || e.Kind == EventToken) {
			times = append(times, e.At)
		}
	}
	alone := cfg.StepOverhead + cfg.TokenCost
	withPrefill := cfg.StepOverhead + cfg.TokenCost + 300*cfg.TokenCost
	together := cfg.StepOverhead + 2*cfg.TokenCost
	var sawPrefill, sawTogether bool
	for k := 1; k < len(times); k++ {
		d := times[k] - times[k-1]
		switch {
		case times[k] <= arrival:
			if d != alone {
				t.Fatalf("step %d before B arrived took %v, want %v", k, d, alone)
			}
		case d == withPrefill:
			sawPrefill = true
		case d == together:
			sawTogether = true
		case d != alone:
			t.Fatalf("step %d took %v: none of alone %v, with B's prefill %v, with B decoding %v", k, d, alone, withPrefill, together)
		}
	}
	if !sawPrefill || !sawTogether {
		t.Errorf("A's steps: saw B's prefill step: %v, saw the two decoding together: %v", sawPrefill, sawTogether)
	}
	_ = b
}

func TestTokenEventsDoNotChangeResults(t *testing.T) {
	// Jumping over identical decode steps is exact: the same traffic gives
	// the same results with per-token events on or off.
	results := func(tokenEvents bool) []Result {
		r := mustNew(t, DefaultConfig())
		var out []Result
		var evs []Event
		now := time.Duration(0)
		for i := 0; i < 40; i++ {
			// Arrivals every 70 ms land in the middle of decode runs.
			now += 70 * time.Millisecond
			evs = runUntil(r, now)
			for _, e := range evs {
				if e.Kind == EventDone {
					out = append(out, *e.Result)
				}
			}
			mustSubmit(t, r, now, Request{Tokens: seqTokens(i%7, 30+i*13), NPredict: 30 + i, TokenEvents: tokenEvents && i%3 == 0})
		}
		for _, e := range runUntil(r, time.Hour) {
			if e.Kind == EventDone {
				out = append(out, *e.Result)
			}
		}
		slices.SortFunc(out, func(a, b Result) int { return int(a.ID) - int(b.ID) })
		return out
	}
	a, b := results(false), results(true)
	if len(a) != 40 || len(b) != 40 {
		t.Fatalf("%d and %d results, want 40", len(a), len(b))
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Output.Text != y.Output.Text {
			t.Fatalf("request %d: answers differ", i+1)
		}
		x.Output, y.Output = Output{}, Output{}
		if !reflect.DeepEqual(x, y) {
			t.Fatalf("request %d differs:\n%+v\n%+v", i+1, x, y)
		}
	}
}

func TestQueueIsFIFO(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NParallel, cfg.CtxSize = 1, 4096
	r := mustNew(t, cfg)
	var ids []ID
	for i := 0; i < 4; i++ {
		ids = append(ids, mustSubmit(t, r, 0, Request{Tokens: seqTokens(i, 40), NPredict: 10}))
	}
	if st := r.Server().Stats(); st.Processing != 1 || st.Deferred != 3 {
		t.Fatalf("processing=%d deferred=%d, want 1 and 3", st.Processing, st.Deferred)
	}
	res := run(t, r)
	for i := 1; i < len(ids); i++ {
		prev, cur := res[ids[i-1]], res[ids[i]]
		if cur.Started != prev.Done {
			t.Errorf("request %d started at %v, want when request %d finished (%v)", i, cur.Started, i-1, prev.Done)
		}
	}
}

func TestSubmitRejects(t *testing.T) {
	cfg := DefaultConfig()
	r := mustNew(t, cfg)
	tests := []struct {
		name string
		req  Request
		want error
	}{
		// A prompt filling the slot's context leaves no room to generate.
		{"prompt of n_ctx tokens", Request{Tokens: seqTokens(1, 4096)}, &ContextError{4096, 4096}},
		{"empty prompt", Request{}, ErrEmptyPrompt},
		{"token out of vocabulary", Request{Tokens: []Token{1, VocabSize}}, &TokenError{1, VocabSize}},
	}
	for _, tt := range tests {
		_, err := r.Submit(0, tt.req)
		if err == nil || err.Error() != tt.want.Error() {
			t.Errorf("%s: error %v, want %v", tt.name, err, tt.want)
		}
	}
	var ce *ContextError
	_, err := r.Submit(0, Request{Tokens: seqTokens(1, 5000)})
	if !errors.As(err, &ce) || ce.NPromptTokens != 5000 || ce.NCtx != 4096 {
		t.Errorf("error %v, want a ContextError for 5000 tokens", err)
	}
	if want := "request (5000 tokens) exceeds the available context size (4096 tokens), try increasing it"; err.Error() != want {
		t.Errorf("message %q, want llama.cpp's %q", err, want)
	}
	// The largest prompt that fits generates until the context is full.
	id := mustSubmit(t, r, 0, Request{Tokens: seqTokens(2, 4090), NPredict: -1})
	res := run(t, r)[id]
	if res.PredictedN != 6 || res.Stop != StopLimit || !res.ContextFull {
		t.Errorf("near-full prompt: predicted %d stop %s full %v, want 6 limit true", res.PredictedN, res.Stop, res.ContextFull)
	}
}

func TestSharedCPUSlowsBusyServers(t *testing.T) {
	cfg := DefaultConfig()
	cfg.AttnCost = 0
	cfg.AnswerMin, cfg.AnswerMax = 1000, 1000
	tests := []struct {
		name   string
		shared bool
		busy   int
		factor time.Duration
	}{
		{"dedicated CPUs, 3 busy", false, 3, 1},
		{"shared CPU, 1 busy", true, 1, 1},
		{"shared CPU, 2 busy", true, 2, 2},
		{"shared CPU, 3 busy", true, 3, 3},
	}
	for _, tt := range tests {
		g, err := NewGroup(tt.shared, cfg, cfg, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < tt.busy; i++ {
			if _, err := g.Submit(0, i, Request{Tokens: seqTokens(i, 20), NPredict: 10}); err != nil {
				t.Fatal(err)
			}
		}
		var evs []Event
		for {
			at, ok := g.NextEvent()
			if !ok {
				break
			}
			evs = g.Advance(at, evs)
		}
		alone := cfg.StepOverhead + 20*cfg.TokenCost + 9*(cfg.StepOverhead+cfg.TokenCost)
		for _, e := range evs {
			if e.Kind == EventDone && e.At != tt.factor*alone {
				t.Errorf("%s: server %d done at %v, want %d × %v", tt.name, e.Replica, e.At, tt.factor, alone)
			}
		}
	}
}

func TestSharedCPUReleasesCapacityWhenAServerIdles(t *testing.T) {
	// Two servers share a CPU. A's request is short; once A is idle, B
	// runs at full speed again.
	cfg := DefaultConfig()
	cfg.AttnCost = 0
	cfg.AnswerMin, cfg.AnswerMax = 1000, 1000
	g, _ := NewGroup(true, cfg, cfg)
	g.Submit(0, 0, Request{Tokens: seqTokens(1, 10), NPredict: 2})
	g.Submit(0, 1, Request{Tokens: seqTokens(2, 10), NPredict: 12})
	var evs []Event
	for {
		at, ok := g.NextEvent()
		if !ok {
			break
		}
		evs = g.Advance(at, evs)
	}
	prompt := cfg.StepOverhead + 10*cfg.TokenCost // 146 ms of work
	step := cfg.StepOverhead + cfg.TokenCost      // 31.7 ms of work
	aDone := 2 * (prompt + step)                  // both busy all along
	bDone := aDone + 10*step                      // then B alone
	for _, e := range evs {
		if e.Kind != EventDone {
			continue
		}
		want := map[int]time.Duration{0: aDone, 1: bDone}[e.Replica]
		if e.At != want {
			t.Errorf("server %d done at %v, want %v", e.Replica, e.At, want)
		}
	}
}

func TestConfigValidateNamesTheSetting(t *testing.T) {
	tests := []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.NParallel = 0 }, "n_parallel"},
		{func(c *Config) { c.CtxSize = 8 }, "ctx_size"},
		{func(c *Config) { c.NBatch = 2 }, "n_batch"},
		{func(c *Config) { c.CacheRAMMiB = -1 }, "cache_ram_mib"},
		{func(c *Config) { c.TokenCost, c.StepOverhead = 0, 0 }, "token_cost"},
		{func(c *Config) { c.AnswerMax = 1 }, "answer_max"},
	}
	for _, tt := range tests {
		c := DefaultConfig()
		tt.mutate(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("error %v, want one naming %s", err, tt.want)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("default config: %v", err)
	}
}

func TestNewConversationTakesAnEmptySlotNotACachedOne(t *testing.T) {
	// A (cached in slot 0) must survive B, an unrelated conversation: B
	// goes to the least recently used slot, and A's next turn hits slot
	// 0 directly, without the RAM cache.
	r := mustNew(t, DefaultConfig())
	a := seqTokens(1, 300)
	idA := mustSubmit(t, r, 0, Request{Tokens: a, NPredict: 8})
	resA := run(t, r)[idA]
	idB := mustSubmit(t, r, time.Minute, Request{Tokens: seqTokens(2, 300), NPredict: 8})
	resB := run(t, r)[idB]
	if resB.Slot == resA.Slot {
		t.Fatalf("B took A's slot %d", resA.Slot)
	}
	a2 := append(append(slices.Clone(a), resA.Output.Tokens...), seqTokens(3, 20)...)
	idA2 := mustSubmit(t, r, 2*time.Minute, Request{Tokens: a2, NPredict: 8})
	resA2 := run(t, r)[idA2]
	if resA2.Slot != resA.Slot || resA2.CacheN != 300+7 {
		t.Errorf("A's turn 2: slot %d cache_n %d, want slot %d and %d", resA2.Slot, resA2.CacheN, resA.Slot, 307)
	}
	if st := r.Server().Stats(); st.CacheSaves != 0 || st.CacheLoads != 0 {
		t.Errorf("saves=%d loads=%d, want no RAM cache traffic", st.CacheSaves, st.CacheLoads)
	}
}

func TestSlotSimilarityThreshold(t *testing.T) {
	// Sharing only a short system prompt (≤ 10% of the prompt) is not
	// enough to take another conversation's slot.
	r := mustNew(t, DefaultConfig())
	sys := seqTokens(9, 20)
	a := append(slices.Clone(sys), seqTokens(1, 280)...)
	idA := mustSubmit(t, r, 0, Request{Tokens: a, NPredict: 8})
	resA := run(t, r)[idA]
	b := append(slices.Clone(sys), seqTokens(2, 280)...)
	idB := mustSubmit(t, r, time.Minute, Request{Tokens: b, NPredict: 8})
	resB := run(t, r)[idB]
	if resB.Slot == resA.Slot || resB.CacheN != 0 {
		t.Errorf("B: slot %d (A's is %d), cache_n %d; want another slot and no reuse", resB.Slot, resA.Slot, resB.CacheN)
	}
}

func TestCancel(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NParallel, cfg.CtxSize = 1, 4096
	cfg.AnswerMin, cfg.AnswerMax = 1000, 1000
	r := mustNew(t, cfg)
	p := seqTokens(1, 100)
	running := mustSubmit(t, r, 0, Request{Tokens: p, NPredict: 200})
	queued := mustSubmit(t, r, 0, Request{Tokens: seqTokens(2, 100), NPredict: 200})
	if r.Cancel(0, 999) {
		t.Error("cancelling an unknown request reported true")
	}
	if !r.Cancel(0, queued) {
		t.Error("cancelling the queued request reported false")
	}
	// Let the running request decode a while, then cancel it mid-run.
	evs := runUntil(r, 2*time.Second)
	if len(evs) != 1 || evs[0].Kind != EventFirstToken {
		t.Fatalf("events before the cancel: %v", evs)
	}
	if !r.Cancel(2*time.Second, running) {
		t.Fatal("cancelling the running request reported false")
	}
	evs = runUntil(r, time.Hour)
	if len(evs) != 1 || evs[0].Kind != EventDone || evs[0].ID != running || !evs[0].Result.Cancelled {
		t.Fatalf("after the cancel: %v, want only the running request's cancelled EventDone", evs)
	}
	res := evs[0].Result
	step := cfg.StepOverhead + cfg.TokenCost
	if res.Done > 2*time.Second+step+time.Millisecond || res.PredictedN < 2 || res.PredictedN >= 200 {
		t.Errorf("released at %v with %d tokens, want within one step of 2s and a partial answer", res.Done, res.PredictedN)
	}
	// The slot keeps what was processed: the prompt and the tokens
	// generated but the last.
	if got, want := r.Server().CachedPrefix(append(slices.Clone(p), res.Output.Tokens...)), 100+res.PredictedN-1; got != want {
		t.Errorf("cached prefix after the cancel %d, want %d", got, want)
	}
	if st := r.Server().Stats(); st.Processing != 0 || st.Deferred != 0 {
		t.Errorf("processing=%d deferred=%d after cancelling everything", st.Processing, st.Deferred)
	}
}

func TestIsPrefix(t *testing.T) {
	mk := func(toks []Token) *seq { return &seq{toks: toks, blocks: chainHashes(nil, toks)} }
	long := seqTokens(1, 300)
	other := slices.Clone(long)
	other[200] ^= 1
	tests := []struct {
		name string
		a, b []Token
		want bool
	}{
		{"equal", long, long, true},                                     // a sequence is its own prefix
		{"shorter, inside a block", long[:100], long, true},             // 1 full block + 36 tokens
		{"shorter, on a block edge", long[:128], long, true},            // exactly 2 blocks
		{"longer", long, long[:100], false},                             // cannot be a prefix
		{"differs in a full block", long[:256], other, false},           // block 3 differs
		{"differs in the tail", long[:220], other[:250], false},         // token 200 differs, in a partial block
		{"empty", nil, long, true},                                      // the empty sequence is everyone's prefix
		{"short sequences", seqTokens(2, 10), seqTokens(2, 30), true},   // no full block at all
		{"short, different", seqTokens(2, 10), seqTokens(3, 30), false}, // no full block, tokens differ
	}
	for _, tt := range tests {
		if got := isPrefix(mk(tt.a), mk(tt.b)); got != tt.want {
			t.Errorf("%s: isPrefix = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestLongQueueStaysFIFO(t *testing.T) {
	// 300 requests queued on one slot (the queue compacts as it drains):
	// they start in submission order.
	cfg := DefaultConfig()
	cfg.NParallel, cfg.CtxSize = 1, 4096
	r := mustNew(t, cfg)
	var ids []ID
	for i := 0; i < 300; i++ {
		ids = append(ids, mustSubmit(t, r, time.Duration(i)*time.Millisecond, Request{Tokens: seqTokens(i, 12), NPredict: 2}))
	}
	res := run(t, r)
	for i := 1; i < len(ids); i++ {
		if res[ids[i]].Started != res[ids[i-1]].Done {
			t.Fatalf("request %d started at %v, not when %d finished (%v)", i, res[ids[i]].Started, i-1, res[ids[i-1]].Done)
		}
	}
}

func TestArrivalJoinsAtTheNextStepBoundary(t *testing.T) {
	cfg := DefaultConfig()
	cfg.AttnCost = 0
	cfg.AnswerMin, cfg.AnswerMax = 1000, 1000
	prompt := cfg.StepOverhead + 10*cfg.TokenCost // A's prompt step: 146 ms
	step := cfg.StepOverhead + cfg.TokenCost      // A alone: 31.7 ms per step
	tests := []struct {
		name    string
		arrival time.Duration
		started time.Duration
	}{
		// Exactly on the boundary after A's third decode step: B joins there.
		{"on a boundary", prompt + 3*step, prompt + 3*step},
		// Just after it: B waits for the end of the step in progress.
		{"1 ns after a boundary", prompt + 3*step + 1, prompt + 4*step},
		// Just before it: B joins at that boundary.
		{"1 ns before a boundary", prompt + 3*step - 1, prompt + 3*step},
		// While A's prompt is processed: B waits for the prompt step.
		{"during a prompt step", prompt / 2, prompt},
	}
	for _, tt := range tests {
		r := mustNew(t, cfg)
		mustSubmit(t, r, 0, Request{Tokens: seqTokens(1, 10), NPredict: 50})
		runUntil(r, tt.arrival)
		b := mustSubmit(t, r, tt.arrival, Request{Tokens: seqTokens(2, 10), NPredict: 5})
		if got := run(t, r)[b].Started; got != tt.started {
			t.Errorf("%s: B started at %v, want %v", tt.name, got, tt.started)
		}
	}
}

// TestRAMCacheDoesNotTrashLargePrompts guards a fidelity bug found by the
// experiment runner (issue 4 part 5: same-replica misses): a new
// conversation that shares only the system prompt with a long cached one
// must not load (and so consume) that long entry. llama.cpp skips entries
// it would keep less than a quarter of.
func TestRAMCacheDoesNotTrashLargePrompts(t *testing.T) {
	r := mustNew(t, DefaultConfig())
	sys := seqTokens(9, 40)
	a := append(slices.Clone(sys), seqTokens(1, 700)...)
	idA := mustSubmit(t, r, 0, Request{Tokens: a, NPredict: 8})
	resA := run(t, r)[idA]
	// Eight short conversations with the same system prompt: more than the
	// four slots, so A's slot is reused and A's state goes to the RAM cache.
	for i := range 8 {
		mustSubmit(t, r, time.Minute, Request{Tokens: append(slices.Clone(sys), seqTokens(10+i, 60)...), NPredict: 8})
	}
	run(t, r)
	a2 := append(append(slices.Clone(a), resA.Output.Tokens...), seqTokens(3, 20)...)
	idA2 := mustSubmit(t, r, 2*time.Minute, Request{Tokens: a2, NPredict: 8})
	if got, want := run(t, r)[idA2].CacheN, len(a); got < want {
		t.Errorf("A's turn 2 reused %d tokens, want ≥ %d: a short conversation consumed A's cache entry", got, want)
	}
}
