package state

import (
	"math"
	"slices"
	"time"

	"github.com/llm-ring/llm-ring/internal/policy"
)

// Adapter affinity (issue 23). With Config.AdapterAffinity, a request for a
// LoRA adapter (Input.Adapter) is restricted to the replicas of the best
// adapter tier, by adding the others to the view's exclusions (as health
// and failover do); the policy then picks among them as usual. The tiers
// follow the llm-d / Gateway API Inference Extension lora-affinity scorer
// (scores 1.0 / 0.8 / 0.6 / 0, pkg/epp/framework/plugins/**/README.md):
//
//	1 resident:  the replica reports the adapter running, or this router
//	             has requests for it in flight there, or routed it there
//	             recently (the optimistic memory below);
//	2 free slot: the adapters in use there (reported running or waiting,
//	             plus this router's in flight) are fewer than its slots
//	             (Adapters.Max), or its slots are unknown;
//	3 waiting:   the replica reports requests waiting for the adapter;
//	4 evict:     every slot holds an adapter in use: loading this one
//	             waits for, or evicts, another (only when nothing better
//	             exists).
//
// The optimistic memory covers what a report cannot: vLLM lists only the
// adapters with running or waiting requests (an idle adapter stays loaded
// but unlisted), and a report is up to one scrape interval old. Per
// replica it holds each adapter this router routed there: its requests in
// flight (incremented at Route, decremented at Release) and when it was
// last routed or released. An idle entry counts as resident for
// AdapterTTL; at most Adapters.Max idle entries (AdapterMemory when Max is
// unknown) are kept per replica (least recently used out); the memory of
// a replica that leaves the set is forgotten.
//
// Spill (an addition to the scorer's order): a hot adapter resident on one
// replica would otherwise take all its traffic there, whatever the load,
// since a free slot elsewhere is a worse tier. When every resident replica
// is queueing (it reports requests waiting, or reports no queue at all)
// and one more request would put it over ⌈Config.AdapterSpill × the mean
// requests in flight of the allowed replicas (this one counted)⌉, as
// bounded-load hashing caps a ring home, the free-slot replicas join the
// pick: the adapter loads on another replica instead of queueing, and
// never by evicting an adapter in use. (Measured: docs/pools.md.)
const (
	AdapterTTL    = 60 * time.Second
	AdapterMemory = 8
	AdapterSpill  = 2.0 // Config.AdapterSpill's default
)

// Adapter tiers (Ticket.AdapterTier); 0: no adapter, or affinity off.
const (
	TierResident = 1 + iota
	TierFreeSlot
	TierWaiting
	TierEvict
)

// adapterUse is one adapter in a replica's optimistic memory.
type adapterUse struct {
	name     string
	inflight int32
	last     int64 // last routed or released (ns, the driver's clock)
}

// adapterEntry returns id's adapter entry for name, or nil.
func (t *Table) adapterEntry(id uint32, name string) *adapterUse {
	for i := range t.adapters[id] {
		if t.adapters[id][i].name == name {
			return &t.adapters[id][i]
		}
	}
	return nil
}

// adapterTier is row i's tier for adapter name. t.mu is held.
func (t *Table) adapterTier(i int, name string, now int64) int8 {
	id := t.snap.ids[i]
	rep := &t.rows[i].Reported.Adapters
	if slices.Contains(rep.Running, name) {
		return TierResident
	}
	if e := t.adapterEntry(id, name); e != nil && (e.inflight > 0 || now-e.last <= int64(AdapterTTL)) {
		return TierResident
	}
	if rep.Max <= 0 {
		return TierFreeSlot // slots unknown: assumed free
	}
	inUse := len(rep.Running) + len(rep.Waiting)
	for _, e := range t.adapters[id] {
		if e.inflight > 0 && !slices.Contains(rep.Running, e.name) && !slices.Contains(rep.Waiting, e.name) {
			inUse++
		}
	}
	if inUse < rep.Max {
		return TierFreeSlot
	}
	if slices.Contains(rep.Waiting, name) {
		return TierWaiting
	}
	return TierEvict
}

