package analysis

import (
	"bytes"
	"errors"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// checkPNG fails unless path is a decodable PNG of at least 600×300 pixels.
func checkPNG(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() < 600 || b.Dy() < 300 {
		t.Errorf("%s is %v, want at least 600×300", path, b)
	}
}

func TestWrite(t *testing.T) {
	t.Parallel() // rendering PNGs is the slow part of the suite
	out := filepath.Join(t.TempDir(), "out", "nested")
	s, err := Write(filepath.Join("testdata", "results"), out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Policies) != 2 || len(s.Runs) != 4 {
		t.Fatalf("summary has %d policies and %d runs, want 2 and 4", len(s.Policies), len(s.Runs))
	}
	for _, name := range []string{SummaryPNG, HitRateOverTimePNG} {
		checkPNG(t, filepath.Join(out, name))
	}
	for _, name := range []string{SummaryMD, PerRunCSV} {
		got, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join("testdata", "golden", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the golden file", name)
		}
	}

	if _, err := Write(filepath.Join("testdata", "results"), out, Options{BinS: -5}); err == nil ||
		!strings.Contains(err.Error(), "bin") {
		t.Errorf("negative bin: err = %v, want an error naming the bin", err)
	}
}

// TestChartsEdgeCases draws charts for summaries the test folder does not
// cover: undefined metrics, a policy without follow-up turns, many policies
// with long names (rotated labels), no scale-up.
func TestChartsEdgeCases(t *testing.T) {
	t.Parallel()
	nan := Estimate{Mean: math.NaN(), HalfWidth: math.NaN()}
	one := Estimate{Mean: 0.9, HalfWidth: math.NaN(), N: 1}
	s := Summary{Options: Options{}.WithDefaults(), ScaleReadyS: math.NaN()}
	for _, name := range []string{"round-robin", "mod-n", "consistent", "bounded", "llm-aware",
		"llm-aware-no-memory", "llm-aware-no-stickiness", "llm-aware-no-token-load"} {
		s.Policies = append(s.Policies, PolicySummary{Policy: name, Runs: 1,
			HitRate: one, LatencyP95S: nan, Imbalance: Estimate{Mean: 1.1, HalfWidth: 0.5, N: 3},
			OverTime: []Bin{{StartS: 0, EndS: 30, FollowUps: 3, Hits: 2, HitRate: 2.0 / 3}}})
	}
	s.Policies[1].OverTime = nil
	dir := t.TempDir()
	if err := WriteCharts(dir, s); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, filepath.Join(dir, SummaryPNG))
	checkPNG(t, filepath.Join(dir, HitRateOverTimePNG))

	// No policy at all: an error, not a panic inside the plotting library.
	empty := Summarize(nil, Options{})
	if err := WriteCharts(t.TempDir(), empty); !errors.Is(err, ErrNoRuns) {
		t.Errorf("charts of no runs: err = %v, want ErrNoRuns", err)
	}
}

func TestNiceTicks(t *testing.T) {
	tests := []struct {
		lo, hi float64
		want   string // labelled ticks
	}{
		{0, 100, "0 20 40 60 80 100"},     // percentages
		{0, 510, "0 100 200 300 400 500"}, // seconds of a run
		{0, 2.3, "0 0.5 1 1.5 2"},         // imbalance
		{0, 0.07, "0 0.02 0.04 0.06"},     // short latencies: no 0.060000000000000005
		{3, 3, "3"},                       // empty range
	}
	for _, tt := range tests {
		var labels []string
		for _, tk := range (niceTicks{}).Ticks(tt.lo, tt.hi) {
			if tk.Label != "" {
				labels = append(labels, tk.Label)
			}
		}
		if got := strings.Join(labels, " "); got != tt.want {
			t.Errorf("Ticks(%v, %v) = %q, want %q", tt.lo, tt.hi, got, tt.want)
		}
	}
}
