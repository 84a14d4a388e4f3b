package analysis

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llm-ring/llm-ring/internal/record"
)

func TestFieldOfByHand(t *testing.T) {
	rows := []record.Request{
		{Status: 200, TTFTMS: 100, LatencyMS: 1100, PredictedN: 11, CacheN: 50, PromptN: 50}, // TPOT 100: meets the SLO
		{Status: 200, TTFTMS: 300, LatencyMS: 1300, PredictedN: 6, CacheN: 0, PromptN: 100},  // TPOT 200: misses it
		{Status: 503, Error: "no replica", CacheN: 0, PromptN: 0},                            // fails
		{Status: 200, TTFTMS: 2000, LatencyMS: 2000, PredictedN: 1, CacheN: 100, PromptN: 0}, // TTFT misses
	}
	f := FieldOf(rows, 2000, SLO{TTFTMS: 1000, TPOTMS: 150})
	if f.Requests != 4 || f.Success != 0.75 {
		t.Fatalf("requests %d success %v", f.Requests, f.Success)
	}
	if f.OutputTokS != 9 || f.GoodShare != 0.25 || f.GoodTokS != 5.5 {
		t.Fatalf("out %v good %v good tok/s %v", f.OutputTokS, f.GoodShare, f.GoodTokS)
	}
	if f.CachedShare != 0.5 || f.TTFTP50 != 300 || f.TPOTP50 != 150 {
		t.Fatalf("cached %v ttft p50 %v tpot p50 %v", f.CachedShare, f.TTFTP50, f.TPOTP50)
	}
}

func TestCrossingRate(t *testing.T) {
	means := []StageMean{
		{Policy: "a", Rate: 1, Field: Field{TTFTP90: 100}},
		{Policy: "a", Rate: 4, Field: Field{TTFTP90: 1900}},
		{Policy: "b", Rate: 1, Field: Field{TTFTP90: 2000}},
		{Policy: "c", Rate: 1, Field: Field{TTFTP90: 10}},
	}
	// halfway from 100 to 1900 in log rate between 1 and 4: rate 2
	if c := CrossingRate(means, "a", 1000); math.Abs(c-2) > 1e-9 {
		t.Fatalf("a crosses at %v, want 2", c)
	}
	if c := CrossingRate(means, "b", 1000); c != 0 {
		t.Fatalf("b: %v, want 0 (below the first rate)", c)
	}
	if c := CrossingRate(means, "c", 1000); !math.IsInf(c, 1) {
		t.Fatalf("c: %v, want +Inf", c)
	}
}

// TestWriteFieldWithoutStages: closed-loop runs (the study's) have no
// stages; the field report then gives each policy's whole runs and draws
// no chart against the rate (a log-scale chart of nothing used to panic).
func TestWriteFieldWithoutStages(t *testing.T) {
	out := t.TempDir()
	means, err := WriteField(filepath.Join("testdata", "results"), out, "study", SLO{TTFTMS: 1000, TPOTMS: 100})
	if err != nil || len(means) != 0 {
		t.Fatalf("WriteField: %d stage means, %v", len(means), err)
	}
	md, err := os.ReadFile(filepath.Join(out, FieldMD))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "Seed means per policy over each run") || strings.Count(string(md), "\n| ") < 3 {
		t.Errorf("field.md without stages:\n%s", md)
	}
	for _, name := range []string{FieldTTFTPNG, FieldGoodPNG} {
		if _, err := os.Stat(filepath.Join(out, name)); err == nil {
			t.Errorf("%s drawn for runs without stages", name)
		}
	}
}
