package traffic

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"strings"

	"github.com/llm-ring/llm-ring/internal/strict"
	"github.com/llm-ring/llm-ring/profiles"
)

// Profile is the shape of a traffic run, read from a JSON file (profiles/*.json).
// Every key is required except description. Times are in model seconds: the
// live runner divides them by its --speed, the simulator uses them as they are.
type Profile struct {
	Name        string `json:"name"`
	Description string `json:"description" cfg:"optional"`
	// Conversations is the total number of conversations of a run.
	Conversations int `json:"conversations"`
	// Concurrency is the number of simulated users. They form a closed loop:
	// each user runs its conversations one after another (see Conversation.User).
	Concurrency int `json:"concurrency"`
	// RampS spreads the users' first conversations evenly over this many seconds.
	RampS float64 `json:"ramp_s"`
	// TurnsMin and TurnsMax bound the turns of a conversation (uniform draw).
	TurnsMin int `json:"turns_min"`
	TurnsMax int `json:"turns_max"`
	// DocShare is the share of conversations whose first turn pastes a
	// document of about DocWords words.
	DocShare float64 `json:"doc_share"`
	DocWords int     `json:"doc_words"`
	// UserWordsMin and UserWordsMax bound the length of what the user writes
	// in a turn (the question, not counting a pasted document).
	UserWordsMin int `json:"user_words_min"`
	UserWordsMax int `json:"user_words_max"`
	// ThinkSMin and ThinkSMax bound the pause before each turn (uniform draw).
	ThinkSMin float64 `json:"think_s_min"`
	ThinkSMax float64 `json:"think_s_max"`
	// MaxTokens is the max_tokens of every request.
	MaxTokens int `json:"max_tokens"`
	// MaxContextTokens is the budget of a turn: prompt plus answer. A
	// conversation ends early when its next turn would not fit (see
	// FitsContext). Keep it below the replicas' per-slot context with a
	// margin, since prompt sizes are estimated.
	MaxContextTokens int `json:"max_context_tokens"`
	// SystemPrompts is how many distinct system prompts the population shares.
	SystemPrompts int `json:"system_prompts"`

	// The keys below are optional; left out, a profile generates exactly
	// what it did before they existed.

	// SystemPromptTokens, if set, makes every system prompt long: the
	// persona and rules, then a tool catalogue, until the prompt holds at
	// least this many tokens (the replicas' tokenizer, model.Count), as an
	// agent framework's prompt does.
	SystemPromptTokens int `json:"system_prompt_tokens,omitempty" cfg:"optional"`
	// TurnStyle is "chat" (the default) or "tool": later turns are tool
	// results handed back to the model (short JSON-like lines), as an agent
	// loop sends them.
	TurnStyle string `json:"turn_style,omitempty" cfg:"optional"`
	// ConversationHeader, when false, makes the client send no conversation
	// identity at all: no x-conversation-id / x-turn headers and no "user"
	// field. The router must find reuse from the prompt alone. Absent: true.
	ConversationHeader *bool `json:"conversation_header,omitempty" cfg:"optional"`
	// Documents, if set, is the number of distinct documents the population
	// pastes: a conversation with a document (doc_share) pastes one of these
	// shared documents (at the start of its first message, before the
	// question, as retrieval-augmented prompts are built), instead of a
	// document of its own.
	Documents int `json:"documents,omitempty" cfg:"optional"`
	// Hot, if set, gives a share of the conversations one popular long
	// system prompt.
	Hot *Hot `json:"hot,omitempty" cfg:"optional"`
	// Arrivals, if set, switches the users on and off (bursts).
	Arrivals *Arrivals `json:"arrivals,omitempty" cfg:"optional"`
	// Replicas is the number of replicas the profile is written for: the
	// default replica count of a run, and the count replica_speeds and
	// replica_events are checked against. Required with either of them.
	Replicas int `json:"replicas,omitempty" cfg:"optional"`
	// ReplicaSpeeds are per-replica speed factors, by replica index (the
	// replica named llm-<index>): 0.5 is a replica at half speed (every step
	// takes twice as long). Replicas beyond the list run at 1.
	ReplicaSpeeds []float64 `json:"replica_speeds,omitempty" cfg:"optional"`
	// ReplicaEvents change the replica set during a run, in time order.
	ReplicaEvents []ReplicaEvent `json:"replica_events,omitempty" cfg:"optional"`
}

// Hot is a popular prefix: a long system prompt shared by a share of all
// conversations (and so of all traffic).
type Hot struct {
	// Share is the probability that a conversation uses the hot prompt.
	Share float64 `json:"share"`
	// Tokens is the hot prompt's length, at least (model.Count).
	Tokens int `json:"tokens"`
}

