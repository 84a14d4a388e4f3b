package sim

import (
	"fmt"
	"strconv"
	"time"

	"github.com/llm-ring/llm-ring/internal/admission"
	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/record"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// writeRow writes the row of the user's current request, ended at `end`.
func (s *sim) writeRow(us *user, status int, errText string, res *model.Result, end time.Duration) error {
	r := &s.row
	*r = record.Request{
		RunID:        s.spec.RunID,
		Policy:       s.spec.Policy,
		Seed:         s.spec.Seed,
		Conversation: us.conv.ID,
		Turn:         us.turn + 1,
		EstPrompt:    us.ticket.EstPrompt,
		TTFTMS:       ms(us.ttft),
		LatencyMS:    ms(end - us.sent),
		Status:       status,
		Error:        errText,
		StartMS:      ms(us.sent),
		EndMS:        ms(end),
	}
	if s.set != nil {
		r.Conversation = PoolTag{Model: us.model, Adapter: us.adapter, Load: us.load, Tier: us.ticket.AdapterTier}.Append(r.Conversation)
	}
	if s.adm != nil {
		r.Conversation = admission.RowTag{Priority: us.prio, Flow: us.flow, WaitMS: ms(us.wait)}.Append(r.Conversation)
	}
	if us.replica >= 0 {
		r.Replica = s.reps[us.replica].name
		r.Reason = us.reason.String()
	}
	if res != nil {
		r.CacheN, r.PromptN, r.PredictedN = res.CacheN, res.PromptN, res.PredictedN
	}
	s.lastEnd = max(s.lastEnd, end)
	return s.rows.Write(r)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// finish fills the run's JSON document.
func (s *sim) finish() {
	sp := s.spec
	info := &s.res.Info
	*info = record.Run{
		RunID:      sp.RunID,
		Policy:     sp.Policy,
		Seed:       sp.Seed,
		Profile:    sp.Profile.Name,
		Mode:       Mode,
		Replicas:   sp.Replicas,
		Order:      sp.Order,
		DurationMS: ms(s.lastEnd),
		Requests:   s.res.Completed + s.res.Failed,
		Errors:     s.res.Failed,
		Config:     runConfig(sp),
		Metrics:    s.metrics(),
	}
	if s.scaled {
		info.ScaleAtMS = ms(s.scaleAt)
		info.ScaleReplica = ReplicaName(sp.Replicas)
		if s.scaleReady > 0 {
			info.ScaleReadyMS = ms(s.scaleReady)
		}
	}
}

// metrics returns the router's final counters as the live runner records
// them (name{labels} → value, labels in alphabetical order), plus the
// simulator's own counts.
func (s *sim) metrics() map[string]float64 {
	m := map[string]float64{
		wire.Series(wire.MetricPromptTokens, wire.LabelKind, wire.KindCached):    float64(s.cached),
		wire.Series(wire.MetricPromptTokens, wire.LabelKind, wire.KindProcessed): float64(s.prompted),
		wire.MetricPredictedTokens: float64(s.predicted),
		wire.MetricCacheLost:       float64(s.cacheLost),
		wire.MetricFailovers:       0,
		"sim_events_total":         float64(s.res.Events),
		"sim_model_events_total":   float64(s.res.ModelEvents),
	}
	for k, n := range s.counters {
		rname := ""
		if k.replica >= 0 {
			rname = s.reps[k.replica].name
		}
		m[wire.Series(wire.MetricRequests, wire.LabelCode, strconv.Itoa(k.code), wire.LabelPolicy, s.polName,
			wire.LabelReason, k.reason.String(), wire.LabelReplica, rname)] += float64(n) // a replica that returned has two slots
	}
	var evictions, saves, loads int64
	for _, ref := range s.reps {
		st := s.groups[ref.group].Server(int(ref.member)).Stats()
		evictions += st.CacheEvictions
		saves += st.CacheSaves
		loads += st.CacheLoads
	}
	m["sim_ram_cache_evictions_total"] = float64(evictions)
	m["sim_ram_cache_saves_total"] = float64(saves)
	m["sim_ram_cache_loads_total"] = float64(loads)
	s.admMetrics(m)
	if s.set != nil {
		s.poolMetrics(m)
	}
	return s.engineMetrics(m)
}

// codes are the HTTP statuses a simulated request can end with.
var codes = [...]int{200, 400, 404, 429, 502, 503}

func codeIndex(code int) int {
	for i, c := range codes {
		if c == code {
			return i
		}
	}
	panic(fmt.Sprintf("sim: unexpected status %d", code))
}

// counterKey identifies one request counter: replica (-1: none), reason
// ("" for a request that found no replica) and status. Keyed by value, so
// any number of reasons is safe.
type counterKey struct {
	replica int32
	reason  policy.Reason
	code    int
}

func (s *sim) count(us *user, code int) {
	codeIndex(code) // only the statuses a simulated request can end with
	s.counters[counterKey{us.replica, us.reason, code}]++
}
