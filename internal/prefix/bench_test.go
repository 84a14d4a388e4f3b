package prefix_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/prefix"
)

var sinkBlocks []uint64

// BenchmarkHasher hashes 1,000 characters per op.
func BenchmarkHasher(b *testing.B) {
	text := randomText(rand.New(rand.NewPCG(7, 7)), 1000)[:1000]
	for _, bc := range []int{64, 256} {
		h := prefix.NewHasher(bc)
		h.WriteString(text)
		b.Run(fmt.Sprintf("block=%d/string", bc), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				h.Reset(bc)
				h.WriteString(text)
			}
			sinkBlocks = h.Blocks()
		})
		b.Run(fmt.Sprintf("block=%d/messages", bc), func(b *testing.B) {
			// Four messages, 1,000 characters with their framing.
			parts := []string{text[:400], text[400:550], text[550:850], text[850:904]}
			b.ReportAllocs()
			b.SetBytes(1000)
			for b.Loop() {
				h.Reset(bc)
				for i, p := range parts {
					h.WriteMessage([]string{"system", "user", "assistant", "user"}[i], p)
				}
			}
			sinkBlocks = h.Blocks()
		})
	}
}

// benchConfig is the proposed default: 256-character blocks (≈64 tokens),
// 60,000 tokens per replica, a 120 s TTL; block size varies.
func benchConfig(blockChars int) prefix.Config {
	return prefix.Config{BlockChars: blockChars, CharsPerToken: 4, CapacityTokens: 60000, TTL: int64(120 * time.Second)}
}

// randomBlocks is a prompt's worth of block hashes no other prompt shares.
func randomBlocks(r *rand.Rand, n int) []uint64 {
	p := make([]uint64, n)
	for i := range p {
		p[i] = r.Uint64()
	}
	return p
}

// filledIndex is an Index with 64 replicas full of unrelated prompts
// (touched at time 0), and a 4,000-token prompt (16,000 characters).
func filledIndex(b *testing.B, blockChars int) (*prefix.Index, []uint32, []uint64) {
	cfg := benchConfig(blockChars)
	ix, err := prefix.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 3))
	replicas := seq(64)
	for _, id := range replicas {
		for held := 0; held < cfg.CapacityBlocks(); held += 50 {
			ix.Insert(id, randomBlocks(r, 50), 0)
		}
	}
	h := prefix.NewHasher(blockChars)
	h.WriteMessage("system", randomText(r, 2000))
	h.WriteMessage("user", randomText(r, 16000-2000-40))
	return ix, replicas, slices.Clone(h.Blocks())
}

func BenchmarkMatch(b *testing.B) {
	second := int64(time.Second)
	for _, bc := range []int{64, 256} {
		for _, sc := range []struct {
			name  string
			setup func(ix *prefix.Index, replicas []uint32, prompt []uint64)
			now   int64
		}{
			// The whole prompt on one replica (its conversation), the system
			// prompt's blocks (2,000 characters) on all.
			{"one-holder", func(ix *prefix.Index, rs []uint32, p []uint64) {
				for _, id := range rs {
					ix.Insert(id, p[:2000/bc], second)
				}
				ix.Insert(7, p, second)
			}, 2 * second},
			// Worst case: every replica holds the whole prompt.
			{"all-hold", func(ix *prefix.Index, rs []uint32, p []uint64) {
				for _, id := range rs {
					ix.Insert(id, p, second)
				}
			}, 2 * second},
			// Nobody holds its first block.
			{"miss", func(*prefix.Index, []uint32, []uint64) {}, 2 * second},
			// Every replica holds the prompt; all its other blocks have
			// expired. The first call drops them (each is dropped once);
			// the timing is of the calls after.
			{"all-hold-after-expiry", func(ix *prefix.Index, rs []uint32, p []uint64) {
				for _, id := range rs {
					ix.Insert(id, p, 100*second)
				}
			}, 130 * second},
		} {
			ix, replicas, prompt := filledIndex(b, bc)
			sc.setup(ix, replicas, prompt)
			out := make([]int32, len(replicas))
			b.Run(fmt.Sprintf("block=%d/blocks=%d/replicas=64/%s", bc, len(prompt), sc.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					ix.Match(prompt, sc.now, replicas, out)
				}
			})
		}
	}
}