// Arrivals are on/off periods. Users are active for OnS seconds, then pause
// for OffS seconds, and so on, starting "on" at the run's start: a turn (or
// a conversation's first turn) that falls due during an "off" period waits
// for the next "on" period, so every "on" period opens with a burst of the
// turns held back. The users stay closed-loop: an answer still comes before
// the user's next turn.
type Arrivals struct {
	OnS  float64 `json:"on_s"`
	OffS float64 `json:"off_s"`
}

// Replica event actions.
const (
	ActionFail   = "fail"   // the replica crashes: in-flight requests fail, it leaves the replica set, its cache is lost
	ActionReturn = "return" // a failed replica comes back, cold (empty cache), under the same name
	ActionAdd    = "add"    // a new replica joins (scale-up), after loading its model
	ActionRemove = "remove" // the replica leaves the replica set (scale-down); in-flight requests finish
)

// ReplicaEvent changes the replica set at AtS seconds of model time.
type ReplicaEvent struct {
	AtS    float64 `json:"at_s"`
	Action string  `json:"action"`
	// Replica is the replica's index (its name is llm-<index>). An add
	// names the next index: the first add of a profile with 3 replicas
	// adds replica 3.
	Replica int `json:"replica"`
}

// Headers reports whether the client sends the conversation's identity
// (x-conversation-id, x-turn): true unless conversation_header is false.
func (p *Profile) Headers() bool { return p.ConversationHeader == nil || *p.ConversationHeader }

// ReplicaSpeed returns the speed factor of replica i (1 when the profile
// says nothing about it).
func (p *Profile) ReplicaSpeed(i int) float64 {
	if i >= 0 && i < len(p.ReplicaSpeeds) {
		return p.ReplicaSpeeds[i]
	}
	return 1
}

// ArrivalWait returns how long (model seconds) a turn falling due at model
// time t (seconds since the run's start) waits for arrivals to be on: 0
// without an arrivals section or during an "on" period, else the time to
// the next "on" period. It is a pure function of the profile and t.
func (p *Profile) ArrivalWait(t float64) float64 {
	a := p.Arrivals
	if a == nil || a.OffS == 0 || t < 0 {
		return 0
	}
	period := a.OnS + a.OffS
	k := math.Floor(t / period)
	in := t - k*period
	if in < a.OnS {
		return 0
	}
	return (k+1)*period - t
}

// Limits on profile values: far beyond any sensible run, they only stop
// typing mistakes from exhausting memory.
const (
	maxConversations = 10_000_000
	maxTurns         = 1000
	maxWords         = 20_000
	maxSystemPrompts = 1000
	maxPromptTokens  = 1 << 20
	maxReplicas      = 1000
	maxSpeed         = 100
)

// ParseProfile decodes and validates a profile. A missing, unknown or
// wrongly typed key, or a bad value, is an error that names the key.
func ParseProfile(data []byte) (Profile, error) {
	var p Profile
	if err := strict.Decode(data, &p, nil); err != nil {
		return Profile{}, err
	}
	if err := p.Validate(); err != nil {
		return Profile{}, err
	}
	return p, nil
}

// Validate checks the values of a profile; every problem is reported,
// each naming its key.
func (p *Profile) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	intRange := func(key string, v, lo, hi int) {
		if v < lo || v > hi {
			bad(key, "must be between %d and %d, got %d", lo, hi, v)
		}
	}
	seconds := func(key string, v float64) {
		if !(v >= 0 && v <= 86400) { // also rejects NaN
			bad(key, "must be between 0 and 86400 seconds, got %g", v)
		}
	}
	if strings.TrimSpace(p.Name) == "" {
		bad("name", "must not be empty")
	}
	intRange("conversations", p.Conversations, 1, maxConversations)
	intRange("concurrency", p.Concurrency, 1, max(1, p.Conversations))
	seconds("ramp_s", p.RampS)
	intRange("turns_min", p.TurnsMin, 1, maxTurns)
	intRange("turns_max", p.TurnsMax, max(1, p.TurnsMin), maxTurns)
	if !(p.DocShare >= 0 && p.DocShare <= 1) {
		bad("doc_share", "must be between 0 and 1, got %g", p.DocShare)
	}
	if p.DocShare > 0 {
		intRange("doc_words", p.DocWords, 1, maxWords)
	} else {
		intRange("doc_words", p.DocWords, 0, maxWords)
	}
	intRange("user_words_min", p.UserWordsMin, 1, maxWords)
	intRange("user_words_max", p.UserWordsMax, max(1, p.UserWordsMin), maxWords)
	seconds("think_s_min", p.ThinkSMin)
	seconds("think_s_max", p.ThinkSMax)
	if p.ThinkSMax < p.ThinkSMin {
		bad("think_s_max", "must be ≥ think_s_min (%g), got %g", p.ThinkSMin, p.ThinkSMax)
	}
	intRange("max_tokens", p.MaxTokens, 1, 1<<20)
	intRange("system_prompts", p.SystemPrompts, 1, maxSystemPrompts)
	p.validateScenario(bad)
	if p.MaxContextTokens < 1 {
		bad("max_context_tokens", "must be ≥ 1, got %d", p.MaxContextTokens)
	} else if need := p.firstTurnBound(); p.MaxTokens >= 1 && p.UserWordsMax >= 1 && need > p.MaxContextTokens {
		bad("max_context_tokens", "%d is too small: a first turn without a document may need "+
			"an estimated %d tokens (system prompt, user_words_max words, max_tokens)", p.MaxContextTokens, need)
	}
	return errors.Join(errs...)
}

