package cluster

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"github.com/llm-ring/llm-ring/internal/state"
)

var (
	samplePlacements = []Placement{
		{PlacementUpdate: state.PlacementUpdate{Key: 0xdeadbeefcafef00d, Replica: "llm-0", Cached: 1500, Prompt: 1800, Chars: 7200, At: 1_760_000_000_000_000_000}},
		{PlacementUpdate: state.PlacementUpdate{Key: 1, Replica: "llm-12", Cached: 0, Prompt: 40, Chars: 160, At: 1_760_000_000_004_000_000}},
		// an item older than the message's base time
		{PlacementUpdate: state.PlacementUpdate{Key: 2, Replica: "llm-1", At: 1_759_999_999_000_000_000}},
	}
	sampleTurns = []Turn{
		{TurnUpdate: state.TurnUpdate{Key: 0xdeadbeefcafef00d, Replica: "llm-0", Charge: 2100, Prompt: 1800, Output: 300, Chars: 7200, At: 1_760_000_000_000_000_000}},
		{TurnUpdate: state.TurnUpdate{Key: 3, Replica: "llm-2", Failed: true, At: 1_760_000_000_009_000_000}},
	}
	samplePrefixes = []PrefixUpdate{
		{Replica: "llm-0", Op: PrefixInsert, Hashes: []uint64{1, 2, 0xffffffffffffffff}, At: 1_760_000_000_000_000_000},
		{Replica: "llm-3", Op: PrefixEvict, Hashes: []uint64{42}, At: 1_760_000_000_000_000_001},
		{Replica: "llm-3", Op: PrefixLost, Hashes: []uint64{42, 43}, At: 1_760_000_000_000_000_002},
	}
	sampleLoad = loadMsg{Origin: "router-a", Gen: 1_760_000_000_000_000_000, Seq: 17, Entries: []LoadEntry{
		{Replica: "llm-0", Load: Load{Requests: 3, Tokens: 9000}},
		{Replica: "llm-1", Load: Load{}}, // released: a zero is news too
	}}
)

