package traffic

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/llm-ring/llm-ring/internal/strict"
	"github.com/llm-ring/llm-ring/profiles"
)

// Workload kinds: the shapes the field benchmarks routers with (see
// profiles/README.md).
const (
	// KindSharedPrefix is inference-perf's shared_prefix: groups of prompts,
	// each group one system prompt, each prompt its own question.
	KindSharedPrefix = "shared-prefix"
	// KindMultiRound is LMCache's multi-round QA: users, each asking rounds
	// of questions over a shared system prompt and a growing history.
	KindMultiRound = "multi-round"
	// KindLowSharing is unrelated prompts: the control, where prefix-aware
	// routing should neither win nor lose.
	KindLowSharing = "low-sharing"
)

// Workload is an open-loop workload, read from JSON (profiles/workloads/).
// Lengths are in tokens; shared parts are whole 512-token blocks (the
// requests are Mooncake-format trace requests, TraceBlockTokens per hash
// id), so system prompts are rounded up to a multiple of 512.
type Workload struct {
	Name        string `json:"name"`
	Description string `json:"description" cfg:"optional"`
	Kind        string `json:"kind"`
	// shared-prefix: Groups system prompts of SystemTokens, each followed by
	// one of PromptsPerGroup questions of QuestionTokens; an arrival is a
	// random (group, question) pair.
	Groups          int `json:"groups" cfg:"optional"`
	PromptsPerGroup int `json:"prompts_per_group" cfg:"optional"`
	SystemTokens    int `json:"system_tokens" cfg:"optional"`
	QuestionTokens  int `json:"question_tokens" cfg:"optional"`
	// multi-round: every Rounds-th arrival is a new user (so that a rate is
	// of requests, as for the other kinds), who asks Rounds questions of
	// QuestionTokens RoundGapS apart; each round's prompt is the system
	// prompt, the earlier rounds (question and AnswerTokens of answer) and
	// the new question.
	Rounds       int     `json:"rounds" cfg:"optional"`
	AnswerTokens int     `json:"answer_tokens" cfg:"optional"`
	RoundGapS    float64 `json:"round_gap_s" cfg:"optional"`
	// low-sharing: prompts of PromptTokens, nothing shared.
	PromptTokens int `json:"prompt_tokens" cfg:"optional"`
	// OutputTokens is every request's answer length (max_tokens).
	OutputTokens int `json:"output_tokens"`
	// Models, when given, spreads the arrivals over several models served
	// by one fleet (workload_models.go); absent, requests name no model and
	// the traffic is exactly that of a single-model workload.
	Models []WorkloadModel `json:"models" cfg:"optional"`
	// Adapters, when given, makes every arrival ask for one LoRA adapter of
	// the only model of Models, Zipf-distributed.
	Adapters *WorkloadAdapters `json:"adapters" cfg:"optional"`
}

// Validate checks w; every problem names its key.
func (w *Workload) Validate() error {
	var errs []error
	need := func(key string, v, lo, hi int) {
		if v < lo || v > hi {
			errs = append(errs, fmt.Errorf("%s: must be between %d and %d for kind %s, got %d", key, lo, hi, w.Kind, v))
		}
	}
	need("output_tokens", w.OutputTokens, 1, 1<<16)
	switch w.Kind {
	case KindSharedPrefix:
		need("groups", w.Groups, 1, 1<<20)
		need("prompts_per_group", w.PromptsPerGroup, 1, 1<<20)
		need("system_tokens", w.SystemTokens, 1, 1<<20)
		need("question_tokens", w.QuestionTokens, 1, 1<<20)
	case KindMultiRound:
		need("system_tokens", w.SystemTokens, 1, 1<<20)
		need("question_tokens", w.QuestionTokens, 1, 1<<20)
		need("answer_tokens", w.AnswerTokens, 1, 1<<20)
		need("rounds", w.Rounds, 1, 1000)
		if !(w.RoundGapS >= 0 && w.RoundGapS <= 3600) {
			errs = append(errs, fmt.Errorf("round_gap_s: must be between 0 and 3600, got %g", w.RoundGapS))
		}
	case KindLowSharing:
		need("prompt_tokens", w.PromptTokens, 1, 1<<20)
	default:
		errs = append(errs, fmt.Errorf("kind: %q is not one of %s, %s, %s", w.Kind, KindSharedPrefix, KindMultiRound, KindLowSharing))
	}
	errs = append(errs, w.validateModels()...)
	return errors.Join(errs...)
}

