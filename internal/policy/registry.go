package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// Settings is a policy's configuration: a pointer to a struct whose JSON
// tags are its configuration keys (config file section policies.<name>,
// PUT /admin/policy, `llm-ring sim --set`, run records and traces all use
// them). Validate reports the first invalid value, naming its key.
type Settings interface {
	Validate() error
}

// Spec is one registry row: everything the rest of llm-ring knows about a
// policy. Shared code reads these fields; it never branches on a name.
type Spec struct {
	Name string
	// Doc is one line for usage texts and the README.
	Doc string
	// Defaults returns a fresh copy of the policy's settings with their
	// documented defaults; nil for a policy without settings.
	Defaults func() Settings
	// Make builds the policy from valid settings (nil when Defaults is nil).
	Make func(Settings) Policy
	// Reasons lists every reason code the policy's decisions can carry.
	Reasons []Reason
	// Study marks the original study's five policies, whose results the
	// simulator's golden files guard (the demo compares them).
	Study bool
	// ReadsMatch says the policy reads Row.Match (what each replica holds of
	// this prompt): the routing state then consults the prefix index at
	// each pick. For the others it only learns (TestReadsMatch keeps the
	// flag honest).
	ReadsMatch bool
}

// registry is the one list of policies, in their canonical order: the
// study's five first. It is never modified.
var registry = [...]Spec{
	{Name: "round-robin", Study: true, Doc: "rotate through replicas sorted by name",
		Make: func(Settings) Policy { return RoundRobin{} }, Reasons: []Reason{Rotate}},
	{Name: "mod-n", Study: true, Doc: "hash(conversation) mod N",
		Make: func(Settings) Policy { return ModN{} }, Reasons: []Reason{Hash}},
	{Name: "consistent", Study: true, Doc: "the conversation's home on a hash ring with virtual nodes",
		Make: func(Settings) Policy { return Consistent{} }, Reasons: []Reason{Home}},
	{Name: "bounded", Study: true, Doc: "ring + cap of (1+ε) × average in-flight load; walk clockwise past full replicas",
		Defaults: func() Settings { return &Bounded{Epsilon: 0.25, Unit: Requests} },
		Make:     func(s Settings) Policy { return s.(*Bounded) },
		Reasons:  []Reason{Home, Overflow, LeastLoaded}},
	{Name: "llm-aware", Study: true, Doc: "bounded in tokens + cache-aware cost, placement memory, long-conversation stickiness",
		Defaults: func() Settings {
			return &LLMAware{Epsilon: 0.25, CacheAwareLoad: true, PlacementMemory: true, LongStickiness: true,
				LongPromptTokens: 800, LongCapFactor: 2}
		},
		Make:    func(s Settings) Policy { return s.(*LLMAware) },
		Reasons: []Reason{Home, Overflow, Sticky, HomeLong, StickyLong, LeastLoaded}},
	{Name: "least-loaded", Doc: "fewest requests in flight; ties by ring order from the conversation's home",
		Make: func(Settings) Policy { return Least{} }, Reasons: []Reason{Fewest}},
	{Name: "p2c", Doc: "power of two choices: two replicas drawn from the request, the less loaded wins (SGLang power_of_two)",
		Defaults: func() Settings { return &P2C{ReportedLoad: true} },
		Make:     func(s Settings) Policy { return s.(*P2C) },
		Reasons:  []Reason{P2CFewer, P2CLessKV, P2COnly}},
	{Name: "prefix-hash", Doc: "bounded-load consistent hashing on the first user message's first 100 characters (KubeAI PrefixHash)",
		Defaults: func() Settings { return &PrefixHash{MeanLoadPercentage: 125, PrefixCharLength: 100} },
		Make:     func(s Settings) Policy { return s.(*PrefixHash) },
		Reasons:  []Reason{PrefixHome, PrefixNext, PrefixDefault}},
	{Name: "cache-aware", ReadsMatch: true, Doc: "shortest queue when imbalanced, else the longest prefix match above 30 % of the prompt, else least loaded (SGLang cache_aware)",
		Defaults: func() Settings {
			return &CacheAware{CacheThreshold: 0.3, BalanceAbsThreshold: 64, BalanceRelThreshold: 1.5}
		},
		Make:    func(s Settings) Policy { return s.(*CacheAware) },
		Reasons: []Reason{CacheImbalanced, CacheMatch, CacheLowMatch}},
	{Name: "scored", ReadsMatch: true, Doc: "weighted scorers 2·queue + 2·(1 − KV use) + 3·prefix match, highest wins (Gateway API Inference Extension / llm-d default profile)",
		Defaults: func() Settings { return &Scored{QueueWeight: 2, KVCacheWeight: 2, PrefixWeight: 3} },
		Make:     func(s Settings) Policy { return s.(*Scored) },
		Reasons:  []Reason{ScoredTop, ScoredTie}},
	{Name: "kv-cost", ReadsMatch: true, Doc: "lowest cost = prefill blocks not cached there + active decode blocks there (Dynamo KV router, approximate mode)",
		Defaults: func() Settings { return &KVCost{OverlapScoreWeight: 1, BlockSize: 16} },
		Make:     func(s Settings) Policy { return s.(*KVCost) },
		Reasons:  []Reason{KVLowest, KVTie}},
	{Name: "predictive", ReadsMatch: true, Doc: "the replica where the request is predicted to finish first: queue + prefill + decode + the cost of leaving its cache, in seconds",
		Defaults: func() Settings { return DefaultPredictive() },
		Make:     func(s Settings) Policy { return s.(*Predictive) },
		Reasons:  []Reason{Cache, Home, Faster, Prefix, Spill}},
}

