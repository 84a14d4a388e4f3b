package policy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/llm-ring/llm-ring/internal/ring"
)

// peerView returns n replicas llm-0 … llm-(n-1) on the router's default ring
// (160 virtual nodes) with the given in-flight requests (tokens = 100 per
// request); Match and Reported are left to the test.
func peerView(reqs ...int64) *View {
	names, r := peerRing(len(reqs))
	loads := make([]Load, len(reqs))
	for i, q := range reqs {
		loads[i] = Load{Requests: q, Tokens: 100 * q}
	}
	return NewView(names, r, loads)
}

// peerRings caches the rings of peerView by size (tests build thousands of
// views; a ring is immutable).
var peerRings = map[int]*ring.Ring{}

func peerRing(n int) ([]string, *ring.Ring) {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("llm-%d", i)
	}
	r, ok := peerRings[n]
	if !ok {
		r = ring.New(names, 160, nil)
		peerRings[n] = r
	}
	return names, r
}

// report sets replica r's reported signals.
func report(v *View, r int, running, waiting, kv float64) {
	v.Rows[r].Reported = Reported{Running: running, Waiting: waiting, KVUse: kv, HasQueue: true, HasKV: true}
}

func mustNew(t testing.TB, name string, s Settings) Policy {
	t.Helper()
	p, err := New(name, s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestP2C reproduces SGLang's power_of_two on two replicas, where both are
// always drawn: the less loaded wins, by reported load when both report it,
// by requests in flight for both when either does not (SGLang's
// test_power_of_two_edge_cases, scenarios 1–4).
func TestP2C(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(v *View) // loads are 10 and 2 requests
		want   int
		reason Reason
	}{
		// Nothing reported: the replica with fewer requests in flight.
		{"requests", func(v *View) {}, 1, P2CFewer},
		// Both report: llm-0 holds less KV despite its 10 requests (scenario 1).
		{"both reported", func(v *View) { report(v, 0, 4, 0, 0.1); report(v, 1, 2, 0, 0.9) }, 0, P2CLessKV},
		// Only llm-0 reports: both fall back to requests (scenario 2).
		{"one reported", func(v *View) { report(v, 0, 4, 0, 0.1) }, 1, P2CFewer},
		// Only llm-1 reports: the same (scenario 3).
		{"other reported", func(v *View) { report(v, 1, 4, 0, 0.9) }, 1, P2CFewer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustNew(t, "p2c", nil)
			for seq := range uint64(50) {
				v := peerView(10, 2)
				tt.setup(v)
				d := pickOnce(p, &Request{Hash: 99, Seq: seq, Last: -1}, v)
				if d.Replica != tt.want || d.Reason != tt.reason {
					t.Fatalf("seq %d: got %s (%s), want %s (%s)\n%s", seq, v.Names[d.Replica], d.Reason, v.Names[tt.want], tt.reason, d.Format())
				}
			}
		})
	}
	// reported_load off: requests decide even when both report.
	p := mustNew(t, "p2c", &P2C{ReportedLoad: false})
	v := peerView(10, 2)
	report(v, 0, 4, 0, 0.1)
	report(v, 1, 2, 0, 0.9)
	if d := pickOnce(p, &Request{Hash: 99, Last: -1}, v); d.Replica != 1 || d.Reason != P2CFewer {
		t.Errorf("reported_load=false: got %s (%s)\n%s", v.Names[d.Replica], d.Reason, d.Format())
	}
}