// ParseWorkload decodes and validates a workload (strict: unknown keys and
// wrong types are errors naming the key).
func ParseWorkload(data []byte) (Workload, error) {
	var w Workload
	if err := strict.Decode(data, &w, nil); err != nil {
		return Workload{}, err
	}
	if err := w.Validate(); err != nil {
		return Workload{}, err
	}
	return w, nil
}

// LoadWorkload reads the workload file name from fsys (the caller chooses
// the files, as for LoadProfile), or else an embedded workload by name.
func LoadWorkload(fsys fs.FS, name string) (Workload, error) {
	data, err := fs.ReadFile(fsys, name)
	source := name
	if errors.Is(err, fs.ErrNotExist) {
		var ok bool
		if data, ok = profiles.ReadWorkload(strings.TrimSuffix(name, ".json")); !ok {
			return Workload{}, fmt.Errorf("workload %q: no such file, and no embedded workload of that name (embedded: %s)",
				name, strings.Join(profiles.WorkloadNames(), ", "))
		}
		source = "embedded workload " + name
	} else if err != nil {
		return Workload{}, fmt.Errorf("workload: %w", err)
	}
	w, err := ParseWorkload(data)
	if err != nil {
		return Workload{}, fmt.Errorf("%s: %w", source, err)
	}
	return w, nil
}

// Stages is an open-loop load: a warm-up at the first rate, then one stage
// per rate, each StageS long.
type Stages struct {
	Rates   []float64 // requests per second (multi-round: a new user every rounds requests)
	StageS  float64
	WarmupS float64
	Poisson bool // exponential gaps; else constant ones
}

// Validate checks the stages.
func (st Stages) Validate() error {
	if len(st.Rates) == 0 {
		return errors.New("rates: give at least one rate")
	}
	for _, r := range st.Rates {
		if !(r > 0 && r <= 1e5) {
			return fmt.Errorf("rates: %g is not in (0, 100000] per second", r)
		}
	}
	if !(st.StageS > 0 && st.StageS <= 86400) {
		return fmt.Errorf("stage duration: must be in (0, 86400] seconds, got %g", st.StageS)
	}
	if !(st.WarmupS >= 0 && st.WarmupS <= 86400) {
		return fmt.Errorf("warm-up: must be in [0, 86400] seconds, got %g", st.WarmupS)
	}
	return nil
}

// Arrival is one arrival of an open-loop load.
type Arrival struct {
	AtS   float64
	Stage int // -1: warm-up
	Rate  float64
}

// OpenArrivals lists the arrivals of st, in time order, from seed.
func OpenArrivals(st Stages, seed int64) []Arrival {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	var out []Arrival
	t0 := 0.0
	stage := func(k int, rate, dur float64) {
		gap := func() float64 {
			if st.Poisson {
				return rng.ExpFloat64() / rate
			}
			return 1 / rate
		}
		for t := t0 + gap()/2; t < t0+dur; t += gap() {
			out = append(out, Arrival{AtS: t, Stage: k, Rate: rate})
		}
		t0 += dur
	}
	if st.WarmupS > 0 {
		stage(-1, st.Rates[0], st.WarmupS)
	}
	for k, r := range st.Rates {
		stage(k, r, st.StageS)
	}
	return out
}

// StageConversation names the conversation of arrival a (i-th of the run,
// round r): the analysis reads the stage back with ParseStage.
func StageConversation(a Arrival, i, round int) string {
	if a.Stage < 0 {
		return fmt.Sprintf("warmup/%d.%d", i, round)
	}
	return fmt.Sprintf("stage%d@%s/%d.%d", a.Stage, strconv.FormatFloat(a.Rate, 'g', -1, 64), i, round)
}

// ParseStage returns the stage and rate of a conversation named by
// StageConversation; warm is true for the warm-up, ok false for a
// conversation of another kind.
func ParseStage(conv string) (stage int, rate float64, warm, ok bool) {
	if strings.HasPrefix(conv, "warmup/") {
		return -1, 0, true, true
	}
	head, _, found := strings.Cut(conv, "/")
	s, r, found2 := strings.Cut(strings.TrimPrefix(head, "stage"), "@")
	if !found || !found2 || !strings.HasPrefix(head, "stage") {
		return 0, 0, false, false
	}
	k, err1 := strconv.Atoi(s)
	rate, err2 := strconv.ParseFloat(r, 64)
	if err1 != nil || err2 != nil || k < 0 || math.IsNaN(rate) {
		return 0, 0, false, false
	}
	return k, rate, false, true
}
