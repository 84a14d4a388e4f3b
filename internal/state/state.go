// Package state is what a routing decision reads and what a finished request
// feeds back: the replica set and its ring (an immutable snapshot, swapped
// on membership change), one row per replica (in-flight load, what the
// replica reports about itself), and the indexers that learn where prompts
// are cached (placement memory, the prefix index). The live router and the
// simulator both drive a Table, so load accounting and learning are the
// same code in both:
//
//	Route:   indexers.Lookup → policy.Pick(request, view) → acquire → indexers.Routed
//	Release: release → indexers.Finished (the replica's counts, or failure)
//
// A Table is safe for concurrent use. Route (pick + acquire) and Release
// each take one short lock, so no two concurrent picks can both squeeze
// under the same cap. Building a ring happens outside the lock.
package state

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/ring"
)

// ErrNoReplica is returned by Route when no replica can take the request.
var ErrNoReplica = errors.New("no ready replica")

// Config sizes a Table.
type Config struct {
	VirtualNodes  int           // ring positions per replica
	CharsPerToken float64       // token estimate for text not yet answered
	MaxEntries    int           // placement memory: most conversations remembered
	TTL           time.Duration // placement memory: forget after this long unseen
	Hash          ring.Hash     // ring hash; nil means xxhash64 (tests inject a readable one)
	// Prefix sizes the prefix index (BlockChars 0: none).
	Prefix PrefixConfig
	// AdapterAffinity restricts a pick for a LoRA adapter to the replicas
	// of the best adapter tier (resident, free slot, waiting, must evict;
	// the llm-d lora-affinity scorer's order). false ignores adapters.
	AdapterAffinity bool
	// AdapterSpill is the load factor over which queueing resident
	// replicas let free-slot replicas join an adapter's pick (adapters.go);
	// 0: the default AdapterSpill, < 0: never (the tiers strictly).
	AdapterSpill float64
}

// snapshot is an immutable replica set with its ring.
type snapshot struct {
	replicas []replicaset.Replica // sorted by name
	names    []string
	ids      []uint32 // interned id of each replica
	n        uint64   // this table's number for the set (1, 2, …; 0: the empty first one)
	ring     *ring.Ring
	share    []float64
}

// Table holds the routing state of one pool of replicas: the replica set
// and its ring (an immutable snapshot swapped on membership change), each
// replica's in-flight load, reports, health and learned speeds, and the
// indexers (placement memory, the prefix index) that learn where prompts
// are cached. Route and Release are the routing step and its end (both
// drivers call them); the Set methods feed it what the driver learns.
//
// Locking: every exported method takes mu for its whole run, and nothing
// inside calls out of the package while holding it except the policy's
// Pick (pure, no callbacks) and the Peers' methods (which must not block
// or call back into the Table). LoadView's fn runs under mu: it must not
// call back into the Table. Nothing the Table hands out aliases its
// mutable state except policy views passed to fn and Pick.
type Table struct {
	cfg Config

	mu         sync.Mutex
	pol        policy.Policy
	readsMatch bool // pol reads Row.Match: consult every indexer at a pick
	snap       *snapshot
	rows       []policy.Row // indexed like snap.names
	total      policy.Load  // Σ rows' loads
	match      matches      // what this pick's lookups raised (cleared after it)
	idx        []indexer    // placement memory, then the prefix index
	visited    []uint64     // scratch for ring walks
	// req and view are reused by every Route (under mu): passed to the
	// policy through an interface, they would otherwise escape to the heap.
	req   policy.Request
	dec   policy.Decision // the policy fills it in place at each pick
	view  policy.View
	query query
	tk    Ticket
	seq   uint64
	snaps uint64 // snapshots made: the last one's n
	mem   *memory
	px    *prefixIndexer // the prefix index, or nil
	// peers are the other router instances (nil: this one alone);
	// peerRows is the scratch the pick reads their loads into.
	peers     Peers
	peerRows  []policy.Row
	pubBlocks []uint64 // scratch: an adapter's salted blocks, published (cluster.go)
	// Interned replica ids: a name keeps its id for the table's lifetime.
	idOf   map[string]uint32
	nameOf []string
	gen    []uint32          // gen[id] increments each time id joins the set
	rep    []policy.Reported // rep[id]: the replica's last report (kept across membership changes)
	speed  speeds            // speed[id]: learned rates (kept across membership changes)
	routed []uint64          // routed[id]: tokens ever charged to it (placement memory's Sent)
	index  []int32           // index[id] is its position in snap (-1 when absent)
	health health            // which replicas take no new requests
	excl   []uint64          // scratch: a pick's exclusions
	// adapters[id] is the optimistic adapter memory of replica id
	// (adapters.go); tiers and adExcl are scratch for an adapter's pick.
	adapters [][]adapterUse
	tiers    []int8
	adExcl   []uint64
}