// TestP2CDraws checks the deterministic draw on eight replicas: the two
// candidates always differ, the pick is the less loaded of them (the first
// drawn on a tie), and over many requests every replica is drawn about
// equally often (2/8 of the draws each), as with SGLang's random draw.
func TestP2CDraws(t *testing.T) {
	p := mustNew(t, "p2c", nil)
	v := peerView(3, 1, 4, 1, 5, 9, 2, 6)
	drawn := make([]int, len(v.Names))
	const n = 40000
	for i := range n {
		req := Request{Hash: uint64(i%97) * 0x9e3779b97f4a7c15, Seq: uint64(i), Last: -1}
		d := pickOnce(p, &req, v)
		a, b := d.Trace.Cands[0], d.Trace.Cands[1]
		if a.Replica == b.Replica {
			t.Fatalf("request %d drew %s twice", i, v.Names[a.Replica])
		}
		want := int(a.Replica)
		if v.Rows[b.Replica].Load.Requests < v.Rows[a.Replica].Load.Requests {
			want = int(b.Replica)
		}
		if d.Replica != want {
			t.Fatalf("request %d: picked %s, want %s\n%s", i, v.Names[d.Replica], v.Names[want], d.Format())
		}
		drawn[a.Replica]++
		drawn[b.Replica]++
	}
	for r, c := range drawn {
		if share := float64(c) / (2 * n); share < 0.115 || share > 0.135 {
			t.Errorf("%s drawn in %.3f of the draws, want about 0.125", v.Names[r], share)
		}
	}
}

// TestP2CTrace pins the trace text: the reader can redo the draw's outcome.
func TestP2CTrace(t *testing.T) {
	p := mustNew(t, "p2c", nil)
	v := peerView(10, 2)
	d := pickOnce(p, &Request{Hash: 99, Seq: 0, Last: -1}, v)
	got := d.Format()
	for _, want := range []string{"p2c → llm-1 (p2c-fewer)", "over 2 allowed replicas", "in flight (requests): ", "llm-0=10", "llm-1=2"} {
		if !strings.Contains(got, want) {
			t.Errorf("trace lacks %q:\n%s", want, got)
		}
	}
}

// randomView is a random situation for the generic tests: loads, matches,
// reported signals (each known or not), a random exclusion set that leaves
// at least one replica.
func randomView(rng *rand.Rand, n int) *View {
	reqs := make([]int64, n)
	for i := range reqs {
		reqs[i] = int64(rng.IntN(4) * rng.IntN(40))
	}
	v := peerView(reqs...)
	for i := range v.Rows {
		v.Rows[i].Load.Tokens = reqs[i] * int64(50+rng.IntN(1000))
		if rng.IntN(2) == 0 {
			v.Rows[i].Match = rng.IntN(3000)
		}
		if rng.IntN(4) > 0 {
			v.Rows[i].Reported = Reported{Running: float64(rng.IntN(8)), Waiting: float64(rng.IntN(3) * rng.IntN(10)), HasQueue: true}
		}
		if rng.IntN(4) > 0 {
			v.Rows[i].Reported.KVUse, v.Rows[i].Reported.HasKV = rng.Float64(), true
		}
	}
	v.Recount()
	if rng.IntN(3) == 0 {
		v.Exclude = make([]uint64, (n+63)/64)
		keep := rng.IntN(n)
		for r := range n {
			if r != keep && rng.IntN(3) == 0 {
				v.Exclude[r/64] |= 1 << (r % 64)
			}
		}
	}
	return v
}

func randomRequest(rng *rand.Rand, seq uint64, n int) Request {
	req := Request{Hash: rng.Uint64(), Seq: seq, PromptTokens: rng.IntN(4000), OutputTokens: rng.IntN(300), Last: -1,
		FirstUser: strings.Repeat("ab", rng.IntN(3)) + "héllo wörld"[:rng.IntN(5)]}
	if rng.IntN(2) == 0 {
		req.Last, req.CachedTokens = rng.IntN(n), rng.IntN(3000)
	}
	return req
}

