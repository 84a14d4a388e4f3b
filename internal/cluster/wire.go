package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/llm-ring/llm-ring/internal/state"
)

// Placement is one placement-memory update, state.PlacementUpdate (the
// conversation whose key hashes to Key was served by Replica at At, unix
// ns; its last prompt was Prompt tokens, Chars characters, and Cached
// tokens, that prompt and its answer, are believed cached there now), with
// the pool it is for: the state's update is one table's, the cluster
// carries every pool's.
type Placement struct {
	// Model is the pool the update is for (issue 23: one routing table per
	// model); "" the catch-all pool, the whole router without models.
	Model string
	state.PlacementUpdate
}

// Turn announces a conversation's turn, state.TurnUpdate (routed to Replica
// at At, unix ns, and not yet answered: its load there, Charge tokens and
// one request, its prompt, Prompt tokens as estimated and Chars, and the
// Output it asked for; or, with Failed, that the turn ended without an
// answer), with its pool. An answered turn is announced by its Placement.
type Turn struct {
	Model string // the pool, as Placement.Model
	state.TurnUpdate
}

// PrefixOp says whether a prefix update adds or removes blocks.
type PrefixOp uint8

// Prefix operations.
const (
	PrefixInsert PrefixOp = 0
	PrefixEvict  PrefixOp = 1
	// PrefixLost: the replica reported losing its cache: forget every
	// block believed on it, then insert Hashes (the prompt it has just
	// processed). A chain split over several items carries PrefixLost on
	// its first item only.
	PrefixLost PrefixOp = 2
)

func (o PrefixOp) String() string {
	switch o {
	case PrefixEvict:
		return "evict"
	case PrefixLost:
		return "lost"
	}
	return "insert"
}

// PrefixUpdate inserts or evicts the blocks Hashes (chained block hashes of
// a prompt, in chain order) of Replica in the approximate prefix index, at At
// (unix ns).
type PrefixUpdate struct {
	Model   string // the pool, as Placement.Model
	Replica string
	Op      PrefixOp
	Hashes  []uint64
	At      int64
}

// Load is an in-flight load: requests and their tokens.
type Load struct {
	Requests int64
	Tokens   int64
}

// LoadEntry is one replica's load in a load message.
type LoadEntry struct {
	Replica string
	Load    Load
}

// loadMsg is a load push (Full false: the current loads of the replicas whose
// load changed) or a snapshot (Full true: every replica the sender has load
// on; the ones it does not list are at zero). Values are absolute, never
// deltas, so a duplicate or late message cannot add a load twice. Gen is the
// sender's incarnation (its start time), Seq orders its messages.
type loadMsg struct {
	Origin  string
	Gen     uint64
	Seq     uint64
	Full    bool
	Entries []LoadEntry
}

// Kind is a message's type, the second byte of every message.
type Kind uint8

// Message kinds.
const (
	KindPlacement    Kind = 1
	KindPrefix       Kind = 2
	KindLoadDelta    Kind = 3
	KindLoadSnapshot Kind = 4
	// KindTurn was added after the first release of version 1: an older
	// instance counts it as a decode error and ignores it.
	KindTurn Kind = 5
	// KindPool wraps a placement, turn or prefix message for a named
	// model's pool (issue 23). The catch-all pool's updates keep their own
	// kinds, so a router without models speaks the first release's wire;
	// an older instance counts a pool message as a decode error and
	// ignores it. It is never reported as a message's kind: decode returns
	// the inner kind, with each item's Model set.
	KindPool Kind = 6
)

var kindNames = [...]string{"invalid", "placement", "prefix", "load_delta", "load_snapshot", "turn", "pool"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "invalid"
}

// Wire format, version 1. Integers are uvarints (encoding/binary) unless
// noted; hashes are 8 bytes little-endian (they are uniformly random, a
// varint would only grow them); a name is a uvarint length and its bytes.
//
//	message   = version(1 byte) kind(1 byte) body
//	placement = base_at  { key(8) name cached prompt chars at_delta(varint) }+
//	turn      = base_at  { key(8) name failed(1 byte) charge prompt output chars at_delta(varint) }+
//	prefix    = base_at  { name op(1 byte) at_delta(varint) n hash(8)×n }+
//	load      = origin gen seq { name requests tokens }*
//	pool      = model inner_kind(1 byte) placement | turn | prefix
//
// Timestamps are unix nanoseconds: base_at once per message, each item's
// at as a signed difference from it. Items run to the end of the message.
const wireVersion = 1

