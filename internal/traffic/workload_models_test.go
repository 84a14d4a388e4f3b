package traffic

import (
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"testing"
	"testing/fstest"
)

func loadW(t *testing.T, name string) Workload {
	t.Helper()
	w, err := LoadWorkload(fstest.MapFS{}, name)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// The workloads without models draw exactly the requests they drew before
// models existed: the hashes were computed by the code before the change.
func TestWorkloadsWithoutModelsUnchanged(t *testing.T) {
	want := map[string]uint64{
		"low-sharing":   0x3e86906f6c36a7eb,
		"multi-round":   0x1d2b2988c914f154,
		"shared-prefix": 0x33c77676a40e2713,
	}
	for n, h0 := range want {
		w := loadW(t, n)
		st := Stages{Rates: []float64{2, 8}, StageS: 20, WarmupS: 5, Poisson: true}
		h := fnv.New64a()
		for _, r := range w.Requests(OpenArrivals(st, 3), 3) {
			if r.Target != (Target{}) {
				t.Fatalf("%s: request %d asks for %+v", n, r.Line, r.Target)
			}
			fmt.Fprintf(h, "%d %d %d %d %v %s\n", r.Line, r.TimestampMS, r.InputLength, r.OutputLength, r.HashIDs, r.Conversation)
		}
		if got := h.Sum64(); got != h0 {
			t.Errorf("%s: requests hash %#x, want %#x (the traffic changed)", n, got, h0)
		}
	}
}

func manyRequests(t *testing.T, w Workload, seed int64, rate float64) []WorkloadRequest {
	t.Helper()
	st := Stages{Rates: []float64{rate}, StageS: 2000, Poisson: true}
	return w.Requests(OpenArrivals(st, seed), seed)
}

// users: the first round of every multi-round user (one draw each).
func firstRounds(reqs []WorkloadRequest) []WorkloadRequest {
	var out []WorkloadRequest
	for _, r := range reqs {
		if strings.HasSuffix(r.Conversation, ".0") {
			out = append(out, r)
		}
	}
	return out
}

// The lora workload's adapters follow its Zipf law: a chi-square test of
// the counts of 2,000 users against p(k) ∝ k^-s, and the exponent fitted
// on the ten most popular ranks within 0.15 of s.
func TestLoRAAdaptersFollowZipf(t *testing.T) {
	w := loadW(t, "lora")
	a := w.Adapters
	p := ZipfWeights(a.Count, a.ZipfS)
	names := w.AdapterNames()
	rank := map[string]int{}
	for k, n := range names {
		rank[n] = k
	}
	for _, seed := range []int64{1, 2, 3} {
		users := firstRounds(manyRequests(t, w, seed, 8))
		count := make([]float64, a.Count)
		for _, r := range users {
			k, ok := rank[r.Adapter]
			if !ok || r.Model != w.Models[0].Name {
				t.Fatalf("request %d asks for %+v", r.Line, r.Target)
			}
			count[k]++
		}
		n := float64(len(users))
		var chi2 float64
		for k := range count {
			e := n * p[k]
			chi2 += (count[k] - e) * (count[k] - e) / e
		}
		// 31 degrees of freedom: the 99.9 % quantile is 61.1.
		if chi2 > 61.1 {
			t.Errorf("seed %d: chi-square %.1f over %d users (counts %v)", seed, chi2, len(users), count)
		}
		// Least squares of log count on log rank over the top 10 ranks.
		var sx, sy, sxx, sxy float64
		for k := range 10 {
			x, y := math.Log(float64(k+1)), math.Log(count[k])
			sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
		}
		slope := (10*sxy - sx*sy) / (10*sxx - sx*sx)
		if math.Abs(-slope-a.ZipfS) > 0.15 {
			t.Errorf("seed %d: fitted exponent %.3f, want %.2f ± 0.15", seed, -slope, a.ZipfS)
		}
	}
	if w := ZipfWeights(3, 1); math.Abs(w[0]-6.0/11) > 1e-12 || math.Abs(w[2]-2.0/11) > 1e-12 {
		t.Errorf("ZipfWeights(3, 1) = %v", w)
	}
}

// The multi-model workload's users ask for its models by share; all rounds
// of a user ask for the same one; requests of different targets share no
// block (no KV cache is shared between models).
func TestMultiModelTargets(t *testing.T) {
	w := loadW(t, "multi-model")
	reqs := manyRequests(t, w, 5, 8)
	byUser := map[string]Target{}
	count := map[string]float64{}
	owner := map[int64]Target{}
	for _, r := range reqs {
		user, _, _ := strings.Cut(r.Conversation, ".")
		if prev, ok := byUser[user]; ok && prev != r.Target {
			t.Fatalf("%s asks for %v, then %v", r.Conversation, prev, r.Target)
		} else if !ok {
			byUser[user] = r.Target
			count[r.Model]++
		}
		for _, id := range r.HashIDs {
			if o, ok := owner[id]; ok && o != r.Target {
				t.Fatalf("block %d is asked by %v and %v", id, o, r.Target)
			}
			owner[id] = r.Target
		}
	}
	var total, shares float64
	for _, m := range w.Models {
		total += count[m.Name]
		shares += m.Share
	}
	for _, m := range w.Models {
		got, want := count[m.Name]/total, m.Share/shares
		if math.Abs(got-want) > 3*math.Sqrt(want*(1-want)/total)+0.005 {
			t.Errorf("%s: share %.3f of %v users, want %.3f", m.Name, got, total, want)
		}
	}
	// The system prompt is still shared within a model.
	if IdealCachedShare(traceOf(reqs)) < 0.5 {
		t.Errorf("ideal cached share %.3f", IdealCachedShare(traceOf(reqs)))
	}
}

func traceOf(reqs []WorkloadRequest) []TraceRequest {
	out := make([]TraceRequest, len(reqs))
	for i := range reqs {
		out[i] = reqs[i].TraceRequest
	}
	return out
}

func TestWorkloadModelsValidate(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{`"models":[{"name":"a b","share":1,"replicas":1,"preset":"vllm-h100-8b"}]`, "models[0].name"},
		{`"models":[{"name":"a","share":1,"replicas":1,"preset":"vllm-h100-8b"},{"name":"a","share":1,"replicas":1,"preset":"vllm-h100-8b"}]`, "given twice"},
		{`"models":[{"name":"a","share":0,"replicas":1,"preset":"vllm-h100-8b"}]`, "models[0].share"},
		{`"models":[{"name":"a","share":1,"replicas":0,"preset":"vllm-h100-8b"}]`, "models[0].replicas"},
		{`"models":[{"name":"a","share":1,"replicas":1,"preset":"tpu"}]`, "models[0].preset"},
		{`"adapters":{"count":4,"zipf_s":1,"max_loras":2,"load_ms":1}`, "exactly one entry in models"},
		{`"models":[{"name":"a","share":1,"replicas":1,"preset":"vllm-h100-8b"}],"adapters":{"count":0,"zipf_s":-1,"max_loras":0,"load_ms":-1}`,
			"adapters.count"},
		{`"models":[{"name":"a","share":1,"replicas":1,"preset":"vllm-h100-8b"}],"adapters":{"count":3,"zipf_s":1,"max_loras":2}`,
			"load_ms"},
	} {
		_, err := ParseWorkload([]byte(`{"name":"x","kind":"low-sharing","prompt_tokens":8,"output_tokens":5,` + tc.doc + `}`))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.doc, err, tc.want)
		}
	}
}
