package admission

import (
	"math"
	"testing"

	"github.com/llm-ring/llm-ring/internal/policy"
)

// TestDecodeFitLine: answers on the line tpot = 10 ms + 5 ms·x are fitted
// exactly, whatever their weights; nothing is predicted before
// LedgerMinAnswers answers; counts that do not spread (var < 1) give the
// proportional line ȳ·x/x̄; a falling line is flattened to its mean.
func TestDecodeFitLine(t *testing.T) {
	var f decodeFit
	for x := 1; x <= 8; x++ {
		if _, ok := f.predict(4); ok {
			t.Fatalf("after %d answers: predicted, want none before %d", x-1, LedgerMinAnswers)
		}
		f.learn(float64(x), float64(10*ms+5*ms*int64(x)))
	}
	for _, c := range []struct{ x, want float64 }{{1, 15e6}, {4, 30e6}, {20, 110e6}} {
		if got, ok := f.predict(c.x); !ok || !nearRel(got, c.want) {
			t.Fatalf("line: predict(%v) = %v, %v; want %v", c.x, got, ok, c.want)
		}
	}
	var p decodeFit // every answer at 4 requests, 20 ms: 20 ms × 6/4 at 6
	for range 10 {
		p.learn(4, float64(20*ms))
	}
	if got, ok := p.predict(6); !ok || !nearRel(got, 30e6) {
		t.Fatalf("no spread: predict(6) = %v, %v; want 30 ms", got, ok)
	}
	var d decodeFit // 100 ms − 5 ms·x: slope floored at 0, the weighted mean everywhere
	for x := 1; x <= 8; x++ {
		d.learn(float64(x), float64(100*ms-5*ms*int64(x)))
	}
	lo, _ := d.predict(1)
	hi, _ := d.predict(50)
	if !nearRel(lo, hi) || !nearRel(lo, d.y/d.w) {
		t.Fatalf("falling line: predict(1) = %v, predict(50) = %v; want both the mean %v", lo, hi, d.y/d.w)
	}
	d.learn(0, 1)  // no count: ignored
	d.learn(1, -1) // no time: ignored
	if d.n != 8 {
		t.Fatalf("invalid answers learned: n = %d, want 8", d.n)
	}
}

func nearRel(a, b float64) bool { return a == b || (a-b)/b < 1e-9 && (b-a)/b < 1e-9 }

// TestLedgerDecodeCount: an answer's x is the mean count of requests in
// flight on its replica from its first token to its end. Replica a: 1
// dispatched at 0, 2 at 1 s, 1's first token at 1 s, 3 dispatched at 2 s,
// 1 answered at 4 s: 2 requests over [1 s, 2 s], 3 over [2 s, 4 s], (2 +
// 6) / 3 = 8/3. Decoded pairs its TPOT with the answer Answered ended
// last, once; one without a preceding answer teaches nothing. Request 2,
// answered at 5 s without a first token told, counts from its dispatch
// at 1 s: 2 over [1 s, 2 s], 3 over [2 s, 4 s], 2 over [4 s, 5 s]:
// (2 + 6 + 2) / 4 = 10/4.
func TestLedgerDecodeCount(t *testing.T) {
	l := NewLedger()
	l.Dispatched(1, "a", 100, 0, 0)
	l.Dispatched(2, "a", 100, 0, sec)
	l.First(1, sec)
	l.Dispatched(3, "a", 100, 0, 2*sec)
	l.Decoded(30 * ms) // no answer before it: nothing learned
	if l.dec.n != 0 {
		t.Fatalf("a TPOT without an answer was learned")
	}
	l.Answered(1, "a", 0, sec, 0, 100, 4*sec)
	l.Decoded(30 * ms)
	l.Decoded(40 * ms) // the answer's x is consumed: not learned twice
	if l.dec.n != 1 || !nearRel(l.dec.x, 8.0/3) || !nearRel(l.dec.y, 30e6) {
		t.Fatalf("after one answer: n %d, Σx %v, Σy %v; want 1, 8/3, 30 ms", l.dec.n, l.dec.x, l.dec.y)
	}
	l.Answered(2, "a", sec, 0, 0, 100, 5*sec)
	l.Decoded(50 * ms)
	if want := 8.0/3*decodeDecay + 10.0/4; l.dec.n != 2 || !nearRel(l.dec.x, want) {
		t.Fatalf("after two answers: n %d, Σx %v; want 2, %v", l.dec.n, l.dec.x, want)
	}
	if l.reps[0].n != 1 {
		t.Fatalf("requests in flight on a: %d, want 1", l.reps[0].n)
	}
	l.Answered(9, "a", 0, sec, 0, 100, 6*sec) // no entry: Learn, and no x
	l.Decoded(60 * ms)
	if l.dec.n != 2 {
		t.Fatalf("an answer without an entry taught the line")
	}
}

