package state

// health is which replicas their health checks call unhealthy. An unhealthy
// replica stays on the ring (its conversations keep their homes) but takes
// no new request: a pick excludes it. Kept by interned id, so that a
// replica's state survives membership changes and a report about a replica
// that has not joined yet is remembered; bits is the same by the current
// snapshot's index, which a pick copies into its exclusions. The Table's
// lock guards it.
type health struct {
	down []bool   // down[id]
	n    int      // how many of the snapshot's replicas are down
	bits []uint64 // bit i: the snapshot's replica i is down
}

// grow gives a newly interned id its (healthy) state.
func (h *health) grow() { h.down = append(h.down, false) }

// set records id's health and reports whether it changed; the caller
// rebuilds bits when it did.
func (h *health) set(id uint32, healthy bool) bool {
	if h.down[id] == !healthy {
		return false
	}
	h.down[id] = !healthy
	return true
}

// healthy reports whether interned replica id takes new requests.
func (h *health) healthy(id uint32) bool { return !h.down[id] }

// rebuild recomputes bits and n for a snapshot whose i-th replica has
// interned id ids[i].
func (h *health) rebuild(ids []uint32) {
	h.bits = make([]uint64, (len(ids)+63)/64)
	h.n = 0
	for i, id := range ids {
		if h.down[id] {
			h.bits[i/64] |= 1 << (i % 64)
			h.n++
		}
	}
}