// Every kind survives a round trip unchanged.
func TestRoundTrip(t *testing.T) {
	snap := sampleLoad
	snap.Full = true
	snap.Entries = nil // an empty snapshot: "no load anywhere"
	for _, tc := range []struct {
		name string
		b    []byte
		want message
	}{
		{"placements", encodePlacements(samplePlacements), message{Kind: KindPlacement, Placements: samplePlacements}},
		{"turns", encodeTurns(sampleTurns), message{Kind: KindTurn, Turns: sampleTurns}},
		{"prefixes", encodePrefixes(samplePrefixes), message{Kind: KindPrefix, Prefixes: samplePrefixes}},
		{"load delta", encodeLoad(sampleLoad), message{Kind: KindLoadDelta, Load: sampleLoad}},
		{"empty snapshot", encodeLoad(snap), message{Kind: KindLoadSnapshot, Load: snap}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decode(tc.b, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("decode(encode(x)) = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// Malformed input is rejected whole with errMalformed, never a panic.
func TestDecodeRejects(t *testing.T) {
	good := encodePlacements(samplePlacements[:1])
	longName := binary.AppendUvarint(appendHeader(nil, KindLoadDelta), maxName+1)
	hugeCount := binary.AppendUvarint(appendName(binary.AppendUvarint(appendHeader(nil, KindPrefix), 0), "llm-0"), 0)
	hugeCount = append(hugeCount, 0)                           // op insert
	hugeCount = binary.AppendUvarint(hugeCount, 1<<40)         // hash count far beyond the bytes left
	hugeCount = binary.LittleEndian.AppendUint64(hugeCount, 7) // one hash
	badOp := encodePrefixes(samplePrefixes[:1])
	badOp[2+binary.PutUvarint(make([]byte, 10), uint64(samplePrefixes[0].At))+1+len("llm-0")] = 9
	badFailed := encodeTurns(sampleTurns[:1])
	badFailed[2+binary.PutUvarint(make([]byte, 10), uint64(sampleTurns[0].At))+8+1+len("llm-0")] = 2
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"header only, no version match", []byte{2, byte(KindPlacement)}},
		{"unknown kind", []byte{wireVersion, 99}},
		{"placement without items", binary.AppendUvarint(appendHeader(nil, KindPlacement), 5)},
		{"truncated placement", good[:len(good)-1]},
		{"trailing garbage after a placement", append(bytes.Clone(good), 0xff)},
		{"name longer than a DNS name", longName},
		{"hash count beyond the message", hugeCount},
		{"unknown prefix op", badOp},
		{"turn without items", binary.AppendUvarint(appendHeader(nil, KindTurn), 5)},
		{"failed flag not 0 or 1", badFailed},
		{"oversized", append(appendHeader(nil, KindLoadDelta), make([]byte, maxMessage)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decode(tc.b, nil)
			if !errors.Is(err, errMalformed) {
				t.Fatalf("decode = %v, want errMalformed", err)
			}
		})
	}
}

// FuzzDecode: any input decodes or errors without panicking, and whatever
// decodes re-encodes to an equal message.
func FuzzDecode(f *testing.F) {
	f.Add(encodePlacements(samplePlacements))
	f.Add(encodePrefixes(samplePrefixes))
	f.Add(encodeTurns(sampleTurns))
	f.Add(encodeLoad(sampleLoad))
	f.Add([]byte{wireVersion, byte(KindLoadSnapshot), 1, 'a', 0, 0})
	f.Add([]byte{wireVersion, byte(KindPrefix), 0, 1, 'x', 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add(encodePoolItems(KindPlacement, "llama", samplePlacements, placementAt, appendPlacement))
	f.Add(encodePoolItems(KindTurn, "m", sampleTurns, turnAt, appendTurn))
	f.Add(encodePoolItems(KindPrefix, "qwen", samplePrefixes, prefixAt, appendPrefix))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decode(b, nil)
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("error %v does not wrap errMalformed", err)
			}
			return
		}
		var again []byte
		switch m.Kind {
		case KindPlacement:
			again = encodePoolItems(KindPlacement, m.Placements[0].Model, m.Placements, placementAt, appendPlacement)
		case KindPrefix:
			again = encodePoolItems(KindPrefix, m.Prefixes[0].Model, m.Prefixes, prefixAt, appendPrefix)
		case KindTurn:
			again = encodePoolItems(KindTurn, m.Turns[0].Model, m.Turns, turnAt, appendTurn)
		default:
			again = encodeLoad(m.Load)
		}
		m2, err := decode(again, nil)
		if err != nil {
			t.Fatalf("re-encoded message does not decode: %v", err)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("re-encode changed the message:\n%+v\n%+v", m, m2)
		}
	})
}

// Sizes quoted in docs/cluster.md.
func TestMessageSizes(t *testing.T) {
	p := Placement{PlacementUpdate: state.PlacementUpdate{Key: 0xdeadbeefcafef00d, Replica: "llm-0", Cached: 1500, Prompt: 1800, Chars: 7200, At: 1_760_000_000_000_000_000}}
	one := len(encodePlacements([]Placement{p}))
	p2 := p
	p2.At += 3_000_000 // 3 ms later in the same push
	item := len(appendPlacement(nil, p.At, p2))
	prefix := func(n int) int {
		return len(appendPrefix(nil, p.At, PrefixUpdate{Replica: "llm-0", Hashes: make([]uint64, n), At: p.At + 1_000_000}))
	}
	delta := len(encodeLoad(loadMsg{Origin: "router-7d9f8-abcde", Gen: uint64(p.At), Seq: 123456, Entries: []LoadEntry{{Replica: "llm-0", Load: Load{Requests: 12, Tokens: 30000}}}}))
	entry := len(appendLoadEntry(nil, LoadEntry{Replica: "llm-0", Load: Load{Requests: 12, Tokens: 30000}}))
	tn := Turn{TurnUpdate: state.TurnUpdate{Key: p.Key, Replica: "llm-0", Charge: 2100, Prompt: 1800, Output: 300, Chars: 7200, At: p.At}}
	turnOne := len(encodeTurns([]Turn{tn}))
	tn.At += 3_000_000
	turnItem := len(appendTurn(nil, p.At, tn))
	t.Logf("turn: %d B alone, %d B per further item", turnOne, turnItem)
	t.Logf("placement: %d B alone, %d B per further item; prefix item: %d B (1 block), %d B (16), %d B (100); load push with one replica: %d B, +%d B per replica",
		one, item, prefix(1), prefix(16), prefix(100), delta, entry)
	if item > 40 || turnItem > 40 || entry > 16 || prefix(100) > maxPacket-headerLen-binary.MaxVarintLen64 {
		t.Fatalf("messages grew beyond what docs/cluster.md promises")
	}
}

var sink message

func BenchmarkEncodePlacement(b *testing.B) {
	buf := make([]byte, 0, maxPacket)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p := samplePlacements[i%len(samplePlacements)]
		buf = appendPlacement(buf[:0], p.At, p)
	}
}

func BenchmarkDecode(b *testing.B) {
	var in interner
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"placement", encodePlacements(samplePlacements[:1])},
		{"placements=3", encodePlacements(samplePlacements)},
		{"prefix=16", encodePrefixes([]PrefixUpdate{{Replica: "llm-0", Hashes: make([]uint64, 16), At: 1}})},
		{"load_delta=2", encodeLoad(sampleLoad)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.b)))
			b.ReportAllocs()
			for b.Loop() {
				m, err := decode(tc.b, in.name)
				if err != nil {
					b.Fatal(err)
				}
				sink = m
			}
		})
	}
}
