package sim

import "time"

// kind is what an event does when it fires.
type kind uint8

const (
	// evSend: a user's think time is over; it sends its next turn.
	evSend kind = iota + 1
	// evWake: a replica group's next model event is due.
	evWake
	// evScaleStart: the extra replica is started (it begins loading).
	evScaleStart
	// evScaleReady: the extra replica has loaded and joins the ring.
	evScaleReady
	// evSample: the replicas' signals are sampled (the simulated scraper).
	evSample
	// evReplica: one of the profile's replica events (who: its index).
	evReplica
	// evJoin: a replica that was loading joins the ring (who: its slot).
	evJoin
	// evGossip: the oldest published change reaches the other router
	// instances (routers.go).
	evGossip
	// evExpire: admission's expiry timer (admit.go).
	evExpire
)

// event is one entry of the event queue.
type event struct {
	at   time.Duration // virtual time
	seq  uint64        // insertion order: breaks ties between equal times
	kind kind
	who  int32  // user (evSend) or group (evWake)
	ver  uint32 // evWake: the group's wake version when scheduled (stale if it moved)
}

// before is the queue's order: by time, then by insertion.
func (e *event) before(o *event) bool {
	if e.at != o.at {
		return e.at < o.at
	}
	return e.seq < o.seq
}

// queue is a binary min-heap of events ordered by (time, sequence). Two
// events at the same virtual time fire in the order they were pushed, so a
// run never depends on the heap's internal layout. The zero value is empty.
type queue struct {
	evs []event
	seq uint64
}

// push adds an event at time at and returns its sequence number.
func (q *queue) push(at time.Duration, k kind, who int32, ver uint32) uint64 {
	q.seq++
	q.evs = append(q.evs, event{at: at, seq: q.seq, kind: k, who: who, ver: ver})
	q.up(len(q.evs) - 1)
	return q.seq
}

// len returns the number of queued events.
func (q *queue) len() int { return len(q.evs) }

// pop removes and returns the earliest event. The queue must not be empty.
func (q *queue) pop() event {
	top := q.evs[0]
	last := len(q.evs) - 1
	q.evs[0] = q.evs[last]
	q.evs = q.evs[:last]
	if last > 0 {
		q.down(0)
	}
	return top
}

func (q *queue) up(i int) {
	e := q.evs[i]
	for i > 0 {
		p := (i - 1) / 2
		if !e.before(&q.evs[p]) {
			break
		}
		q.evs[i] = q.evs[p]
		i = p
	}
	q.evs[i] = e
}

func (q *queue) down(i int) {
	n := len(q.evs)
	e := q.evs[i]
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && q.evs[r].before(&q.evs[c]) {
			c = r
		}
		if !q.evs[c].before(&e) {
			break
		}
		q.evs[i] = q.evs[c]
		i = c
	}
	q.evs[i] = e
}