// Validate reports an invalid prefix-index configuration, naming the key
// (prefix_index.KEY). The other fields are the caller's to check.
func (c Config) Validate() error {
	if c.Prefix.BlockChars == 0 {
		return nil
	}
	if _, err := newPrefixIndexer(c.Prefix, c.CharsPerToken); err != nil {
		return fmt.Errorf("prefix_index.%w", err)
	}
	return nil
}

// New returns a Table with no replicas. cfg must be valid (Validate): New
// panics on an invalid prefix-index configuration.
func New(cfg Config, p policy.Policy) *Table {
	t := &Table{
		cfg: cfg,
		pol: p,

		readsMatch: policy.ReadsMatch(p),
		snap:       &snapshot{ring: ring.New(nil, 0, cfg.Hash)},
		mem:        newMemory(cfg.MaxEntries, int64(cfg.TTL), cfg.CharsPerToken),
		idOf:       map[string]uint32{},
	}
	t.idx = []indexer{t.mem}
	if cfg.Prefix.BlockChars > 0 {
		px, err := newPrefixIndexer(cfg.Prefix, cfg.CharsPerToken)
		if err != nil {
			panic(fmt.Sprintf("state.New: prefix_index: %v", err))
		}
		t.idx = append(t.idx, px)
		t.px = px
	}
	return t
}

// SetPolicy replaces the policy; in-flight requests and memory are kept.
func (t *Table) SetPolicy(p policy.Policy) {
	t.mu.Lock()
	t.pol, t.readsMatch = p, policy.ReadsMatch(p)
	t.mu.Unlock()
}

// Policy returns the current policy.
func (t *Table) Policy() policy.Policy {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pol
}

// Reset forgets placement memory (and the adapter memory's idle entries)
// and restarts the round-robin sequence, so that an experiment run starts
// from the same state as a fresh router. In-flight load is kept (those
// requests are still running).
func (t *Table) Reset() {
	t.mu.Lock()
	for _, ix := range t.idx {
		ix.reset()
	}
	t.resetAdapters()
	t.seq = 0
	t.mu.Unlock()
}