// firstTurnBound is a generous estimate of the largest first turn without a
// document, answer included: the longest system prompt, user_words_max words
// of boundCharsPerWord characters, message overheads and max_tokens. A
// document is shortened by the generator to fit the budget instead.
func (p *Profile) firstTurnBound() int {
	const boundCharsPerWord = 8 // the corpus averages about 5.5 with spaces and punctuation
	return 2*MessageOverheadTokens + p.systemBound() +
		tokensForChars(p.UserWordsMax*boundCharsPerWord) + p.MaxTokens
}

// systemBound is the estimate (EstimateTokens) of the longest system prompt
// the profile can generate.
func (p *Profile) systemBound() int {
	n := tokensForChars(maxSystemChars)
	if p.SystemPromptTokens > 0 {
		n = max(n, tokensForChars(longPromptChars(p.SystemPromptTokens)))
	}
	if p.Hot != nil && p.Hot.Tokens > 0 {
		n = max(n, tokensForChars(longPromptChars(p.Hot.Tokens)))
	}
	return n
}

// validateScenario checks the optional keys.
func (p *Profile) validateScenario(bad func(key, format string, args ...any)) {
	if p.SystemPromptTokens != 0 && (p.SystemPromptTokens < 1 || p.SystemPromptTokens > maxPromptTokens) {
		bad("system_prompt_tokens", "must be between 1 and %d, got %d", maxPromptTokens, p.SystemPromptTokens)
	}
	switch p.TurnStyle {
	case "", TurnChat, TurnTool:
	default:
		bad("turn_style", "must be %q or %q, got %q", TurnChat, TurnTool, p.TurnStyle)
	}
	if p.Documents != 0 {
		if p.Documents < 1 || p.Documents > maxSystemPrompts {
			bad("documents", "must be between 1 and %d, got %d", maxSystemPrompts, p.Documents)
		} else if p.DocShare == 0 {
			bad("documents", "shared documents need doc_share > 0 (no conversation would paste one)")
		}
	}
	if h := p.Hot; h != nil {
		if !(h.Share > 0 && h.Share <= 1) {
			bad("hot.share", "must be above 0 and at most 1, got %g", h.Share)
		}
		if h.Tokens < 1 || h.Tokens > maxPromptTokens {
			bad("hot.tokens", "must be between 1 and %d, got %d", maxPromptTokens, h.Tokens)
		}
	}
	if a := p.Arrivals; a != nil {
		if !(a.OnS > 0 && a.OnS <= 86400) {
			bad("arrivals.on_s", "must be above 0 and at most 86400 seconds, got %g", a.OnS)
		}
		if !(a.OffS >= 0 && a.OffS <= 86400) {
			bad("arrivals.off_s", "must be between 0 and 86400 seconds, got %g", a.OffS)
		}
	}
	needs := len(p.ReplicaSpeeds) > 0 || len(p.ReplicaEvents) > 0
	switch {
	case p.Replicas == 0 && needs:
		bad("replicas", "missing: replica_speeds and replica_events need the replica count they are written for")
	case p.Replicas != 0 && (p.Replicas < 1 || p.Replicas > maxReplicas):
		bad("replicas", "must be between 1 and %d, got %d", maxReplicas, p.Replicas)
	}
	total := p.Replicas // replica indices ever used: the initial ones and the added ones
	for _, e := range p.ReplicaEvents {
		if e.Action == ActionAdd {
			total++
		}
	}
	if len(p.ReplicaSpeeds) > total {
		bad("replica_speeds", "%d speeds for %d replicas (%d at the start, then those added)", len(p.ReplicaSpeeds), total, p.Replicas)
	}
	for i, v := range p.ReplicaSpeeds {
		if !(v > 0 && v <= maxSpeed) {
			bad(fmt.Sprintf("replica_speeds[%d]", i), "must be above 0 and at most %d, got %g", maxSpeed, v)
		}
	}
	if p.Replicas >= 1 && p.Replicas <= maxReplicas {
		for _, e := range replicaEventErrors(p.Replicas, p.ReplicaEvents) {
			bad(e.key, "%s", e.msg)
		}
	}
}