// TestReasonsInSpec drives every registered policy with its defaults through
// random views: every decision's reason is one its registry row lists (the
// metrics' label set is bounded by the rows), the replica is never excluded,
// and the trace renders with the policy's name first.
func TestReasonsInSpec(t *testing.T) {
	for _, sp := range Specs() {
		t.Run(sp.Name, func(t *testing.T) {
			p := mustNew(t, sp.Name, nil)
			rng := rand.New(rand.NewPCG(11, 12))
			seen := map[Reason]bool{}
			for i := range 3000 {
				n := 1 + rng.IntN(12)
				if i%100 == 0 {
					n = 300 // beyond the stack-sized scratch of ring walks
				}
				v := randomView(rng, n)
				req := randomRequest(rng, uint64(i), n)
				d := pickOnce(p, &req, v)
				if d.Replica < 0 || d.Replica >= n || v.Excluded(d.Replica) {
					t.Fatalf("step %d: picked %d (excluded=%v) of %d\n%s", i, d.Replica, d.Replica >= 0 && d.Replica < n && v.Excluded(d.Replica), n, d.Format())
				}
				if !slices.Contains(sp.Reasons, d.Reason) {
					t.Fatalf("step %d: reason %q not in the registry row %v\n%s", i, d.Reason, sp.Reasons, d.Format())
				}
				if !strings.HasPrefix(d.Format(), sp.Name) {
					t.Fatalf("trace does not start with %q:\n%s", sp.Name, d.Format())
				}
				seen[d.Reason] = true
			}
			t.Logf("reasons seen: %v", seen)
		})
	}
}

// TestPickAllocs checks that no registered policy allocates in Pick, on a
// view with every signal filled in (the benchmark reports the same).
func TestPickAllocs(t *testing.T) {
	for _, name := range Names() {
		for _, n := range []int{3, 300} {
			p := mustNew(t, name, nil)
			rng := rand.New(rand.NewPCG(5, 6))
			v := randomView(rng, n)
			v.Exclude = nil
			reqs := make([]Request, 64)
			for i := range reqs {
				reqs[i] = randomRequest(rng, uint64(i), n)
			}
			i := 0
			allocs := testing.AllocsPerRun(200, func() {
				p.Pick(&reqs[i%len(reqs)], v, &sink)
				i++
			})
			if allocs != 0 {
				t.Errorf("%s with %d replicas: %.1f allocations per Pick, want 0", name, n, allocs)
			}
		}
	}
}

// keyRing places llm-0, llm-1, llm-2 (one virtual node each) just after
// key's hash, in the given order: the walk from the key meets them so.
func keyRing(key string, order ...int) *View {
	names := []string{"llm-0", "llm-1", "llm-2"}
	h := ring.HashString(key)
	pos := map[string]uint64{}
	for i, r := range order {
		pos["0:"+names[r]] = h + uint64(10*(i+1))
	}
	return NewView(names, fakeRing(names, 1, pos), make([]Load, 3))
}

// TestPrefixHash reproduces KubeAI's CHWBL decisions (balance_chwbl.go) on
// hand-made loads; the key "You are a helpful assistant." has its ring home
// on llm-0, then llm-2, then llm-1.
func TestPrefixHash(t *testing.T) {
	const sys = "You are a helpful assistant."
	tests := []struct {
		name    string
		loads   []int64
		exclude uint64
		want    int
		reason  Reason
	}{
		// Nothing in flight: the home.
		{"idle home", []int64{0, 0, 0}, 0, 0, PrefixHome},
		// threshold = (10+1)/3 × 1.25 = 4.58: home llm-0 has 6 > 4.58 → next clockwise llm-2 (2).
		{"home over the bound", []int64{6, 2, 2}, 0, 2, PrefixNext},
		// threshold = (6+1)/3 × 1.25 = 2.92: llm-0 has 2 ≤ 2.92 → home.
		{"home within the bound", []int64{2, 2, 2}, 0, 0, PrefixHome},
		// llm-0 and llm-2 over (4.58): llm-1 (0) is the first that fits, the walk's third.
		{"walk to the third", []int64{5, 0, 5}, 0, 1, PrefixNext},
		// The only light replica (llm-1) is excluded: threshold = (18+1)/3 × 1.25 = 7.92,
		// llm-0 and llm-2 have 9 → none fits → the home (KubeAI's default endpoint).
		{"all over: default", []int64{9, 0, 9}, 1 << 1, 0, PrefixDefault},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustNew(t, "prefix-hash", nil)
			v := keyRing(sys, 0, 2, 1)
			for i, l := range tt.loads {
				v.Rows[i].Load = Load{Requests: l, Tokens: 100 * l}
			}
			v.Recount()
			if tt.exclude != 0 {
				v.Exclude = []uint64{tt.exclude}
			}
			d := pickOnce(p, &Request{Hash: 1, FirstUser: sys, Last: -1}, v)
			if d.Replica != tt.want || d.Reason != tt.reason {
				t.Errorf("got %s (%s), want %s (%s)\n%s", v.Names[d.Replica], d.Reason, v.Names[tt.want], tt.reason, d.Format())
			}
		})
	}
}