// SetReplicas replaces the replica set. The ring is rebuilt (outside the
// lock) and swapped in; replicas that stay keep their in-flight load.
// It reports whether the set of names or URLs changed.
func (t *Table) SetReplicas(rs []replicaset.Replica) bool {
	rs = replicaset.Normalize(rs)
	t.mu.Lock()
	same := slices.EqualFunc(rs, t.snap.replicas, replicaset.Equal)
	t.mu.Unlock()
	if same {
		return false
	}
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = r.Name
	}
	rg := ring.New(names, t.cfg.VirtualNodes, t.cfg.Hash)
	s := &snapshot{replicas: rs, names: names, ring: rg, share: rg.Share(), ids: make([]uint32, len(rs))}

	t.mu.Lock()
	defer t.mu.Unlock()
	rows := make([]policy.Row, len(rs))
	for id := range t.index {
		t.index[id] = -1
	}
	for i, name := range names {
		id := t.intern(name)
		s.ids[i] = id
		if old := slices.Index(t.snap.names, name); old >= 0 {
			rows[i].Load = t.rows[old].Load
		} else {
			t.gen[id]++ // (re)joined: tickets from an earlier membership no longer apply
		}
		rows[i].Reported = t.rep[id]
		rows[i].Speed = t.speed[id]
		t.index[id] = int32(i)
	}
	for _, id := range t.snap.ids {
		if t.index[id] < 0 {
			for _, ix := range t.idx {
				ix.forget(id) // left the set: whatever it held is gone
			}
			t.forgetAdapters(id)
		}
	}
	t.snaps++
	s.n = t.snaps
	t.snap, t.rows = s, rows
	t.total = policy.Load{}
	for _, r := range rows {
		t.total.Requests += r.Load.Requests
		t.total.Tokens += r.Load.Tokens
	}
	if w := (len(rs) + 63) / 64; len(t.visited) < w {
		t.visited = make([]uint64, w)
	}
	t.excl = make([]uint64, (len(rs)+63)/64)
	t.adExcl = make([]uint64, (len(rs)+63)/64)
	t.tiers = make([]int8, len(rs))
	t.health.rebuild(s.ids)
	return true
}

// SetHealthy records a replica's health (from active health checks). An
// unhealthy replica stays on the ring, so conversations keep their homes,
// but takes no new requests: policies pick among the healthy ones, as on
// failover. It reports whether the state changed; unknown names are
// remembered for when the replica (re)joins.
func (t *Table) SetHealthy(name string, healthy bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	id, ok := t.idOf[name]
	if !ok {
		if healthy {
			return false
		}
		id = t.intern(name)
	}
	if !t.health.set(id, healthy) {
		return false
	}
	t.health.rebuild(t.snap.ids)
	return true
}

// intern returns name's id, giving it one (with its per-id state) if new.
// The caller holds t.mu.
func (t *Table) intern(name string) uint32 {
	if id, ok := t.idOf[name]; ok {
		return id
	}
	id := uint32(len(t.nameOf))
	t.idOf[name] = id
	t.nameOf = append(t.nameOf, name)
	t.gen = append(t.gen, 0)
	t.index = append(t.index, -1)
	t.health.grow()
	t.rep = append(t.rep, policy.Reported{})
	t.speed = append(t.speed, policy.Speed{})
	t.routed = append(t.routed, 0)
	t.adapters = append(t.adapters, nil)
	return id
}

// SetReported records what a replica reported about itself (the live
// scraper, or the simulator's sampler). An unknown name is remembered for
// when the replica joins.
func (t *Table) SetReported(name string, r policy.Reported) {
	t.mu.Lock()
	defer t.mu.Unlock()
	id := t.intern(name)
	t.rep[id] = r
	if i := t.index[id]; i >= 0 {
		t.rows[i].Reported = r
	}
}

// Input is what the driver knows about a request before routing it.
type Input struct {
	Key    string // conversation key
	Hash   uint64 // ring.HashString(Key)
	Chars  int    // prompt length in characters (for the token estimate)
	Tokens int    // exact prompt tokens when the request carries them (token arrays); 0 = estimate
	// OutputTokens is the expected output (max_tokens, or the configured
	// default): policy.Request.OutputTokens.
	OutputTokens int
	// Blocks are the prompt's chained block hashes (prefix.Hasher), for the
	// prefix index. The Ticket keeps a reference: the caller must not
	// change the slice until it releases the ticket.
	Blocks []uint64
	// FirstUser is the first user message (chat) or the prompt's start,
	// for policies that key on a prompt prefix (policy.Request.FirstUser).
	FirstUser string
	// Adapter is the LoRA adapter the request asks for ("" none; issue 23):
	// with Config.AdapterAffinity the pick prefers replicas that have it
	// resident, then a free adapter slot, then it waiting (adapters.go).
	// The table remembers the string as given for a while: pass one that
	// does not hold a large buffer (pool.Route.Adapter does not). With
	// affinity or without, its salt keys the request's routing memory apart
	// (query.Salt), as the engines keep each adapter's cache apart.
	Adapter string
}