// TestDecodeScore: DecodeShare 0.5 of a 100 ms TPOT SLO is a 50 ms limit;
// the line 10 ms + 5 ms·x predicts 30 ms for replica a with 3 in flight
// (x = 4: 0.6) and 15 ms for b with none (x = 1: 0.3): pool score 0.45,
// the other terms 0; the decode mean and the other terms' mean are kept
// apart. The headroom does not loosen it; with no TPOT SLO, no share, or
// the line unknown the term is off.
func TestDecodeScore(t *testing.T) {
	s := on()
	s.DecodeShare = 0.5
	c := New(s)
	c.SetTPOT(100 * ms)
	l := c.Ledger()
	now := 10 * sec
	v := &policy.View{Names: []string{"a", "b"}, Rows: make([]policy.Row, 2), Now: now}
	for id := uint64(1); id <= 3; id++ {
		l.Dispatched(id, "a", 10, 0, now)
	}
	if got := c.Score(v, 0); got != 0 {
		t.Fatalf("line unknown: score %v, want 0", got)
	}
	for x := 1; x <= 8; x++ {
		l.dec.learn(float64(x), float64(10*ms+5*ms*int64(x)))
	}
	if got := c.Score(v, 0); !near(got, 0.45) {
		t.Fatalf("score %v, want 0.45", got)
	}
	if got, ok := l.DecodeTPOT("a", 1); !ok || !nearRel(got, 35e6) { // one pending more: x = 5
		t.Fatalf("DecodeTPOT(a, 1) = %v, %v; want 35 ms", got, ok)
	}
	// A mean of its own: a's KV use 0.8 scores 1 (b 0): the others' mean
	// 0.5 against the decode mean 0.45 — 0.5, not the (max(1, 0.6) + 0.3)
	// / 2 = 0.65 of a term inside each replica's max.
	v.Rows[0].Reported = policy.Reported{KVUse: 0.8, HasKV: true, At: now}
	if got := c.Score(v, 0); !near(got, 0.5) {
		t.Fatalf("with a's KV term: score %v, want 0.5", got)
	}
	v.Rows[0].Reported = policy.Reported{}
	l.head.m = 2 // a headroom (work_target) leaves the decode term as it is
	if got := c.Score(v, 0); !near(got, 0.45) {
		t.Fatalf("with headroom 2: score %v, want 0.45", got)
	}
	c.SetTPOT(0)
	if got := c.Score(v, 0); got != 0 {
		t.Fatalf("no TPOT SLO: score %v, want 0", got)
	}
	s.DecodeShare = 0
	c2 := New(s)
	c2.SetTPOT(100 * ms)
	c2.Ledger().dec = l.dec
	if got := c2.Score(v, 0); got != 0 {
		t.Fatalf("decode_share 0: score %v, want 0", got)
	}
	for _, bad := range []float64{-0.1, 4.5} {
		s.DecodeShare = bad
		if err := s.Validate(); err == nil {
			t.Fatalf("decode_share %v: no error", bad)
		}
	}
}

// TestDecodeQuantile: with decode_quantile 0.9 and a 100 ms TPOT SLO, an
// answer within it multiplies the decode limit's gain by e^(0.2/9), one
// over it by e^(−0.2) (at the SLO counts as within); the gain stays in
// [1/4, 4]; without a quantile or an SLO it stays 1. With the gain 2 the
// TestDecodeScore pool scores 0.45 / 2.
func TestDecodeQuantile(t *testing.T) {
	s := on()
	s.DecodeShare, s.DecodeQuantile = 0.5, 0.9
	c := New(s)
	l := c.Ledger()
	l.Decoded(500 * ms) // no TPOT SLO yet
	if l.DecodeGain() != 1 {
		t.Fatalf("no SLO: gain %v, want 1", l.DecodeGain())
	}
	c.SetTPOT(100 * ms)
	l.Decoded(100 * ms)
	if want := math.Exp(0.2 / 9); !near(l.DecodeGain(), want) {
		t.Fatalf("one within: gain %v, want %v", l.DecodeGain(), want)
	}
	l.Decoded(101 * ms)
	if want := math.Exp(0.2/9 - 0.2); !near(l.DecodeGain(), want) {
		t.Fatalf("then one over: gain %v, want %v", l.DecodeGain(), want)
	}
	for range 100 { // e^(−20): clamped to 1/4
		l.Decoded(sec)
	}
	if l.DecodeGain() != 0.25 {
		t.Fatalf("100 over: gain %v, want 0.25", l.DecodeGain())
	}
	for range 3000 { // e^(3000 × 0.2/9) from 1/4: clamped to 4
		l.Decoded(ms)
	}
	if l.DecodeGain() != 4 {
		t.Fatalf("3000 within: gain %v, want 4", l.DecodeGain())
	}
	l.dec.g = 2
	v := &policy.View{Names: []string{"a", "b"}, Rows: make([]policy.Row, 2), Now: 10 * sec}
	for id := uint64(1); id <= 3; id++ {
		l.Dispatched(id, "a", 10, 0, 10*sec)
	}
	l.dec.w, l.dec.x, l.dec.y, l.dec.xx, l.dec.xy, l.dec.n = 0, 0, 0, 0, 0, 0
	for x := 1; x <= 8; x++ {
		l.dec.learn(float64(x), float64(10*ms+5*ms*int64(x)))
	}
	if got := c.Score(v, 0); !near(got, 0.225) {
		t.Fatalf("gain 2: score %v, want 0.225", got)
	}
	s.DecodeQuantile = 0
	c2 := New(s)
	c2.SetTPOT(100 * ms)
	c2.Ledger().Decoded(sec)
	if c2.Ledger().DecodeGain() != 1 {
		t.Fatalf("no quantile: gain %v, want 1", c2.Ledger().DecodeGain())
	}
	for _, bad := range []float64{-0.1, 1} {
		s.DecodeQuantile = bad
		if err := s.Validate(); err == nil {
			t.Fatalf("decode_quantile %v: no error", bad)
		}
	}
}