// TestPrefixHashTrace pins the whole trace of the overflow case.
func TestPrefixHashTrace(t *testing.T) {
	const sys = "You are a helpful assistant."
	p := mustNew(t, "prefix-hash", nil)
	v := keyRing(sys, 0, 2, 1)
	for i, l := range []int64{6, 2, 2} {
		v.Rows[i].Load = Load{Requests: l}
	}
	v.Recount()
	d := pickOnce(p, &Request{Hash: 1, FirstUser: sys, Last: -1}, v)
	want := fmt.Sprintf(`prefix-hash → llm-2 (prefix-next)
  key: first 28 characters of the first user message → hash=%016x → ring home llm-0
  in flight (requests): llm-0=6 llm-1=2 llm-2=2; threshold = (10+1)/3 × 125%% = 4.58
  llm-0: 6 > 4.58 → next
  llm-2: 2 ≤ 4.58 → prefix-next`, ring.HashString(sys))
	if got := d.Format(); got != want {
		t.Errorf("trace:\n%s\nwant:\n%s", got, want)
	}
}

// TestPrefixHashKey: the key is the first prefix_char_length characters
// (runes, as KubeAI counts them) of the first user message, whatever the
// conversation: two conversations sharing those characters share a home.
func TestPrefixHashKey(t *testing.T) {
	if k, n := prefixKey("héllo wörld", 4); k != "héll" || n != 4 {
		t.Errorf("prefixKey(4) = %q, %d; want \"héll\", 4", k, n)
	}
	if k, n := prefixKey("hé", 100); k != "hé" || n != 2 {
		t.Errorf("prefixKey(100) = %q, %d; want \"hé\", 2", k, n)
	}
	p := mustNew(t, "prefix-hash", &PrefixHash{MeanLoadPercentage: 125, PrefixCharLength: 10})
	v := peerView(0, 0, 0, 0, 0, 0, 0, 0)
	homes := map[int]bool{}
	for i := range 50 {
		// Equal first 10 characters, different conversations and endings.
		d := pickOnce(p, &Request{Hash: uint64(i), FirstUser: fmt.Sprintf("0123456789 question %d", i), Last: -1}, v)
		homes[d.Replica] = true
	}
	if len(homes) != 1 {
		t.Errorf("one 10-character prefix went to %d replicas, want 1", len(homes))
	}
	for i := range 50 {
		d := pickOnce(p, &Request{Hash: 7, FirstUser: fmt.Sprintf("%02d3456789", i), Last: -1}, v)
		homes[d.Replica] = true
	}
	if len(homes) < 4 {
		t.Errorf("50 different prefixes went to %d of 8 replicas, want them spread", len(homes))
	}
}