// Ticket is a routed request's claim on a replica's load. Release it exactly
// once (Release, or Retry for a failover).
type Ticket struct {
	Replica replicaset.Replica
	Index   int   // replica index in the snapshot it was routed on
	Charge  int64 // tokens charged
	// EstPrompt is the prompt token estimate the decision used.
	EstPrompt int
	// ExpectCached is how many tokens the router believed cached on Replica
	// (0: no cache expected there): placement memory's figure for this
	// conversation, or failing that the prefix index's for this prompt.
	ExpectCached int
	// Moved: the conversation was believed cached on another replica
	// (placement memory), and the policy sent it elsewhere.
	Moved bool
	// CachedOn is the replica placement memory believed held the
	// conversation (its last answer, or a turn another instance announced
	// over), "" when none was known: what the pick knew, for logs.
	CachedOn string
	// AdapterTier is the adapter tier of Replica at the pick (TierResident
	// … TierEvict, adapters.go); 0: no adapter asked for, or affinity off.
	AdapterTier int

	adapter string // Input.Adapter when the tier applied (Release decrements its count)
	id, gen uint32
	key     uint64 // the conversation key hash, salted (query.Key)
	salt    uint64 // the adapter's salt (query.Salt): its blocks are keyed block ^ salt
	chars   int32
	output  int32  // the output tokens the request asked for (Input.OutputTokens)
	sent    uint64 // the replica's routed-token count at release (set by Release)
	blocks  []uint64
	// match is the view's Match on Replica at the pick (all indexers).
	match int
}

// Match is the prefix index's match on Replica at the pick, in tokens (the
// view's Match, or, for a policy that does not read it, what the index
// believed the replica held when the prompt was inserted; 0: none, or no
// prefix index). Admission's work ledger may take it as the request's
// cached tokens (admission.Settings.WorkCached).
func (tk *Ticket) Match() int { return tk.match }

// Route picks a replica for in with the current policy and charges it. now
// is the caller's clock in nanoseconds (wall or virtual). exclude names
// replicas that already failed for this request (failover); the policy picks
// its next candidate among the others.
func (t *Table) Route(in Input, now int64, exclude ...string) (Ticket, policy.Decision, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.route(t.pol, t.readsMatch, in, now, exclude)
}

// RouteWith is Route with policy p instead of the configured one: for
// requests whose placement does not matter (embeddings, tokenizing), which
// go where the load is lowest (policy.Least). The ticket is released with
// Release as any other.
func (t *Table) RouteWith(p policy.Policy, in Input, now int64, exclude ...string) (Ticket, policy.Decision, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.route(p, policy.ReadsMatch(p), in, now, exclude)
}

