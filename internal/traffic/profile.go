package traffic

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/llm-ring/llm-ring/internal/config"
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
}

// Limits on profile values: far beyond any sensible run, they only stop
// typing mistakes from exhausting memory.
const (
	maxConversations = 10_000_000
	maxTurns         = 1000
	maxWords         = 20_000
	maxSystemPrompts = 1000
)

// ParseProfile decodes and validates a profile. A missing, unknown or
// wrongly typed key, or a bad value, is an error that names the key.
func ParseProfile(data []byte) (Profile, error) {
	var p Profile
	if err := config.Strict(data, &p); err != nil {
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
	return 2*MessageOverheadTokens + tokensForChars(maxSystemChars) +
		tokensForChars(p.UserWordsMax*boundCharsPerWord) + p.MaxTokens
}

// LoadProfile reads a profile from a file, or else from the profiles built
// into the binary: "quick", "quick.json" and "profiles/quick.json" all name
// the embedded quick profile when no such file exists.
func LoadProfile(nameOrPath string) (Profile, error) {
	data, err := os.ReadFile(nameOrPath)
	source := nameOrPath
	if errors.Is(err, fs.ErrNotExist) {
		name := strings.TrimSuffix(strings.TrimPrefix(nameOrPath, "profiles/"), ".json")
		var ok bool
		data, ok = profiles.Read(name)
		if !ok {
			return Profile{}, fmt.Errorf("profile %q: no such file, and no embedded profile of that name (embedded: %s)",
				nameOrPath, strings.Join(profiles.Names(), ", "))
		}
		source = "embedded profile " + name
	} else if err != nil {
		return Profile{}, fmt.Errorf("profile: %w", err)
	}
	p, err := ParseProfile(data)
	if err != nil {
		return Profile{}, fmt.Errorf("%s: %w", source, err)
	}
	return p, nil
}
