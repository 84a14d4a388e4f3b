package model

import (
	"flag"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

var calibTable = flag.Bool("calibration-table", false, "print the calibration table of docs/notes/engines.md")

// frontend is the latency that vLLM's API server adds to a request's first
// token outside the engine (HTTP, tokenization, detokenization), fitted on
// the L4 run at concurrency 1 (TTFT p50 27.0 ms, of which the engine model
// gives 9.1 ms). Published TTFTs are compared with the model's TTFT plus
// this constant.
const frontend = 18 * time.Millisecond

// calibPoint is one published figure and the model's.
type calibPoint struct {
	preset, what, source string
	published, model     float64 // ms
	tolerance            float64 // relative; 0.2 unless the miss is explained
}

// batchAtOnce runs prompts of the given lengths and answers of the given
// lengths, all submitted at time 0 (vLLM's benchmark_serving at request
// rate inf), and returns the median TTFT and median TPOT in ms.
func batchAtOnce(t *testing.T, cfg Config, in, out []int) (ttft, tpot float64) {
	t.Helper()
	cfg.AnswerMin, cfg.AnswerMax = 100000, 100000
	r := newPagedReplica(t, cfg)
	empty := map[ID]bool{}
	for i := range in {
		// A request with an empty answer in the published run was still
		// prefilled; its TTFT was not recorded.
		id, _ := r.Submit(0, Request{Tokens: toksFrom(1+i*1000, in[i]), NPredict: max(out[i], 1)})
		empty[id] = out[i] == 0
	}
	var ttfts, tpots []float64
	for id, res := range runAll(t, r) {
		if empty[id] {
			continue
		}
		ttfts = append(ttfts, ms(res.PromptDone-res.Submitted+frontend))
		if res.PredictedN > 1 {
			tpots = append(tpots, ms(res.Done-res.PromptDone)/float64(res.PredictedN-1))
		}
	}
	return median(ttfts), median(tpots)
}

// closedLoop runs c users, each sending n requests of in prompt tokens and
// out answer tokens one after the other (vLLM's benchmark at
// --max-concurrency c), and returns the TTFT p50 and the ITL p50 in ms.
func closedLoop(t *testing.T, cfg Config, c, n, in, out int) (ttft, itl float64) {
	t.Helper()
	cfg.AnswerMin, cfg.AnswerMax = 100000, 100000
	r := newPagedReplica(t, cfg)
	user := map[ID]int{}
	sent := make([]int, c)
	submit := func(u int, at time.Duration) {
		id, err := r.Submit(at, Request{Tokens: toksFrom(1+(u*n+sent[u])*in, in), NPredict: out})
		if err != nil {
			t.Fatal(err)
		}
		user[id] = u
		sent[u]++
	}
	for u := range c {
		submit(u, 0)
	}
	var ttfts, itls []float64
	var evs []Event
	for {
		at, ok := r.NextEvent()
		if !ok {
			break
		}
		evs = r.Advance(at, evs[:0])
		for _, e := range evs {
			if e.Kind != EventDone {
				continue
			}
			res := e.Result
			ttfts = append(ttfts, ms(res.PromptDone-res.Submitted+frontend))
			itls = append(itls, ms(res.Done-res.PromptDone)/float64(res.PredictedN-1))
			if u := user[e.ID]; sent[u] < n {
				submit(u, e.At)
			}
		}
	}
	return median(ttfts), median(itls)
}

func median(v []float64) float64 {
	slices.Sort(v)
	if len(v) == 0 {
		return math.NaN()
	}
	return v[len(v)/2]
}

func mustPreset(t *testing.T, name string) Config {
	t.Helper()
	c, err := Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The 10 ShareGPT prompts of LambdaLabsML/vllm-benchmark's prompt_10 runs.
var (
	lambdaIn    = []int{13, 25, 27, 10, 329, 29, 399, 328, 4, 205}
	lambdaOut8  = []int{120, 429, 233, 194, 101, 741, 9, 3, 6, 31}
	lambdaOut70 = []int{120, 661, 233, 194, 101, 741, 0, 0, 6, 35}
)

func calibration(t *testing.T) []calibPoint {
	const lambda = "LambdaLabsML/vllm-benchmark results/prompt_10/"
	var pts []calibPoint
	ttft, tpot := batchAtOnce(t, mustPreset(t, PresetH100Llama8B), lambdaIn, lambdaOut8)
	src := lambda + "1xH100-80GB-SXM/Meta-Llama-3-8B-Instruct_tp1_len2048.json"
	pts = append(pts,
		calibPoint{PresetH100Llama8B, "TTFT p50, 10 ShareGPT prompts at once (1,369 tokens)", src, 62.19, ttft, 0.2},
		calibPoint{PresetH100Llama8B, "TPOT p50, same run (batch ≤ 10)", src, 7.56, tpot, 0.2})
	ttft, tpot = batchAtOnce(t, mustPreset(t, PresetH100Llama70B), lambdaIn, lambdaOut70)
	src = lambda + "4xH100-80GB-SXM/Meta-Llama-3-70B-Instruct_tp4_len2048.json"
	pts = append(pts,
		calibPoint{PresetH100Llama70B, "TTFT p50, 10 ShareGPT prompts at once (1,369 tokens)", src, 140.56, ttft, 0.2},
		calibPoint{PresetH100Llama70B, "TPOT p50, same run (batch ≤ 8)", src, 18.12, tpot, 0.2})
	l4 := mustPreset(t, PresetL4Qwen05B)
	pubTTFT := map[int]float64{1: 27.0, 2: 37.8, 4: 50.1, 8: 60.9, 16: 103.8, 32: 135.3}
	pubITL := map[int]float64{1: 5.1, 2: 5.2, 4: 5.3, 8: 5.5, 16: 6.0, 32: 7.1}
	for _, c := range []int{1, 2, 4, 8, 16, 32} {
		ttft, itl := closedLoop(t, l4, c, 10, 256, 128)
		tol := 0.2
		if c >= 2 {
			// The published TTFT p50 grows 5× from 1 to 32 users with the
			// GPU far from saturated; the model's engine time does not: the
			// growth is the API server's queueing (one Python process
			// tokenizing and detokenizing for every stream), which the
			// engine model leaves out. See docs/notes/engines.md.
			tol = 0.75
		}
		pts = append(pts,
			calibPoint{PresetL4Qwen05B, fmt.Sprintf("TTFT p50, %d users, 256 in / 128 out", c), "ai.wmx.dev/benchmarks", pubTTFT[c], ttft, tol},
			calibPoint{PresetL4Qwen05B, fmt.Sprintf("ITL p50, %d users, 256 in / 128 out", c), "ai.wmx.dev/benchmarks", pubITL[c], itl, 0.2})
	}
	return pts
}

func TestRooflinePresetsMatchPublishedFigures(t *testing.T) {
	for _, p := range calibration(t) {
		dev := p.model/p.published - 1
		if *calibTable {
			fmt.Printf("| %s | %s | %.1f | %.1f | %+.0f %% |\n", p.preset, p.what, p.published, p.model, 100*dev)
		}
		if math.Abs(dev) > p.tolerance {
			t.Errorf("%s, %s: model %.1f ms vs published %.1f ms (%s): %+.0f %%, beyond %.0f %%",
				p.preset, p.what, p.model, p.published, p.source, 100*dev, 100*p.tolerance)
		}
	}
}

// TestRooflinePredictions prints, with -calibration-table, each roofline
// preset's TTFT for one request at several prompt lengths and its ITL at
// several batch sizes (no published counterpart: predictions), and checks
// that they grow with the load.
func TestRooflinePredictions(t *testing.T) {
	for _, name := range []string{PresetH100Llama8B, PresetH100Llama70B, PresetL4Qwen05B} {
		cfg := mustPreset(t, name)
		prev := 0.0
		for _, n := range []int{1000, 4000, 16000} {
			ttft, _ := batchAtOnce(t, cfg, []int{n}, []int{2})
			if *calibTable {
				fmt.Printf("| %s | TTFT, one request of %d tokens | %.1f |\n", name, n, ttft)
			}
			if ttft <= prev {
				t.Errorf("%s: TTFT %.1f ms at %d tokens, not above %.1f", name, ttft, n, prev)
			}
			prev = ttft
		}
		prev = 0
		for _, b := range []int{1, 16, 64, 256} {
			_, itl := closedLoop(t, cfg, b, 3, 1000, 200)
			if *calibTable {
				fmt.Printf("| %s | ITL p50, %d users, 1000 in / 200 out | %.1f |\n", name, b, itl)
			}
			if itl < prev {
				t.Errorf("%s: ITL %.1f ms at %d users, below %.1f", name, itl, b, prev)
			}
			prev = itl
		}
	}
}