// Size bounds. maxPacket keeps a push (our payload plus memberlist's
// framing, label and AES-GCM overhead, under 100 bytes) inside memberlist's
// 1400-byte UDP receive buffer. maxMessage bounds a snapshot sent over TCP.
const (
	maxPacket        = 1200
	maxMessage       = 1 << 20
	maxName          = 253
	maxPrefixHashes  = 100 // per item of a push; PublishPrefix splits longer chains
	headerLen        = 2
	maxPlacementItem = 8 + binary.MaxVarintLen64 + maxName + 4*binary.MaxVarintLen64
)

// Decoding errors. Every decode error wraps errMalformed.
var (
	errMalformed = errors.New("malformed cluster message")
)

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errMalformed, fmt.Sprintf(format, args...))
}

// message is a decoded message: Kind selects the field that is set.
type message struct {
	Kind       Kind
	Placements []Placement
	Turns      []Turn
	Prefixes   []PrefixUpdate
	Load       loadMsg
}

func appendHeader(dst []byte, k Kind) []byte { return append(dst, wireVersion, byte(k)) }

// appendItemsHeader starts a placement, turn or prefix message for model's
// pool: the plain kind for the catch-all pool "", else a pool header.
func appendItemsHeader(dst []byte, k Kind, model string) []byte {
	if model == "" {
		return appendHeader(dst, k)
	}
	return append(appendName(appendHeader(dst, KindPool), model), byte(k))
}

func appendName(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func uv(n int) uint64 {
	if n < 0 {
		return 0
	}
	return uint64(n)
}

func uv64(n int64) uint64 {
	if n < 0 {
		return 0
	}
	return uint64(n)
}

// appendPlacement appends one placement item (without header).
func appendPlacement(dst []byte, base int64, p Placement) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, p.Key)
	dst = appendName(dst, p.Replica)
	dst = binary.AppendUvarint(dst, uv(p.Cached))
	dst = binary.AppendUvarint(dst, uv(p.Prompt))
	dst = binary.AppendUvarint(dst, uv(p.Chars))
	return binary.AppendVarint(dst, p.At-base)
}

// appendTurn appends one turn item (without header).
func appendTurn(dst []byte, base int64, t Turn) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, t.Key)
	dst = appendName(dst, t.Replica)
	var failed byte
	if t.Failed {
		failed = 1
	}
	dst = append(dst, failed)
	dst = binary.AppendUvarint(dst, uv64(t.Charge))
	dst = binary.AppendUvarint(dst, uv(t.Prompt))
	dst = binary.AppendUvarint(dst, uv(t.Output))
	dst = binary.AppendUvarint(dst, uv(t.Chars))
	return binary.AppendVarint(dst, t.At-base)
}

// appendPrefix appends one prefix item (without header).
func appendPrefix(dst []byte, base int64, u PrefixUpdate) []byte {
	dst = appendName(dst, u.Replica)
	dst = append(dst, byte(u.Op))
	dst = binary.AppendVarint(dst, u.At-base)
	dst = binary.AppendUvarint(dst, uint64(len(u.Hashes)))
	for _, h := range u.Hashes {
		dst = binary.LittleEndian.AppendUint64(dst, h)
	}
	return dst
}

// appendLoadHeader starts a load message.
func appendLoadHeader(dst []byte, full bool, origin string, gen, seq uint64) []byte {
	k := KindLoadDelta
	if full {
		k = KindLoadSnapshot
	}
	dst = appendHeader(dst, k)
	dst = appendName(dst, origin)
	dst = binary.AppendUvarint(dst, gen)
	return binary.AppendUvarint(dst, seq)
}

func appendLoadEntry(dst []byte, e LoadEntry) []byte {
	dst = appendName(dst, e.Replica)
	dst = binary.AppendUvarint(dst, uv64(e.Load.Requests))
	return binary.AppendUvarint(dst, uv64(e.Load.Tokens))
}

// encodeItems returns one message of kind holding items (tests and
// benchmarks; the node packs pushes itself so that each fits maxPacket):
// the first item's time is the base, the others are written against it.
func encodeItems[T any](kind Kind, items []T, at func(T) int64, appendItem func([]byte, int64, T) []byte) []byte {
	return encodePoolItems(kind, "", items, at, appendItem)
}