// TestCacheAware reproduces SGLang's cache_aware decisions on hand-made
// cases (defaults: cache_threshold 0.3, balance_abs_threshold 64,
// balance_rel_threshold 1.5); the prompt is 1000 tokens.
func TestCacheAware(t *testing.T) {
	tests := []struct {
		name   string
		loads  []int64
		match  []int
		want   int
		reason Reason
	}{
		// 100−10 = 90 > 64 and 100 > 1.5×10: imbalanced → shortest queue llm-1,
		// although llm-0 holds the whole prompt.
		{"imbalanced: shortest queue", []int64{100, 10, 50}, []int{1000, 0, 0}, 1, CacheImbalanced},
		// 100−40 = 60 ≤ 64: balanced → llm-0's match 900/1000 = 0.9 > 0.3.
		{"abs threshold not met", []int64{100, 40, 50}, []int{900, 0, 0}, 0, CacheMatch},
		// 150−80 = 70 > 64 and 150 > 1.5×80 = 120: imbalanced → llm-1 despite llm-0's 0.9 match.
		{"both thresholds met", []int64{150, 80, 90}, []int{900, 0, 0}, 1, CacheImbalanced},
		// 200−136 = 64, not above 64: balanced → the match.
		{"abs threshold is strict", []int64{200, 136, 150}, []int{900, 0, 0}, 0, CacheMatch},
		// 200−100 = 100 > 64 and 200 > 1.5×100: imbalanced.
		{"rel threshold met", []int64{200, 100, 150}, []int{900, 0, 0}, 1, CacheImbalanced},
		// 170−120 = 50 ≤ 64: balanced; best match 310/1000 = 0.31 > 0.3 → llm-2.
		{"just above the threshold", []int64{170, 120, 150}, []int{0, 100, 310}, 2, CacheMatch},
		// Best match 300/1000 = 0.3, not above 0.3 → least loaded llm-1.
		{"at the threshold: least loaded", []int64{3, 1, 2}, []int{0, 100, 300}, 1, CacheLowMatch},
		// Nothing matched → least loaded; ties go to the first in name order (llm-0).
		{"no match, tie by order", []int64{1, 1, 2}, []int{0, 0, 0}, 0, CacheLowMatch},
		// 65−0 = 65 > 64 and 65 > 1.5×0: an idle replica makes the set imbalanced.
		{"an idle replica unbalances", []int64{65, 0, 30}, []int{1000, 0, 0}, 1, CacheImbalanced},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustNew(t, "cache-aware", nil)
			v := peerView(tt.loads...)
			for r, m := range tt.match {
				v.Rows[r].Match = m
			}
			d := pickOnce(p, &Request{Hash: 5, PromptTokens: 1000, Last: -1}, v)
			if d.Replica != tt.want || d.Reason != tt.reason {
				t.Errorf("got %s (%s), want %s (%s)\n%s", v.Names[d.Replica], d.Reason, v.Names[tt.want], tt.reason, d.Format())
			}
		})
	}
}

// TestCacheAwareTrace pins the trace of the imbalanced switch and of a match.
func TestCacheAwareTrace(t *testing.T) {
	p := mustNew(t, "cache-aware", nil)
	v := peerView(100, 10, 50)
	v.Rows[0].Match = 1000
	d := pickOnce(p, &Request{Hash: 5, PromptTokens: 1000, Last: -1}, v)
	want := `cache-aware → llm-1 (imbalanced)
  in flight / matched tokens: llm-0=100/1000 llm-1=10/0 llm-2=50/0
  imbalanced: max−min = 100−10 = 90 > 64 and 100 > 1.5×10 → shortest queue: llm-1`
	if got := d.Format(); got != want {
		t.Errorf("trace:\n%s\nwant:\n%s", got, want)
	}
	v = peerView(3, 1, 2)
	v.Rows[2].Match = 450
	d = pickOnce(p, &Request{Hash: 5, PromptTokens: 1000, Last: -1}, v)
	want = `cache-aware → llm-2 (prefix-match)
  in flight / matched tokens: llm-0=3/0 llm-1=1/0 llm-2=2/450
  balanced: max−min = 3−1 = 2 ≤ 64
  best match 450 of 1000 prompt tokens = 0.450 > 0.3 → llm-2 (the best match, first clockwise from the home on a tie)`
	if got := d.Format(); got != want {
		t.Errorf("trace:\n%s\nwant:\n%s", got, want)
	}
}

