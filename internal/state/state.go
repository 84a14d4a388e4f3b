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
	// Indexers learn where prompts are cached, after placement memory
	// (always first) and the prefix index.
	Indexers []Indexer
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
	ring     *ring.Ring
	share    []float64
}

// Table holds the routing state.
type Table struct {
	cfg Config

	mu         sync.Mutex
	pol        policy.Policy
	readsMatch bool // pol reads Row.Match: consult every indexer at a pick
	snap       *snapshot
	rows       []policy.Row // indexed like snap.names
	total      policy.Load  // Σ rows' loads
	touched    []int32      // rows whose Match a lookup set (cleared after the pick)
	idx        []Indexer    // placement memory, then cfg.Indexers
	visited    []uint64     // scratch for ring walks
	// req and view are reused by every Route (under mu): passed to the
	// policy through an interface, they would otherwise escape to the heap.
	req   policy.Request
	dec   policy.Decision // the policy fills it in place at each pick
	view  policy.View
	query Query
	tk    Ticket
	seq   uint64
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
	speed  []policy.Speed    // speed[id]: learned rates (kept across membership changes)
	routed []uint64          // routed[id]: tokens ever charged to it (placement memory's Sent)
	index  []int32           // index[id] is its position in snap (-1 when absent)
	// down[id] marks a replica its health checks call unhealthy: it takes no
	// new requests (the policy picks among the others) until healthy again.
	// downBits is the same by snapshot index; excl is scratch for Route.
	down     []bool
	nDown    int
	downBits []uint64
	excl     []uint64
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
		mem:        newMemory(cfg.MaxEntries, int64(cfg.TTL)),
		idOf:       map[string]uint32{},
	}
	t.idx = []Indexer{t.mem}
	if cfg.Prefix.BlockChars > 0 {
		px, err := newPrefixIndexer(cfg.Prefix, cfg.CharsPerToken)
		if err != nil {
			panic(fmt.Sprintf("state.New: prefix_index: %v", err))
		}
		t.idx = append(t.idx, px)
		t.px = px
	}
	t.idx = append(t.idx, cfg.Indexers...)
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
		ix.Reset()
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
				ix.Forget(id) // left the set: whatever it held is gone
			}
			t.forgetAdapters(id)
		}
	}
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
	t.rebuildDown()
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
	if t.down[id] == !healthy {
		return false
	}
	t.down[id] = !healthy
	t.rebuildDown()
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
	t.down = append(t.down, false)
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

// rebuildDown recomputes the snapshot-indexed bitset of unhealthy replicas.
func (t *Table) rebuildDown() {
	n := len(t.snap.names)
	t.downBits = make([]uint64, (n+63)/64)
	t.nDown = 0
	for i, id := range t.snap.ids {
		if t.down[id] {
			t.downBits[i/64] |= 1 << (i % 64)
			t.nDown++
		}
	}
}

// Input is what the driver knows about a request before routing it.
type Input struct {
	Key       string // conversation key
	Hash      uint64 // ring.HashString(Key)
	Chars     int    // prompt length in characters (for the token estimate)
	Tokens    int    // exact prompt tokens when the request carries them (token arrays); 0 = estimate
	MaxTokens int    // expected output tokens
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
	// (Query.Salt), as the engines keep each adapter's cache apart.
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
	key     uint64 // the conversation key hash, salted (Query.Key)
	salt    uint64 // the adapter's salt (Query.Salt): its blocks are keyed block ^ salt
	chars   int32
	output  int32  // the output tokens the request asked for (Input.MaxTokens)
	sent    uint64 // the replica's routed-token count at release (set by Release)
	blocks  []uint64
	// match is the view's Match on Replica at the pick (all indexers).
	match int
}

// ID is the interned id of the ticket's replica (stable for the table's
// lifetime), as indexers see it.
func (tk *Ticket) ID() uint32 { return tk.id }

// Blocks are the prompt's block hashes the request was routed with.
func (tk *Ticket) Blocks() []uint64 { return tk.blocks }

// Salt is the salt of the request's adapter (Query.Salt; 0 for the base
// model): an indexer keys Blocks as block ^ Salt.
func (tk *Ticket) Salt() uint64 { return tk.salt }

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

// route picks with pol. Placement memory is always consulted (it gives the
// request's Last and the token estimate); the other indexers only raise
// rows' Match, so they are consulted only when the policy reads it
// (readsMatch): a prefix lookup against 1,000 replicas is the costliest
// step of a pick. They learn from every request either way.
func (t *Table) route(pol policy.Policy, readsMatch bool, in Input, now int64, exclude []string) (Ticket, policy.Decision, error) {
	s := t.snap
	if len(s.names) == 0 {
		return Ticket{}, policy.Decision{}, ErrNoReplica
	}
	t.mem.expire(now)
	req, q, v := t.lookup(in, readsMatch, now)
	t.seq++
	defer t.clearMatches()
	if len(exclude) > 0 || t.nDown > 0 {
		v.Exclude = t.excl
		copy(v.Exclude, t.downBits)
		left := len(s.names) - t.nDown
		for _, name := range exclude {
			if i, ok := slices.BinarySearch(s.names, name); ok && v.Exclude[i/64]&(1<<(i%64)) == 0 {
				v.Exclude[i/64] |= 1 << (i % 64)
				left--
			}
		}
		if left <= 0 {
			return Ticket{}, policy.Decision{}, ErrNoReplica
		}
	}
	adapter := t.cfg.AdapterAffinity && in.Adapter != ""
	if adapter {
		t.restrictAdapter(v, in.Adapter, now)
	}
	d := &t.dec
	pol.Pick(req, v, d)
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
	if adapter {
		tk.AdapterTier, tk.adapter = int(t.tiers[r]), in.Adapter
		t.adapterRouted(s.ids[r], in.Adapter, t.rows[r].Reported.Adapters.Max, now)
	}
	if req.Last == r {
		tk.ExpectCached = req.CachedTokens
	} else if req.Last >= 0 && req.CachedTokens > 0 {
		tk.Moved = true
	}
	// The indexers see a copy held by the table: passed through the
	// interface, the caller's ticket would escape to the heap.
	t.tk = tk
	for _, ix := range t.idx {
		ix.Routed(q, &t.tk, now)
	}
	if t.peers != nil {
		t.publishRouted(&t.tk, now)
	}
	return t.tk, *d, nil // as the indexers completed it (the prefix index's expectation)
}

// SetMatch raises row i's Match to tokens (an indexer's Lookup calls it).
func (t *Table) SetMatch(i int, tokens int) {
	row := &t.rows[i]
	if tokens <= row.Match {
		return
	}
	if row.Match == 0 {
		t.touched = append(t.touched, int32(i))
	}
	row.Match = tokens
}

// IDs returns the interned ids of the snapshot's replicas, indexed like the
// view's rows (indexers' Lookup reads it).
func (t *Table) IDs() []uint32 { return t.snap.ids }

// IndexOf returns the row index of interned id, or -1 (not in the set).
func (t *Table) IndexOf(id uint32) int {
	if int(id) >= len(t.index) {
		return -1
	}
	return int(t.index[id])
}

func (t *Table) clearMatches() {
	for _, i := range t.touched {
		t.rows[i].Match = 0
	}
	t.touched = t.touched[:0]
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
		ix.Finished(&t.tk, out, now)
	}
	if t.peers != nil {
		t.publishReleased(&t.tk, out, now)
	}
	if out.OK && out.Known {
		t.learnSpeed(tk, &out)
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