// route is the routing step, top to bottom: look the request up (where
// its conversation and its prompt's blocks are believed cached), build the
// view (exclusions: unhealthy replicas, those that failed for this
// request, and with adapter affinity those of worse adapter tiers), let
// the policy pick, charge the replica, and announce the pick to the
// indexers and the peers. Placement memory is always consulted (it gives
// the request's Last and the token estimate); the other indexers only
// raise rows' Match, so they are consulted only when the policy reads it
// (readsMatch): a prefix lookup against 1,000 replicas is the costliest
// step of a pick. They learn from every request either way. t.mu is held.
func (t *Table) route(pol policy.Policy, readsMatch bool, in Input, now int64, exclude []string) (Ticket, policy.Decision, error) {
	if len(t.snap.names) == 0 {
		return Ticket{}, policy.Decision{}, ErrNoReplica
	}
	t.mem.expire(now)
	req, q, v := t.lookup(in, readsMatch, now)
	t.seq++
	defer t.match.clear()
	if len(exclude) > 0 || t.health.n > 0 {
		if t.exclude(v, exclude...) <= 0 {
			return Ticket{}, policy.Decision{}, ErrNoReplica
		}
	}
	adapter := t.cfg.AdapterAffinity && in.Adapter != ""
	if adapter {
		t.restrictAdapter(v, in.Adapter, now)
	}
	d := &t.dec
	pol.Pick(req, v, d)
	t.tk = t.charge(in, req, q, d)
	if adapter {
		r := d.Replica
		t.tk.AdapterTier, t.tk.adapter = int(t.tiers[r]), in.Adapter
		t.adapterRouted(t.snap.ids[r], in.Adapter, t.rows[r].Reported.Adapters.Max, now)
	}
	t.announce(q, now)
	return t.tk, *d, nil // as the indexers completed it (the prefix index's expectation)
}

// exclude sets v's exclusions to the unhealthy replicas and the named ones
// (unknown names are ignored) and returns how many replicas are left.
func (t *Table) exclude(v *policy.View, names ...string) int {
	s := t.snap
	v.Exclude = t.excl
	copy(v.Exclude, t.health.bits)
	left := len(s.names) - t.health.n
	for _, name := range names {
		left -= t.exclude1(v, name)
	}
	return left
}

// exclude1 adds the named replica to v's exclusions (v.Exclude is t.excl)
// and returns 1 if it was not excluded yet, else 0.
func (t *Table) exclude1(v *policy.View, name string) int {
	if i, ok := slices.BinarySearch(t.snap.names, name); ok && v.Exclude[i/64]&(1<<(i%64)) == 0 {
		v.Exclude[i/64] |= 1 << (i % 64)
		return 1
	}
	return 0
}

// charge counts the pick d (its charge bounded) in the picked replica's
// load and the total, and returns the request's ticket.
func (t *Table) charge(in Input, req *policy.Request, q *query, d *policy.Decision) Ticket {
	s := t.snap
	r := d.Replica
	d.Charge = min(max(d.Charge, 0), MaxCharge)
	t.rows[r].Load.Requests++
	t.rows[r].Load.Tokens = satAdd(t.rows[r].Load.Tokens, d.Charge)
	t.routed[s.ids[r]] += uint64(d.Charge)
	t.total.Requests++
	t.total.Tokens = satAdd(t.total.Tokens, d.Charge)
	tk := Ticket{
		Replica: s.replicas[r], Index: r, Charge: d.Charge, EstPrompt: req.PromptTokens,
		id: s.ids[r], gen: t.gen[s.ids[r]], key: q.Key, salt: q.Salt, chars: int32(min(in.Chars, math.MaxInt32)),
		output: int32(min(req.OutputTokens, math.MaxInt32)),
		blocks: in.Blocks, match: t.rows[r].Match,
	}
	if req.Last >= 0 {
		tk.CachedOn = s.names[req.Last]
	}
	if req.Last == r {
		tk.ExpectCached = req.CachedTokens
	} else if req.Last >= 0 && req.CachedTokens > 0 {
		tk.Moved = true
	}
	return tk
}

// announce tells the indexers and the peers where t.tk was routed. The
// indexers see the copy held by the table: passed through the interface,
// the caller's ticket would escape to the heap.
func (t *Table) announce(q *query, now int64) {
	for _, ix := range t.idx {
		ix.routed(q, &t.tk, now)
	}
	if t.peers != nil {
		t.publishRouted(&t.tk, now)
	}
}

// indexOf returns the row index of interned id, or -1 (not in the set).
func (t *Table) indexOf(id uint32) int {
	if int(id) >= len(t.index) {
		return -1
	}
	return int(t.index[id])
}