// Names lists the policy names in canonical order.
func Names() []string {
	out := make([]string, len(registry))
	for i := range registry {
		out[i] = registry[i].Name
	}
	return out
}

// ReadsMatch reports whether p's registry row says it reads Row.Match.
func ReadsMatch(p Policy) bool {
	sp, err := Lookup(p.Name())
	return err != nil || sp.ReadsMatch // a policy outside the registry (tests) gets everything
}

// StudyNames lists the original study's five policies, in canonical order.
func StudyNames() []string {
	var out []string
	for i := range registry {
		if registry[i].Study {
			out = append(out, registry[i].Name)
		}
	}
	return out
}

// Specs returns the registry rows in canonical order.
func Specs() []*Spec {
	out := make([]*Spec, len(registry))
	for i := range registry {
		out[i] = &registry[i]
	}
	return out
}

// ErrUnknownPolicy is returned for a name not in the registry.
var ErrUnknownPolicy = errors.New("unknown policy")

// Lookup returns the registry row of name.
func Lookup(name string) (*Spec, error) {
	for i := range registry {
		if registry[i].Name == name {
			return &registry[i], nil
		}
	}
	return nil, fmt.Errorf("%w %q (want one of %s)", ErrUnknownPolicy, name, strings.Join(Names(), ", "))
}

// New returns the named policy with settings s (nil: its defaults). s must
// be of the type the policy's Defaults returns; it is validated.
func New(name string, s Settings) (Policy, error) {
	sp, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	if sp.Defaults == nil {
		return sp.Make(nil), nil
	}
	if s == nil {
		s = sp.Defaults()
	}
	if reflect.TypeOf(s) != reflect.TypeOf(sp.Defaults()) {
		return nil, fmt.Errorf("%s: settings of type %T, want %T", name, s, sp.Defaults())
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("%s.%w", name, err)
	}
	return sp.Make(clone(s)), nil
}

// Decode returns the policy's settings: base (nil: the defaults) with the
// keys of raw (a JSON object; empty or null: none) set on top, validated. A
// partial update keeps the keys it does not name. Errors name the key
// ("epsilon: must be > 0 …", "foo: unknown key (llm-aware has …)").
func (sp *Spec) Decode(base Settings, raw []byte) (Settings, error) {
	raw = bytes.TrimSpace(raw)
	empty := len(raw) == 0 || bytes.Equal(raw, []byte("null")) || bytes.Equal(raw, []byte("{}"))
	if sp.Defaults == nil {
		if !empty {
			return nil, fmt.Errorf("%s takes no settings", sp.Name)
		}
		return nil, nil
	}
	s := sp.Defaults()
	if base != nil {
		if reflect.TypeOf(base) != reflect.TypeOf(s) {
			return nil, fmt.Errorf("%s: settings of type %T, want %T", sp.Name, base, s)
		}
		s = clone(base)
	}
	if !empty {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return nil, errors.New("must be a mapping of keys")
		}
		keys := SettingKeys(s)
		names := make([]string, 0, len(obj))
		for k := range obj {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			if !slices.Contains(keys, k) {
				return nil, fmt.Errorf("%s: unknown key (%s has %s)", k, sp.Name, strings.Join(keys, ", "))
			}
			if err := json.Unmarshal(obj[k], fieldByKey(s, k)); err != nil {
				return nil, fmt.Errorf("%s: %s", k, typeError(err))
			}
		}
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// SettingKeys lists the configuration keys of settings s, in field order.
func SettingKeys(s Settings) []string {
	if s == nil {
		return nil
	}
	t := reflect.TypeOf(s).Elem()
	var out []string
	for i := range t.NumField() {
		if k, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); k != "" && k != "-" {
			out = append(out, k)
		}
	}
	return out
}

// SettingsMap returns the settings as key → value (for run records, the
// admin API and logs); nil for a policy without settings.
func SettingsMap(s Settings) map[string]any {
	if s == nil || reflect.ValueOf(s).IsNil() {
		return nil
	}
	b, err := json.Marshal(s)
	if err != nil {
		panic(err) // settings are plain structs of numbers, booleans and strings
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		panic(err)
	}
	return m
}

// SettingsOf returns the settings a policy was built with (a copy), or nil
// for a policy without settings: the policy value is its settings.
func SettingsOf(p Policy) Settings {
	if s, ok := p.(Settings); ok {
		return clone(s)
	}
	return nil
}

// clone copies a settings struct.
func clone(s Settings) Settings {
	v := reflect.New(reflect.TypeOf(s).Elem())
	v.Elem().Set(reflect.ValueOf(s).Elem())
	return v.Interface().(Settings)
}

// fieldByKey returns a pointer to the field of s whose JSON key is k.
func fieldByKey(s Settings, k string) any {
	v := reflect.ValueOf(s).Elem()
	t := v.Type()
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name == k {
			return v.Field(i).Addr().Interface()
		}
	}
	return nil
}

// typeError words a JSON decoding error of one value.
func typeError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		switch te.Type.Kind() {
		case reflect.Bool:
			return "must be true or false, not " + te.Value
		case reflect.Int, reflect.Int64, reflect.Int32:
			return "must be an integer, not " + te.Value
		case reflect.Float64:
			return "must be a number, not " + te.Value
		case reflect.String:
			return "must be a string, not " + te.Value
		}
	}
	return err.Error()
}