// Turn styles.
const (
	TurnChat = "chat"
	TurnTool = "tool"
)

type keyError struct{ key, msg string }

// replica states while checking events
const (
	replicaAbsent uint8 = iota // not added yet
	replicaUp
	replicaFailed
	replicaRemoved
)

// ValidateReplicaEvents replays events over n initial replicas and reports
// every event that cannot happen, each error naming its key: an unknown
// action, times out of order, an index out of range, an add that is not the
// next index, a fail or remove of a replica that is not up, a return of one
// that has not failed, or an event that leaves no replica up.
func ValidateReplicaEvents(n int, events []ReplicaEvent) error {
	var errs []error
	for _, e := range replicaEventErrors(n, events) {
		errs = append(errs, fmt.Errorf("%s: %s", e.key, e.msg))
	}
	return errors.Join(errs...)
}

func replicaEventErrors(n int, events []ReplicaEvent) []keyError {
	var errs []keyError
	state := make([]uint8, n, n+len(events))
	for i := range state {
		state[i] = replicaUp
	}
	up := n
	prev := 0.0
	for i, e := range events {
		key := fmt.Sprintf("replica_events[%d]", i)
		fail := func(sub, format string, args ...any) {
			errs = append(errs, keyError{key + sub, fmt.Sprintf(format, args...)})
		}
		if !(e.AtS >= 0 && e.AtS <= 86400) {
			fail(".at_s", "must be between 0 and 86400 seconds, got %g", e.AtS)
		} else if e.AtS < prev {
			fail(".at_s", "%g is before the previous event's %g: events must be in time order", e.AtS, prev)
		} else {
			prev = e.AtS
		}
		if e.Action == ActionAdd {
			if e.Replica != len(state) {
				fail(".replica", "an add creates the next replica, %d, got %d", len(state), e.Replica)
				continue
			}
			state = append(state, replicaUp)
			up++
			continue
		}
		if e.Action != ActionFail && e.Action != ActionReturn && e.Action != ActionRemove {
			fail(".action", "must be %s, %s, %s or %s, got %q", ActionFail, ActionReturn, ActionAdd, ActionRemove, e.Action)
			continue
		}
		if e.Replica < 0 || e.Replica >= len(state) {
			fail(".replica", "%s of replica %d: out of range, replicas 0 to %d exist at %g s", e.Action, e.Replica, len(state)-1, e.AtS)
			continue
		}
		st := &state[e.Replica]
		switch {
		case e.Action == ActionReturn && *st != replicaFailed:
			fail(".replica", "return of replica %d, which has not failed", e.Replica)
		case e.Action == ActionReturn:
			*st = replicaUp
			up++
		case *st == replicaFailed:
			fail(".replica", "%s of replica %d, which has failed (and not returned)", e.Action, e.Replica)
		case *st == replicaRemoved:
			fail(".replica", "%s of replica %d, which was removed", e.Action, e.Replica)
		case up == 1:
			fail(".replica", "%s of replica %d would leave no replica up", e.Action, e.Replica)
		case e.Action == ActionFail:
			*st = replicaFailed
			up--
		default:
			*st = replicaRemoved
			up--
		}
	}
	return errs
}

// LoadProfile reads the profile file name from fsys (a path as fs.FS names
// it: slash-separated, unrooted), or else from the profiles built into the
// binary: "quick", "quick.json" and "profiles/quick.json" all name the
// embedded quick profile when fsys has no such file. The caller chooses the
// files (os.DirFS for the host's): the package itself opens none.
func LoadProfile(fsys fs.FS, name string) (Profile, error) {
	data, err := fs.ReadFile(fsys, name)
	source := name
	if errors.Is(err, fs.ErrNotExist) {
		base := strings.TrimSuffix(strings.TrimPrefix(name, "profiles/"), ".json")
		var ok bool
		data, ok = profiles.Read(base)
		if !ok {
			return Profile{}, fmt.Errorf("profile %q: no such file, and no embedded profile of that name (embedded: %s)",
				name, strings.Join(profiles.Names(), ", "))
		}
		source = "embedded profile " + base
	} else if err != nil {
		return Profile{}, fmt.Errorf("profile: %w", err)
	}
	p, err := ParseProfile(data)
	if err != nil {
		return Profile{}, fmt.Errorf("%s: %w", source, err)
	}
	return p, nil
}