// estimate returns the prompt token estimate: exact when the request carries
// tokens; otherwise, for a conversation whose previous turn was answered,
// the reported tokens of that prompt plus the new characters at
// CharsPerToken; otherwise all characters at CharsPerToken.
func (t *Table) estimate(in Input, p Place, known bool) int {
	if in.Tokens > 0 {
		return in.Tokens
	}
	cpt := t.cfg.CharsPerToken
	if known && in.Chars >= int(p.Chars) {
		return int(p.Prompt) + int(math.Ceil(float64(in.Chars-int(p.Chars))/cpt))
	}
	return int(math.Ceil(float64(in.Chars) / cpt))
}

// Outcome is what the replica reported about a finished request.
type Outcome struct {
	OK bool // the replica answered successfully
	// Known says the counts below come from the answer (llama.cpp timings or
	// OpenAI usage); when false, the estimates stand in.
	Known      bool
	CacheN     int // prompt tokens reused from the replica's cache
	PromptN    int // prompt tokens processed
	PredictedN int // tokens generated
	// CachedUnknown: the answer did not say how many prompt tokens were
	// reused (vLLM without --enable-prompt-tokens-details, SGLang without
	// its cache report): CacheN is 0 by default, not by report, so no
	// cache-lost conclusion is drawn from it.
	CachedUnknown bool
	// The replica's own times when it reports them (llama.cpp timings:
	// prompt_ms, predicted_ms), else 0.
	PromptTime, PredictedTime time.Duration
	// What the driver measured: first byte of the answer and its end,
	// from the request's start (wall clock live, virtual time simulated).
	TTFT, Latency time.Duration
}

// Feedback is what Release learned.
type Feedback struct {
	// CacheLost: the router expected this turn to reuse a cache on its
	// replica, but the replica reported reusing less than half of it (the
	// cache was evicted or the replica restarted). Placement memory now holds
	// the replica's real state after this turn.
	CacheLost bool
}

// Release returns a ticket's load and, for a successful answer, records in
// placement memory where the conversation now lives and how many of its
// tokens are cached there (the prompt and the answer, as reported).
func (t *Table) Release(tk *Ticket, out Outcome, now int64) Feedback {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.uncharge(tk)
	t.adapterReleased(tk, now)
	var fb Feedback
	if out.OK && out.Known {
		fb.CacheLost = !out.CachedUnknown && tk.ExpectCached > 0 && out.CacheN*2 < tk.ExpectCached
	}
	t.tk = *tk // as in Route: a copy, so that tk does not escape
	if int(tk.id) < len(t.routed) {
		t.tk.sent = t.routed[tk.id]
	}
	for _, ix := range t.idx {
		ix.finished(&t.tk, out, now)
	}
	if t.peers != nil {
		t.publishReleased(&t.tk, out, now)
	}
	if out.OK && out.Known {
		if sp, ok := t.speed.learn(tk.id, &out); ok {
			if i := t.indexOf(tk.id); i >= 0 {
				t.rows[i].Speed = sp
			}
		}
	}
	t.mem.expire(now)
	return fb
}

func (t *Table) uncharge(tk *Ticket) {
	if int(tk.id) >= len(t.index) || t.gen[tk.id] != tk.gen {
		return // the replica left (and maybe rejoined) since: its counters were reset
	}
	if i := t.index[tk.id]; i >= 0 {
		t.rows[i].Load.Requests = max(t.rows[i].Load.Requests-1, 0)
		t.rows[i].Load.Tokens = max(t.rows[i].Load.Tokens-tk.Charge, 0)
		t.total.Requests = max(t.total.Requests-1, 0)
		t.total.Tokens = max(t.total.Tokens-tk.Charge, 0)
	}
}

// MaxCharge bounds one request's token charge (a request's prompt plus its
// output can never need more; the router rejects larger max_tokens with a
// 400 before routing). With it, the sums of charges cannot overflow.
const MaxCharge = 1 << 40

// satAdd adds two non-negative loads, saturating at math.MaxInt64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
