package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/llm-ring/llm-ring/internal/analysis"
)

// cmdAnalyze summarises the recorded runs of a results folder: it combines
// the runs of each policy, writes summary.md, per_run.csv, summary.png and
// hit_rate_over_time.png, and prints the table.
func cmdAnalyze(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("analyze", stderr)
	resultsDir := fs.String("results-dir", "", "folder of recorded runs (<run_id>.csv + <run_id>.json) (required)")
	outDir := fs.String("out-dir", "", "folder for summary.md, per_run.csv and the charts (default: --results-dir)")
	binS := fs.Float64("bin-s", analysis.DefaultBinS, "bin width of the hit rate over time, seconds")
	windowS := fs.Float64("window-s", analysis.DefaultWindowS, "window after the scale-up for its hit rate, seconds")
	sloTTFT := fs.Duration("slo-ttft", time.Second, "goodput SLO of the field metrics: time to first token")
	sloTPOT := fs.Duration("slo-tpot", 100*time.Millisecond, "goodput SLO of the field metrics: time per output token after the first")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *resultsDir == "" {
		return usageError{fmt.Errorf("--results-dir is required")}
	}
	if *outDir == "" {
		*outDir = *resultsDir
	}
	if !(*binS > 0) {
		return usageError{fmt.Errorf("--bin-s must be positive, got %v", *binS)}
	}
	if !(*windowS > 0) {
		return usageError{fmt.Errorf("--window-s must be positive, got %v", *windowS)}
	}
	if *sloTTFT <= 0 || *sloTPOT <= 0 {
		return usageError{fmt.Errorf("--slo-ttft and --slo-tpot must be positive, got %v and %v", *sloTTFT, *sloTPOT)}
	}
	opts := analysis.Options{BinS: *binS, WindowS: *windowS}
	if err := opts.Validate(); err != nil {
		return usageError{err}
	}
	s, err := analysis.Write(*resultsDir, *outDir, opts)
	if err != nil {
		return err
	}
	if err := analysis.WriteTable(stdout, s); err != nil {
		return err
	}
	slo := analysis.SLO{TTFTMS: float64(*sloTTFT) / 1e6, TPOTMS: float64(*sloTPOT) / 1e6}
	if _, err := analysis.WriteField(*resultsDir, *outDir, "live runs of "+*resultsDir, slo); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nwrote %s, %s, %s, %s\n",
		filepath.Join(*outDir, analysis.SummaryMD), filepath.Join(*outDir, analysis.PerRunCSV),
		filepath.Join(*outDir, analysis.SummaryPNG), filepath.Join(*outDir, analysis.HitRateOverTimePNG))
	fmt.Fprintf(stdout, "field metrics (SLO: TTFT %v, TPOT %v): %s, %s, %s (with stages: the charts against the rate)\n",
		*sloTTFT, *sloTPOT, filepath.Join(*outDir, analysis.FieldMD), filepath.Join(*outDir, analysis.FieldPerRunCSV),
		filepath.Join(*outDir, analysis.PerStageCSV))
	return nil
}