// TestCacheAwareRelThreshold: with balance_rel_threshold 2, max must exceed
// twice the minimum; 200 vs 100 is not imbalanced, so the match decides.
func TestCacheAwareRelThreshold(t *testing.T) {
	p := mustNew(t, "cache-aware", &CacheAware{CacheThreshold: 0.3, BalanceAbsThreshold: 64, BalanceRelThreshold: 2})
	v := peerView(200, 100, 150)
	v.Rows[0].Match = 900
	if d := pickOnce(p, &Request{Hash: 5, PromptTokens: 1000, Last: -1}, v); d.Replica != 0 || d.Reason != CacheMatch {
		t.Errorf("got %s (%s), want llm-0 (prefix-match)\n%s", v.Names[d.Replica], d.Reason, d.Format())
	}
}

// TestScored reproduces the endpoint picker's default profile on hand-made
// cases (weights queue 2, kv 2, prefix 3); the prompt is 1000 tokens.
func TestScored(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(v *View) // three replicas, in flight 5, 1, 3
		want   int
		reason Reason
	}{
		// Reported queues 4, 0, 2 → 0, 1, 0.5; KV use 0.5 each → 0.5; no match.
		// Scores 2·0+1 = 1, 2·1+1 = 3, 2·0.5+1 = 2 → llm-1.
		{"shortest queue", func(v *View) {
			report(v, 0, 4, 4, 0.5)
			report(v, 1, 4, 0, 0.5)
			report(v, 2, 4, 2, 0.5)
		}, 1, ScoredTop},
		// Same, but llm-0 holds 800/1000 of the prompt: 1 + 3·0.8 = 3.4 > 3 → llm-0.
		{"prefix outweighs queue", func(v *View) {
			report(v, 0, 4, 4, 0.5)
			report(v, 1, 4, 0, 0.5)
			report(v, 2, 4, 2, 0.5)
			v.Rows[0].Match = 800
		}, 0, ScoredTop},
		// 600/1000: 1 + 1.8 = 2.8 < 3 → the queue wins, llm-1.
		{"queue outweighs a weaker prefix", func(v *View) {
			report(v, 0, 4, 4, 0.5)
			report(v, 1, 4, 0, 0.5)
			report(v, 2, 4, 2, 0.5)
			v.Rows[0].Match = 600
		}, 1, ScoredTop},
		// llm-2's queue unknown: the queue scorer uses requests in flight for
		// all (5, 1, 3 → 0, 1, 0.5), KV use 0.9, 0.9, 0.1 → 0.1, 0.1, 0.9:
		// 0.2, 2.2, 1 + 1.8 = 2.8 → llm-2.
		{"unknown queue: in flight", func(v *View) {
			report(v, 0, 0, 0, 0.9)
			report(v, 1, 0, 9, 0.9)
			v.Rows[2].Reported = Reported{KVUse: 0.1, HasKV: true}
		}, 2, ScoredTop},
		// Nothing reported: in flight decides (kv drops out) → llm-1.
		{"nothing reported", func(v *View) {}, 1, ScoredTop},
		// Equal queues (all 1) and KV: every score 2 + 2·0.5 = 3 → tie →
		// the first clockwise from the home of hash 5.
		{"tie", func(v *View) {
			report(v, 0, 1, 1, 0.5)
			report(v, 1, 1, 1, 0.5)
			report(v, 2, 1, 1, 0.5)
		}, -1, ScoredTie},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustNew(t, "scored", nil)
			v := peerView(5, 1, 3)
			tt.setup(v)
			req := Request{Hash: 5, PromptTokens: 1000, Last: -1}
			want := tt.want
			if want < 0 {
				want = v.Ring.Home(req.Hash)
			}
			d := pickOnce(p, &req, v)
			if d.Replica != want || d.Reason != tt.reason {
				t.Errorf("got %s (%s), want %s (%s)\n%s", v.Names[d.Replica], d.Reason, v.Names[want], tt.reason, d.Format())
			}
		})
	}
}