// encodePoolItems is encodeItems for model's pool.
func encodePoolItems[T any](kind Kind, model string, items []T, at func(T) int64, appendItem func([]byte, int64, T) []byte) []byte {
	var base int64
	if len(items) > 0 {
		base = at(items[0])
	}
	b := binary.AppendUvarint(appendItemsHeader(nil, kind, model), uv64(base))
	for _, it := range items {
		b = appendItem(b, base, it)
	}
	return b
}

func placementAt(p Placement) int64 { return p.At }
func turnAt(t Turn) int64           { return t.At }
func prefixAt(u PrefixUpdate) int64 { return u.At }

func placementModel(p Placement) string { return p.Model }
func turnModel(t Turn) string           { return t.Model }
func prefixModel(u PrefixUpdate) string { return u.Model }

// encodePlacements returns one message holding ps.
func encodePlacements(ps []Placement) []byte {
	return encodeItems(KindPlacement, ps, placementAt, appendPlacement)
}

// encodeTurns returns one message holding ts.
func encodeTurns(ts []Turn) []byte { return encodeItems(KindTurn, ts, turnAt, appendTurn) }

// encodePrefixes returns one message holding us.
func encodePrefixes(us []PrefixUpdate) []byte {
	return encodeItems(KindPrefix, us, prefixAt, appendPrefix)
}

// encodeLoad returns one load message.
func encodeLoad(m loadMsg) []byte {
	b := appendLoadHeader(nil, m.Full, m.Origin, m.Gen, m.Seq)
	for _, e := range m.Entries {
		b = appendLoadEntry(b, e)
	}
	return b
}

// reader decodes from b; the first error sticks and later reads return
// zero values, so a decoder checks r.err once per item.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = malformed(format, args...)
	}
	r.b = nil
}

