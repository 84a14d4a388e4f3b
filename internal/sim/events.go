package sim

import (
	"fmt"
	"slices"

	"github.com/llm-ring/llm-ring/internal/state"
	"github.com/llm-ring/llm-ring/internal/traffic"
)

// ErrTextReplicaFailed is the error a request in flight on a replica that
// crashes ends with (the router answers 502 when the replica's connection
// breaks before the answer).
const ErrTextReplicaFailed = "the replica failed before answering"

// replicaEvent applies one of the profile's replica events: the replica
// set changes as discovery would tell the router.
//
//   - fail: the replica crashes. Its requests in flight fail (502), it
//     leaves the ring at once, and its model (its cache) is gone.
//   - return: a failed replica comes back cold under the same name, after
//     loading its model (LoadDelay).
//   - add: a new replica (the next index) joins after loading (scale-up).
//   - remove: the replica leaves the ring (scale-down); its requests in
//     flight finish.
func (s *sim) replicaEvent(ev *traffic.ReplicaEvent) error {
	name := ReplicaName(ev.Replica)
	slot := s.slotOf(name)
	switch ev.Action {
	case traffic.ActionFail:
		if slot < 0 {
			return fmt.Errorf("sim: replica event at %gs: %s is not up", ev.AtS, name)
		}
		s.leave(slot)
		g := s.reps[slot].group
		s.dead[g] = true
		s.wakeVer[g]++
		fl := s.flights[slot]
		s.flights[slot] = nil
		for _, f := range fl {
			us := &s.users[f.user]
			s.tableOf(us).Release(&us.ticket, state.Outcome{}, int64(s.now))
			if err := s.fail(f.user, 502, ErrTextReplicaFailed); err != nil {
				return err
			}
		}
	case traffic.ActionReturn, traffic.ActionAdd:
		if slot >= 0 {
			return fmt.Errorf("sim: replica event at %gs: %s is already up", ev.AtS, name)
		}
		slot, err := s.addReplica(name, ev.Replica)
		if err != nil {
			return err
		}
		s.q.push(s.now+s.spec.LoadDelay, evJoin, slot, 0)
	case traffic.ActionRemove:
		if slot < 0 {
			return fmt.Errorf("sim: replica event at %gs: %s is not up", ev.AtS, name)
		}
		s.leave(slot)
	default:
		return fmt.Errorf("sim: unknown replica event %q", ev.Action)
	}
	return nil
}

// slotOf returns the slot of the replica called name that is on the ring,
// or -1.
func (s *sim) slotOf(name string) int32 {
	k := slices.IndexFunc(s.up, func(slot int32) bool { return s.reps[slot].name == name })
	if k < 0 {
		return -1
	}
	return s.up[k]
}
