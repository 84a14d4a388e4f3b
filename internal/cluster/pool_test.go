package cluster

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/state"
)

// withModel returns items with their Model set.
func withModel[T any](items []T, set func(*T)) []T {
	out := slices.Clone(items)
	for i := range out {
		set(&out[i])
	}
	return out
}

// A pool's updates survive the round trip with their model; the catch-all
// pool's are the first release's messages, byte for byte.
func TestPoolRoundTrip(t *testing.T) {
	const model = "llama-3.1-8b-instruct"
	ps := withModel(samplePlacements, func(p *Placement) { p.Model = model })
	ts := withModel(sampleTurns, func(u *Turn) { u.Model = model })
	xs := withModel(samplePrefixes, func(u *PrefixUpdate) { u.Model = model })
	for _, tc := range []struct {
		name string
		b    []byte
		want message
	}{
		{"placements", encodePoolItems(KindPlacement, model, ps, placementAt, appendPlacement), message{Kind: KindPlacement, Placements: ps}},
		{"turns", encodePoolItems(KindTurn, model, ts, turnAt, appendTurn), message{Kind: KindTurn, Turns: ts}},
		{"prefixes", encodePoolItems(KindPrefix, model, xs, prefixAt, appendPrefix), message{Kind: KindPrefix, Prefixes: xs}},
	} {
		if tc.b[1] != byte(KindPool) {
			t.Fatalf("%s: kind %d, want a pool message", tc.name, tc.b[1])
		}
		got, err := decode(tc.b, nil)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Fatalf("%s: decode = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	if !bytes.Equal(encodePoolItems(KindPlacement, "", samplePlacements, placementAt, appendPlacement), encodePlacements(samplePlacements)) {
		t.Fatal("the catch-all pool's placements are not the first release's message")
	}
	plain := encodePlacements(samplePlacements)
	pooled := encodePoolItems(KindPlacement, "m", samplePlacements, placementAt, appendPlacement)
	bad := map[string][]byte{
		"no model":           {wireVersion, byte(KindPool)},
		"empty model":        {wireVersion, byte(KindPool), 0, byte(KindPlacement)},
		"no inner kind":      {wireVersion, byte(KindPool), 1, 'm'},
		"inner load":         append([]byte{wireVersion, byte(KindPool), 1, 'm', byte(KindLoadDelta)}, plain[2:]...),
		"inner pool":         append([]byte{wireVersion, byte(KindPool), 1, 'm', byte(KindPool)}, plain[2:]...),
		"inner without item": pooled[:5],
	}
	for name, b := range bad {
		if _, err := decode(b, nil); err == nil {
			t.Errorf("%s: decoded %x", name, b)
		}
	}
}

// Each pool's updates reach the peers as that pool's; a model name longer
// than a name may be is dropped, not sent under another pool.
func TestPoolUpdatesKeepTheirModel(t *testing.T) {
	a := startNode(t, "a")
	b := startNode(t, "b", withPeers(a.Addr()))
	waitFor(t, "b joins a", func() bool { return a.alivePeers() == 1 })
	now := time.Now().UnixNano()
	a.PublishPlacement(Placement{Model: "m-a", PlacementUpdate: state.PlacementUpdate{Key: 1, Replica: "llm-0", At: now}})
	a.PublishPlacement(Placement{PlacementUpdate: state.PlacementUpdate{Key: 2, Replica: "llm-0", At: now}})
	a.PublishPlacement(Placement{Model: "m-b", PlacementUpdate: state.PlacementUpdate{Key: 3, Replica: "llm-0", At: now}})
	a.PublishPlacement(Placement{Model: strings.Repeat("x", maxName+1), PlacementUpdate: state.PlacementUpdate{Key: 4, Replica: "llm-0", At: now}})
	a.PublishTurn(Turn{Model: "m-b", TurnUpdate: state.TurnUpdate{Key: 5, Replica: "llm-1", Charge: 10, At: now}})
	a.PublishPrefix(PrefixUpdate{Model: "m-a", Replica: "llm-1", Hashes: []uint64{9}, At: now})
	a.Flush()
	waitFor(t, "b gets every pool's updates", func() bool {
		return b.rec.hasPlacement(1) && b.rec.hasPlacement(2) && b.rec.hasPlacement(3) && b.rec.hasTurn(5, false) && b.rec.hasPrefix(9)
	})
	b.rec.mu.Lock()
	defer b.rec.mu.Unlock()
	models := map[uint64]string{}
	for _, p := range b.rec.placements {
		models[p.Key] = p.Model
	}
	if want := map[uint64]string{1: "m-a", 2: "", 3: "m-b"}; !reflect.DeepEqual(models, want) {
		t.Errorf("placements by key: %v, want %v", models, want)
	}
	if b.rec.turns[0].Model != "m-b" || b.rec.prefixes[0].Model != "m-a" {
		t.Errorf("turn %+v, prefix %+v", b.rec.turns[0], b.rec.prefixes[0])
	}
}
