package state

import (
	"slices"
	"strings"
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
const (
	AdapterTTL    = 60 * time.Second
	AdapterMemory = 8
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
	inUse := len(rep.Running) + len(rep.Waiting)
	for _, e := range t.adapters[id] {
		if e.inflight > 0 && !slices.Contains(rep.Running, e.name) && !slices.Contains(rep.Waiting, e.name) {
			inUse++
		}
	}
	if rep.Max <= 0 || inUse < rep.Max {
		return TierFreeSlot
	}
	if slices.Contains(rep.Waiting, name) {
		return TierWaiting
	}
	return TierEvict
}

// restrictAdapter adds to v's exclusions the replicas of a worse tier than
// the best one for adapter among those v allows. t.mu is held.
func (t *Table) restrictAdapter(v *policy.View, adapter string, now int64) {
	n := len(t.snap.names)
	best := int8(TierEvict + 1)
	for i := range n {
		t.tiers[i] = 0
		if !v.Excluded(i) {
			t.tiers[i] = t.adapterTier(i, adapter, now)
			best = min(best, t.tiers[i])
		}
	}
	if best > TierEvict {
		return // nothing allowed (the caller checked there is)
	}
	excl := t.adExcl
	clear(excl)
	copy(excl, v.Exclude)
	for i := range n {
		if t.tiers[i] != best {
			excl[i/64] |= 1 << (i % 64)
		}
	}
	v.Exclude = excl
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
	// A copy of the name: the request's string may pin its whole body.
	t.adapters[id] = append(list, adapterUse{name: strings.Clone(adapter), inflight: 1, last: now})
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