// restrictAdapter adds to v's exclusions the replicas of a worse tier than
// the best one for adapter among those v allows; when the best is resident
// but every resident replica is full (residentFull), the free-slot
// replicas stay allowed too. t.mu is held.
func (t *Table) restrictAdapter(v *policy.View, adapter string, now int64) {
	n := len(t.snap.names)
	best := int8(TierEvict + 1)
	var allowed, sum int64
	for i := range n {
		t.tiers[i] = 0
		if !v.Excluded(i) {
			t.tiers[i] = t.adapterTier(i, adapter, now)
			best = min(best, t.tiers[i])
			allowed++
			sum += v.Rows[i].Load.Requests
		}
	}
	if best > TierEvict {
		return // nothing allowed (the caller checked there is)
	}
	worst := best
	if best == TierResident && t.residentFull(v, allowed, sum) {
		worst = TierFreeSlot
	}
	excl := t.adExcl
	clear(excl)
	copy(excl, v.Exclude)
	for i := range n {
		if t.tiers[i] == 0 || t.tiers[i] > worst {
			excl[i/64] |= 1 << (i % 64)
		}
	}
	v.Exclude = excl
}

// residentFull reports whether every resident replica should spill: it
// reports requests waiting (or no queue), and one more request would put
// it above ⌈spill × the mean requests in flight of the allowed replicas
// (this one counted)⌉.
func (t *Table) residentFull(v *policy.View, allowed, sum int64) bool {
	spill := t.cfg.AdapterSpill
	switch {
	case spill < 0:
		return false // never spill: the tiers strictly
	case spill == 0:
		spill = AdapterSpill
	}
	limit := math.Ceil(spill * float64(sum+1) / float64(allowed))
	for i, tier := range t.tiers[:len(t.snap.names)] {
		if tier != TierResident {
			continue
		}
		rep := &t.rows[i].Reported
		if float64(v.Rows[i].Load.Requests+1) <= limit || rep.HasQueue && rep.Waiting < 1 {
			return false // room under the cap, or reported not queueing
		}
	}
	return true
}

// adapterRouted records a request for adapter routed to replica id. t.mu is
// held.
func (t *Table) adapterRouted(id uint32, adapter string, maxSlots int, now int64) {
	if e := t.adapterEntry(id, adapter); e != nil {
		e.inflight++
		e.last = now
		return
	}
	list := t.adapters[id]
	bound := AdapterMemory
	if maxSlots > 0 {
		bound = maxSlots // at most that many adapters fit its slots
	}
	idle, oldest := 0, -1
	for i, e := range list {
		if e.inflight == 0 {
			idle++
			if oldest < 0 || e.last < list[oldest].last {
				oldest = i
			}
		}
	}
	if idle >= bound && oldest >= 0 {
		list = slices.Delete(list, oldest, oldest+1)
	}
	// The name is kept as given (no copy, no allocation): pool.Route.Adapter
	// is the pool set's own string, not a piece of the request.
	t.adapters[id] = append(list, adapterUse{name: adapter, inflight: 1, last: now})
}

// adapterReleased ends one of tk's requests in its replica's memory. t.mu
// is held.
func (t *Table) adapterReleased(tk *Ticket, now int64) {
	if tk.adapter == "" || int(tk.id) >= len(t.adapters) || t.gen[tk.id] != tk.gen {
		return // no adapter, or the replica left since: its memory was forgotten
	}
	if e := t.adapterEntry(tk.id, tk.adapter); e != nil && e.inflight > 0 {
		e.inflight--
		e.last = now
	}
}

// forgetAdapters drops replica id's adapter memory (it left the set).
func (t *Table) forgetAdapters(id uint32) {
	clear(t.adapters[id])
	t.adapters[id] = t.adapters[id][:0]
}

// resetAdapters forgets the idle adapters of every replica (Reset); those
// with requests in flight stay, as in-flight load does. t.mu is held.
func (t *Table) resetAdapters() {
	for id, list := range t.adapters {
		t.adapters[id] = slices.DeleteFunc(list, func(e adapterUse) bool { return e.inflight == 0 })
	}
}