func (r *reader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad %s", what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("bad %s", what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

// count reads a non-negative count that must fit an int64.
func (r *reader) count(what string) int64 {
	v := r.uvarint(what)
	if v > math.MaxInt64 {
		r.fail("%s out of range", what)
		return 0
	}
	return int64(v)
}

func (r *reader) u64(what string) uint64 {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 8 {
		r.fail("short %s", what)
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *reader) byte1(what string) byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 1 {
		r.fail("short %s", what)
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

// name reads a replica or node name through intern (which may return a
// shared string for known names, so a steady stream allocates none).
func (r *reader) name(what string, intern func([]byte) string) string {
	n := r.uvarint(what + " length")
	if r.err != nil {
		return ""
	}
	if n == 0 || n > maxName {
		r.fail("%s length %d not in 1..%d", what, n, maxName)
		return ""
	}
	if uint64(len(r.b)) < n {
		r.fail("short %s", what)
		return ""
	}
	s := intern(r.b[:n])
	r.b = r.b[n:]
	return s
}

func plainString(b []byte) string { return string(b) }

// decode parses one message. It never panics and never allocates more than
// a small multiple of len(b); a message is accepted whole or rejected whole.
// intern may be nil.
func decode(b []byte, intern func([]byte) string) (message, error) {
	if intern == nil {
		intern = plainString
	}
	if len(b) > maxMessage {
		return message{}, malformed("%d bytes exceeds %d", len(b), maxMessage)
	}
	if len(b) < headerLen {
		return message{}, malformed("%d bytes is shorter than the header", len(b))
	}
	if b[0] != wireVersion {
		return message{}, malformed("version %d (want %d)", b[0], wireVersion)
	}
	m := message{Kind: Kind(b[1])}
	r := reader{b: b[headerLen:]}
	var model string
	if m.Kind == KindPool {
		model = r.name("model", intern)
		m.Kind = Kind(r.byte1("inner kind"))
		if r.err == nil && m.Kind != KindPlacement && m.Kind != KindTurn && m.Kind != KindPrefix {
			return message{}, malformed("pool message of kind %d", m.Kind)
		}
		if r.err != nil {
			return message{}, fmt.Errorf("pool message: %w", r.err)
		}
	}
	switch m.Kind {
	case KindPlacement:
		m.Placements = decodePlacements(&r, intern)
	case KindTurn:
		m.Turns = decodeTurns(&r, intern)
	case KindPrefix:
		m.Prefixes = decodePrefixes(&r, intern)
	case KindLoadDelta, KindLoadSnapshot:
		m.Load = decodeLoads(&r, intern, m.Kind == KindLoadSnapshot)
	default:
		return message{}, malformed("unknown kind %d", b[1])
	}
	if r.err != nil {
		return message{}, fmt.Errorf("%s message: %w", m.Kind, r.err)
	}
	if model != "" {
		m.setModel(model)
	}
	return m, nil
}

// setModel marks every item of m as model's pool's.
func (m *message) setModel(model string) {
	for i := range m.Placements {
		m.Placements[i].Model = model
	}
	for i := range m.Turns {
		m.Turns[i].Model = model
	}
	for i := range m.Prefixes {
		m.Prefixes[i].Model = model
	}
}

// decodePlacements reads a placement message's items (r.err says whether
// they are valid).
func decodePlacements(r *reader, intern func([]byte) string) []Placement {
	var out []Placement
	base := r.count("base time")
	for r.err == nil && len(r.b) > 0 {
		var p Placement
		p.Key = r.u64("key")
		p.Replica = r.name("replica", intern)
		p.Cached = r.int("cached tokens")
		p.Prompt = r.int("prompt tokens")
		p.Chars = r.int("prompt chars")
		p.At = r.at(base)
		if r.err == nil {
			out = append(out, p)
		}
	}
	if r.err == nil && len(out) == 0 {
		r.fail("placement message without items")
	}
	return out
}

// decodeTurns reads a turn message's items.
func decodeTurns(r *reader, intern func([]byte) string) []Turn {
	var out []Turn
	base := r.count("base time")
	for r.err == nil && len(r.b) > 0 {
		var t Turn
		t.Key = r.u64("key")
		t.Replica = r.name("replica", intern)
		failed := r.byte1("failed")
		if r.err == nil && failed > 1 {
			r.fail("failed flag %d", failed)
		}
		t.Failed = failed == 1
		t.Charge = r.count("charge")
		t.Prompt = r.int("prompt tokens")
		t.Output = r.int("output tokens")
		t.Chars = r.int("prompt chars")
		t.At = r.at(base)
		if r.err == nil {
			out = append(out, t)
		}
	}
	if r.err == nil && len(out) == 0 {
		r.fail("turn message without items")
	}
	return out
}

// decodePrefixes reads a prefix message's items.
func decodePrefixes(r *reader, intern func([]byte) string) []PrefixUpdate {
	var out []PrefixUpdate
	base := r.count("base time")
	for r.err == nil && len(r.b) > 0 {
		u := PrefixUpdate{Replica: r.name("replica", intern)}
		op := r.byte1("op")
		if r.err == nil && op > byte(PrefixLost) {
			r.fail("unknown prefix op %d", op)
		}
		u.Op = PrefixOp(op)
		u.At = r.at(base)
		n := r.uvarint("hash count")
		if r.err == nil && (n == 0 || n > uint64(len(r.b))/8) {
			r.fail("hash count %d with %d bytes left", n, len(r.b))
		}
		if r.err != nil {
			break
		}
		u.Hashes = make([]uint64, n)
		for i := range u.Hashes {
			u.Hashes[i] = r.u64("hash")
		}
		out = append(out, u)
	}
	if r.err == nil && len(out) == 0 {
		r.fail("prefix message without items")
	}
	return out
}

// decodeLoads reads a load message (a delta, or a snapshot when full).
func decodeLoads(r *reader, intern func([]byte) string, full bool) loadMsg {
	l := loadMsg{Full: full}
	l.Origin = r.name("origin", intern)
	l.Gen = r.uvarint("generation")
	l.Seq = r.uvarint("sequence")
	for r.err == nil && len(r.b) > 0 {
		e := LoadEntry{Replica: r.name("replica", intern)}
		e.Load.Requests = r.count("requests")
		e.Load.Tokens = r.count("tokens")
		if r.err == nil {
			l.Entries = append(l.Entries, e)
		}
	}
	return l
}

// int reads a count that must fit an int.
func (r *reader) int(what string) int {
	v := r.uvarint(what)
	if v > math.MaxInt32 {
		r.fail("%s %d out of range", what, v)
		return 0
	}
	return int(v)
}

// at reads a time difference from base; the sum must not overflow.
func (r *reader) at(base int64) int64 {
	d := r.varint("time")
	if r.err != nil {
		return 0
	}
	if (d > 0 && base > math.MaxInt64-d) || (d < 0 && base+d < 0) {
		r.fail("time out of range")
		return 0
	}
	return base + d
}