// TestScoredTrace pins the trace of the unknown-queue case.
func TestScoredTrace(t *testing.T) {
	p := mustNew(t, "scored", nil)
	v := peerView(5, 1, 3)
	report(v, 0, 0, 0, 0.9)
	report(v, 1, 0, 9, 0.9)
	v.Rows[2].Reported = Reported{KVUse: 0.1, HasKV: true}
	v.Rows[0].Match = 250
	d := pickOnce(p, &Request{Hash: 5, PromptTokens: 1000, Last: -1}, v)
	want := `scored → llm-2 (top-score)
  score = 2·queue + 2·kv + 3·prefix
  queue: a replica's queue is unknown → router-side requests in flight, min 1 max 5
  llm-0: queue 5 → 0.000, kv 0.100, prefix 0.250 → 0.950
  llm-1: queue 1 → 1.000, kv 0.100, prefix 0.000 → 2.200
  llm-2: queue 3 → 0.500, kv 0.900, prefix 0.000 → 2.800
  top score 2.800 → llm-2`
	if got := d.Format(); got != want {
		t.Errorf("trace:\n%s\nwant:\n%s", got, want)
	}
}

// TestScoredChosenInTrace: with more replicas than trace rows, the chosen
// replica's row is still shown.
func TestScoredChosenInTrace(t *testing.T) {
	p := mustNew(t, "scored", nil)
	loads := make([]int64, 20)
	for i := range loads {
		loads[i] = 5
	}
	loads[17] = 0
	v := peerView(loads...)
	d := pickOnce(p, &Request{Hash: 5, PromptTokens: 1000, Last: -1}, v)
	if d.Replica != 17 || !strings.Contains(d.Format(), "llm-17: queue 0 → 1.000") || !strings.Contains(d.Format(), "… 12 more replicas scored") {
		t.Errorf("got %s, want llm-17 with its row in the trace:\n%s", v.Names[d.Replica], d.Format())
	}
}

// TestKVCost reproduces Dynamo's cost trade-off: an 800-token prompt (50
// blocks of 16) fully cached on llm-0 and nowhere else. llm-1 is idle:
// cost 1·50 + (0 + 50) = 100. llm-0 costs 1·0 + (a + 50) with a active
// blocks: it keeps the request, busier as it is, while a < 50; at a = 50
// the costs tie; beyond, the active blocks outweigh the overlap.
func TestKVCost(t *testing.T) {
	p := mustNew(t, "kv-cost", nil)
	for a := int64(0); a <= 60; a++ {
		v := peerView(1, 0)
		v.Rows[0].Load.Tokens = a*16 - 5 // rounds up to a blocks
		if a == 0 {
			v.Rows[0].Load.Tokens = 0
		}
		v.Rows[0].Match = 800
		v.Recount()
		req := Request{Hash: 5, PromptTokens: 800, OutputTokens: 100, Last: -1}
		d := pickOnce(p, &req, v)
		want, reason := 0, KVLowest
		switch {
		case a == 50:
			want, reason = v.Ring.Home(req.Hash), KVTie
		case a > 50:
			want = 1
		}
		if d.Replica != want || d.Reason != reason {
			t.Fatalf("%d active blocks on llm-0: got %s (%s), want %s (%s)\n%s", a, v.Names[d.Replica], d.Reason, v.Names[want], reason, d.Format())
		}
		if d.Charge != 800 {
			t.Fatalf("charge %d, want the prompt's 800 tokens (Dynamo tracks prompt blocks)", d.Charge)
		}
	}
}

