// Package analysis turns recorded runs into the study's results: per-run
// metrics, per-policy means with 95 % confidence intervals, a markdown
// summary, a per-run CSV and two charts.
//
// It reads records only (internal/record): a results folder holds, per run,
// <run_id>.csv (one row per request) and <run_id>.json (what was run, and
// when the extra replica became ready). Times are milliseconds of model time
// since the run start, so live and simulated runs are analysed alike.
//
// Typical use:
//
//	runs, err := analysis.Load(dir)          // read and check a results folder
//	sum := analysis.Summarize(runs, analysis.Options{})
//	analysis.WriteMarkdown(os.Stdout, sum)
//
// or all at once, writing summary.md, per_run.csv, summary.png and
// hit_rate_over_time.png:
//
//	sum, err := analysis.Write(resultsDir, outDir, analysis.Options{})
//
// The metric definitions (what makes a follow-up turn a hit, an avoidable
// miss, a redirect, a moved conversation, ...) are in Metrics' field docs and
// in docs/experiment.md. Computation is pure and deterministic: no clock, no
// goroutines, no dependence on map iteration order.
package analysis