// BenchmarkMatchWide is the simulator's scale test in miniature: 1,000
// replicas (936 of them in slots >= 64, wide.go), each holding a shared
// system prompt and conversations of its own, and a prompt whose leading
// blocks (the system prompt) all hold and whose conversation one holds:
// each pick of a policy that reads Match asks this of every replica.
func BenchmarkMatchWide(b *testing.B) {
	cfg := benchConfig(256)
	ix, err := prefix.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(8, 8))
	replicas := seq(1000)
	system := randomBlocks(r, 8)
	convs := make([][]uint64, len(replicas))
	for k, id := range replicas {
		for held := 0; held < cfg.CapacityBlocks()/2; held += 30 {
			ix.Insert(id, append(slices.Clone(system), randomBlocks(r, 22)...), 1)
		}
		convs[k] = append(slices.Clone(system), randomBlocks(r, 22)...)
		ix.Insert(id, convs[k], 1)
	}
	out := make([]int32, len(replicas))
	b.Run("replicas=1000/system-all-conversation-one", func(b *testing.B) {
		b.ReportAllocs()
		k := 0
		for b.Loop() {
			ix.Match(convs[k%len(convs)], 2, replicas, out)
			k++
		}
	})
	b.Run("replicas=1000/insert-next-turn", func(b *testing.B) {
		b.ReportAllocs()
		k := 0
		for b.Loop() {
			c := convs[k%len(convs)]
			ix.Insert(replicas[k%len(replicas)], c, int64(2+k))
			k++
		}
	})
}

func BenchmarkInsert(b *testing.B) {
	for _, bc := range []int{64, 256} {
		ix, replicas, prompt := filledIndex(b, bc)
		ix.Insert(7, prompt, 1)
		b.Run(fmt.Sprintf("block=%d/blocks=%d/touch", bc, len(prompt)), func(b *testing.B) {
			// The prompt is already held: a conversation's next turn.
			b.ReportAllocs()
			now := int64(1)
			for b.Loop() {
				now++
				ix.Insert(7, prompt, now)
			}
		})
		r := rand.New(rand.NewPCG(5, 5))
		pool := make([][]uint64, 256)
		for i := range pool {
			pool[i] = randomBlocks(r, len(prompt))
		}
		b.Run(fmt.Sprintf("block=%d/blocks=%d/churn", bc, len(prompt)), func(b *testing.B) {
			// New prompts into full replicas: every block evicts one.
			b.ReportAllocs()
			k := 0
			for b.Loop() {
				k++
				ix.Insert(replicas[k%len(replicas)], pool[k%len(pool)], int64(k))
			}
		})
	}
}

// TestMemoryBudget fills 1,000 replicas to a capacity of 100,000 tokens at
// 64 tokens per block (1,562 blocks each, none shared: the worst case for the
// block map) and measures the heap.
func TestMemoryBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 1.56 M (block, replica) pairs")
	}
	const budgetPerPair = 128 // bytes; see docs/notes/routing-seam.md
	cfg := prefix.Config{BlockChars: 256, CharsPerToken: 4, CapacityTokens: 100000, TTL: int64(120 * time.Second)}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ix, err := prefix.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(4, 4))
	chunk := make([]uint64, 64)
	for id := range uint32(1000) {
		for held := 0; held < cfg.CapacityBlocks(); held += len(chunk) {
			for i := range chunk {
				chunk[i] = r.Uint64()
			}
			ix.Insert(id, chunk, 0)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	st := ix.Stats()
	runtime.KeepAlive(ix)
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if want := 1000 * cfg.CapacityBlocks(); st.Pairs != want {
		t.Fatalf("%d pairs, want %d", st.Pairs, want)
	}
	perPair := float64(heap) / float64(st.Pairs)
	t.Logf("1,000 replicas × %d blocks = %d pairs: heap %.1f MiB = %.1f B/pair; Stats.Bytes %.1f MiB",
		cfg.CapacityBlocks(), st.Pairs, float64(heap)/(1<<20), perPair, float64(st.Bytes)/(1<<20))
	if perPair > budgetPerPair {
		t.Errorf("%.1f bytes per (block, replica), over the %d-byte budget", perPair, budgetPerPair)
	}
	if ratio := float64(st.Bytes) / float64(heap); ratio < 0.67 || ratio > 1.5 {
		t.Errorf("Stats.Bytes is %.2f× the measured heap; the estimate is off", ratio)
	}
}

// TestMemoryStaysBoundedUnderChurn replaces every replica's blocks many times
// over: deletes and inserts in the maps must not make them grow without end.
func TestMemoryStaysBoundedUnderChurn(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts 4 M blocks")
	}
	cfg := benchConfig(64) // 3,750 blocks per replica
	ix, err := prefix.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(6, 6))
	prompt := make([]uint64, 250)
	churn := func(rounds int) {
		for k := range rounds {
			for i := range prompt {
				prompt[i] = r.Uint64()
			}
			ix.Insert(uint32(k%64), prompt, 0)
		}
	}
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	churn(64 * 3750 / 250 * 2) // full, then replaced once
	full := heap()
	churn(64 * 3750 / 250 * 8) // replaced 8 more times
	after := heap()
	runtime.KeepAlive(ix)
	t.Logf("heap when full %.1f MiB, after 8× churn %.1f MiB", float64(full)/(1<<20), float64(after)/(1<<20))
	if float64(after) > 1.3*float64(full) {
		t.Errorf("heap grew from %d to %d bytes under churn", full, after)
	}
}