// TestKVCostWeight: overlap_score_weight 0.5 halves the prefill term, so the
// cached replica keeps the request only while a < 25.
func TestKVCostWeight(t *testing.T) {
	p := mustNew(t, "kv-cost", &KVCost{OverlapScoreWeight: 0.5, BlockSize: 16})
	for _, tc := range []struct {
		active int64
		want   int
	}{{24, 0}, {26, 1}} {
		v := peerView(1, 0)
		v.Rows[0].Load.Tokens, v.Rows[0].Match = tc.active*16, 800
		d := pickOnce(p, &Request{Hash: 5, PromptTokens: 800, Last: -1}, v)
		if d.Replica != tc.want {
			t.Errorf("%d active blocks: got %s, want %s\n%s", tc.active, v.Names[d.Replica], v.Names[tc.want], d.Format())
		}
	}
}

// TestKVCostTrace pins the trace: a partial match (500 tokens = 31 whole
// blocks) and a fractional prefill; llm-0's 40 active blocks outweigh its
// 31 cached ones.
func TestKVCostTrace(t *testing.T) {
	p := mustNew(t, "kv-cost", nil)
	v := peerView(2, 1)
	v.Rows[0].Load.Tokens, v.Rows[0].Match = 640, 500
	v.Rows[1].Load.Tokens = 100
	d := pickOnce(p, &Request{Hash: 5, PromptTokens: 810, Last: -1}, v)
	want := `kv-cost → llm-1 (lowest-cost)
  block 16 tokens; prompt 810 tokens = 51 blocks; cost = 1 × prefill blocks + (active blocks + 51)
  llm-0: matched 500 tokens = 31 cached blocks → prefill 19.625; active 40 → decode 91; cost 110.625
  llm-1: matched 0 tokens = 0 cached blocks → prefill 50.625; active 7 → decode 58; cost 108.625
  lowest cost 108.625 → llm-1`
	if got := d.Format(); got != want {
		t.Errorf("trace:\n%s\nwant:\n%s", got, want)
	}
}

// TestPeerSettings: each peer's invalid settings are refused with an error
// naming the key, and its defaults are its project's.
func TestPeerSettings(t *testing.T) {
	for _, tc := range []struct {
		policy, raw, key string
	}{
		{"prefix-hash", `{"mean_load_percentage": 99}`, "mean_load_percentage"},
		{"prefix-hash", `{"prefix_char_length": 0}`, "prefix_char_length"},
		{"cache-aware", `{"cache_threshold": 1.5}`, "cache_threshold"},
		{"cache-aware", `{"balance_abs_threshold": -1}`, "balance_abs_threshold"},
		{"cache-aware", `{"balance_rel_threshold": -2}`, "balance_rel_threshold"},
		{"scored", `{"queue_weight": -1}`, "queue_weight"},
		{"scored", `{"queue_weight": 0, "kv_cache_weight": 0, "prefix_weight": 0}`, "queue_weight"},
		{"kv-cost", `{"block_size": 0}`, "block_size"},
		{"kv-cost", `{"overlap_score_weight": -1}`, "overlap_score_weight"},
		{"p2c", `{"reported_load": 3}`, "reported_load"},
	} {
		sp, err := Lookup(tc.policy)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sp.Decode(nil, []byte(tc.raw)); err == nil || !strings.HasPrefix(err.Error(), tc.key+":") {
			t.Errorf("%s %s: err = %v, want one naming %s", tc.policy, tc.raw, err, tc.key)
		}
	}
	for name, want := range map[string]string{
		"p2c":         `map[reported_load:true]`,
		"prefix-hash": `map[mean_load_percentage:125 prefix_char_length:100]`,
		"cache-aware": `map[balance_abs_threshold:64 balance_rel_threshold:1.5 cache_threshold:0.3]`,
		"scored":      `map[kv_cache_weight:2 prefix_weight:3 queue_weight:2]`,
		"kv-cost":     `map[block_size:16 overlap_score_weight:1]`,
	} {
		sp, _ := Lookup(name)
		if got := fmt.Sprint(SettingsMap(sp.Defaults())); got != want {
			t.Errorf("%s defaults = %s, want %s", name, got, want)
		}
	}
}
