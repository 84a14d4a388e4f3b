package analysis

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Write analyses every run in resultsDir and writes summary.md, per_run.csv,
// summary.png and hit_rate_over_time.png into outDir (created if needed;
// it may be resultsDir itself). It returns the summary, e.g. for printing
// the table with WriteTable.
func Write(resultsDir, outDir string, opts Options) (Summary, error) {
	if err := opts.Validate(); err != nil {
		return Summary{}, err
	}
	runs, err := Load(resultsDir)
	if err != nil {
		return Summary{}, err
	}
	s := Summarize(runs, opts)
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return Summary{}, fmt.Errorf("create output folder: %w", err)
	}
	if err := WriteFile(filepath.Join(outDir, SummaryMD), func(w io.Writer) error { return WriteMarkdown(w, s) }); err != nil {
		return Summary{}, err
	}
	if err := WriteFile(filepath.Join(outDir, PerRunCSV), func(w io.Writer) error { return WritePerRunCSV(w, s) }); err != nil {
		return Summary{}, err
	}
	if err := WriteCharts(outDir, s); err != nil {
		return Summary{}, err
	}
	return s, nil
}
