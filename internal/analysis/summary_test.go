package analysis

import (
	"bytes"
	"flag"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/llm-ring/llm-ring/internal/record"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

func TestCombine(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name     string
		xs       []float64
		mean, hw float64 // hw NaN: no interval
		n        int
	}{
		{"no runs", nil, nan, nan, 0},
		{"one run: a mean, no interval", []float64{0.8}, 0.8, nan, 1},
		{"three runs: sd 1, hw = t(0.975, 2) / √3", []float64{1, 2, 3}, 2, 4.3027 / math.Sqrt(3), 3},
		{"undefined runs (NaN) are left out", []float64{1, nan, 3}, 2, 12.7062 * math.Sqrt2 / math.Sqrt2, 2},
		{"identical runs: zero-width interval", []float64{5, 5, 5, 5}, 5, 0, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := Combine(tt.xs)
			same := func(a, b float64) bool { return math.IsNaN(a) && math.IsNaN(b) || math.Abs(a-b) < 1e-9 }
			if e.N != tt.n || !same(e.Mean, tt.mean) || !same(e.HalfWidth, tt.hw) {
				t.Errorf("Combine(%v) = %+v, want mean %v hw %v n %d", tt.xs, e, tt.mean, tt.hw, tt.n)
			}
		})
	}
}

// studentCDF integrates Student's t density from 0 to x (Simpson's rule)
// and adds the lower half: an independent check of the quantile table.
func studentCDF(x float64, df int) float64 {
	v := float64(df)
	lg1, _ := math.Lgamma((v + 1) / 2)
	lg2, _ := math.Lgamma(v / 2)
	c := math.Exp(lg1-lg2) / math.Sqrt(v*math.Pi)
	pdf := func(t float64) float64 { return c * math.Pow(1+t*t/v, -(v+1)/2) }
	const n = 20000
	h := x / n
	sum := pdf(0) + pdf(x)
	for i := 1; i < n; i++ {
		w := 2.0
		if i%2 == 1 {
			w = 4
		}
		sum += w * pdf(float64(i)*h)
	}
	return 0.5 + sum*h/3
}

func TestStudentT975(t *testing.T) {
	// Table entries are exact to 4 decimals; interpolated ones (35, 50, 90,
	// 500, 10000) to about 1e-3 in the quantile.
	for _, df := range []int{1, 2, 3, 4, 5, 7, 10, 15, 20, 29, 30, 35, 40, 50, 60, 90, 120, 500, 10000} {
		q := StudentT975(df)
		if p := studentCDF(q, df); math.Abs(p-0.975) > 5e-5 {
			t.Errorf("df %d: t = %v has CDF %v, want 0.975", df, q, p)
		}
	}
	if !math.IsNaN(StudentT975(0)) {
		t.Error("df 0 should be NaN")
	}
}

func TestComparePolicies(t *testing.T) {
	got := []string{"zeta", "llm-aware-no-memory", "llm-aware", "bounded", "consistent", "mod-n", "round-robin", "bounded-tokens"}
	SortPolicies(got)
	want := []string{"round-robin", "mod-n", "consistent", "bounded", "llm-aware", "bounded-tokens", "llm-aware-no-memory", "zeta"}
	if !slices.Equal(got, want) {
		t.Errorf("order = %v, want %v", got, want)
	}
}

func TestHitRateBins(t *testing.T) {
	// Two runs of one policy pooled in 30 s bins; the 30–60 s bin is empty.
	mk := func(id string, seed int64, rows ...record.Request) Run {
		for i := range rows {
			rows[i].RunID, rows[i].Policy, rows[i].Seed = id, "p", seed
		}
		return Run{Info: record.Run{RunID: id, Policy: "p", Seed: seed, Replicas: 1}, Requests: rows}
	}
	runs := []Run{
		mk("r1", 1,
			row("a", 1, "x", 0, 100, 0),
			row("a", 2, "x", 100, 10, 10000), // bin 0: hit
			row("a", 3, "x", 0, 200, 65000),  // bin 2: miss
		),
		mk("r2", 2,
			row("a", 1, "x", 0, 100, 0),
			row("a", 2, "x", 0, 200, 29999), // bin 0: miss
		),
	}
	s := Summarize(runs, Options{BinS: 30})
	want := []Bin{
		{StartS: 0, EndS: 30, FollowUps: 2, Hits: 1, HitRate: 0.5},
		{StartS: 60, EndS: 90, FollowUps: 1, Hits: 0, HitRate: 0},
	}
	if got := s.Policies[0].OverTime; !slices.Equal(got, want) {
		t.Errorf("bins = %+v, want %+v", got, want)
	}
}

// TestGolden analyses the hand-made folder testdata/results (two policies,
// two runs each, a scale-up in bounded-s2; see testdata/README.md for the
// expected numbers) and compares summary.md and per_run.csv with
// testdata/golden. Refresh with: go test ./internal/analysis -run Golden -update
func TestGolden(t *testing.T) {
	runs, err := Load(filepath.Join("testdata", "results"))
	if err != nil {
		t.Fatal(err)
	}
	s := Summarize(runs, Options{})
	var md, csv bytes.Buffer
	if err := WriteMarkdown(&md, s); err != nil {
		t.Fatal(err)
	}
	if err := WritePerRunCSV(&csv, s); err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string][]byte{SummaryMD: md.Bytes(), PerRunCSV: csv.Bytes()} {
		path := filepath.Join("testdata", "golden", name)
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update to create it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from %s (run with -update after checking):\n--- got\n%s\n--- want\n%s", name, path, got, want)
		}
	}

	// A few hand-checked numbers, independent of the golden files.
	b1 := s.Runs[0]
	if b1.RunID != "bounded-s1" || b1.HitRate != 0.5 || b1.AvoidableMisses != 1 || b1.Errors != 1 {
		t.Errorf("bounded-s1: %+v", b1)
	}
	if got, want := b1.Imbalance, 920.0/545; math.Abs(got-want) > 1e-12 {
		t.Errorf("bounded-s1 imbalance = %v, want 920/545", got)
	}
	b2 := s.Runs[1]
	if b2.MovedShare != 1.0/3 || b2.ScaleHitRate != 2.0/3 || b2.ReplicaCount != 3 {
		t.Errorf("bounded-s2 moved %v, scale hit rate %v, replicas %d; want 1/3, 2/3, 3", b2.MovedShare, b2.ScaleHitRate, b2.ReplicaCount)
	}
	if la := s.Runs[2]; la.RunID != "llm-aware-s1" || la.ReplicaCount != 3 {
		t.Errorf("llm-aware-s1 (3 replicas, one idle): %+v", la)
	}
	if p := s.Policies[0]; p.Policy != "bounded" || p.Requests != 19 || p.Errors != 1 || p.ScaleRuns != 1 || p.ScaleHitRate.N != 1 {
		t.Errorf("bounded summary: %+v", p)
	}
}
