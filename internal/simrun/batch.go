// Package simrun runs simulations in batches for the command line: every
// run of a batch on a pool of workers (each run single-threaded and
// deterministic), its rows and JSON written as `llm-ring analyze` reads
// them, and sweeps summarised in a table and a chart. The simulator itself
// (internal/sim) stays free of files, goroutines and plotting.
package simrun

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/llm-ring/llm-ring/internal/record"
	"github.com/llm-ring/llm-ring/internal/sim"
)

// WriteRun runs spec and writes <dir>/<run_id>.csv (its rows) and
// <dir>/<run_id>.json (its record.Run), the files `llm-ring analyze` reads.
// An interrupted or failed run leaves no JSON, so the analysis refuses the
// half-written CSV rather than reading it as a complete run.
func WriteRun(ctx context.Context, dir string, spec sim.Spec) (sim.Result, error) {
	csvPath := filepath.Join(dir, spec.RunID+".csv")
	f, err := os.Create(csvPath)
	if err != nil {
		return sim.Result{}, err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 256<<10)
	w, err := record.NewWriter(bw)
	if err != nil {
		return sim.Result{}, err
	}
	res, err := sim.Run(ctx, spec, w)
	if err != nil {
		return res, fmt.Errorf("run %s: %w", spec.RunID, err)
	}
	if err := w.Flush(); err != nil {
		return res, fmt.Errorf("%s: %w", csvPath, err)
	}
	if err := bw.Flush(); err != nil {
		return res, fmt.Errorf("%s: %w", csvPath, err)
	}
	if err := f.Close(); err != nil {
		return res, fmt.Errorf("%s: %w", csvPath, err)
	}
	if err := record.WriteRunFile(filepath.Join(dir, spec.RunID+".json"), &res.Info); err != nil {
		return res, err
	}
	return res, nil
}

// BatchOptions tunes RunAll.
type BatchOptions struct {
	// Workers is how many runs go at once (0: GOMAXPROCS). Each run is
	// single-threaded; runs are independent, so their output does not depend
	// on the number of workers or on scheduling.
	Workers int
	// Force overwrites existing run files; without it, RunAll refuses to
	// start if any run's CSV or JSON already exists in dir.
	Force bool
	// Done, if set, is called after each run, from the run's goroutine
	// (calls are serialised).
	Done func(spec *sim.Spec, res *sim.Result)
}

// ErrExists reports a run file that is already there (see BatchOptions.Force).
var ErrExists = errors.New("already exists")

// RunAll runs every spec, Workers at a time, writing each run's files into
// dir (created if needed). Results are in spec order. The first error stops
// the runs not yet started and cancels those running.
func RunAll(ctx context.Context, dir string, specs []sim.Spec, opts BatchOptions) ([]sim.Result, error) {
	jobs := make([]Job, len(specs))
	for i := range specs {
		jobs[i] = Job{Dir: dir, Spec: specs[i]}
	}
	return RunJobs(ctx, jobs, opts)
}

// Job is one run and the folder its files go to.
type Job struct {
	Dir  string
	Spec sim.Spec
}

// RunJobs is RunAll with a folder per run (a sweep writes each value's runs
// into a folder of their own), all in one pool of workers.
func RunJobs(ctx context.Context, jobs []Job, opts BatchOptions) ([]sim.Result, error) {
	if err := checkJobs(jobs); err != nil {
		return nil, err
	}
	if err := prepareDirs(jobs, opts.Force); err != nil {
		return nil, err
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	return runPool(ctx, jobs, max(1, min(workers, len(jobs))), opts.Done)
}

// checkJobs refuses a run id given twice in one folder and a spec that
// does not validate, before anything runs.
func checkJobs(jobs []Job) error {
	type runKey struct{ dir, id string }
	seen := make(map[runKey]bool, len(jobs))
	for i := range jobs {
		j := &jobs[i]
		k := runKey{filepath.Clean(j.Dir), j.Spec.RunID}
		if seen[k] {
			return fmt.Errorf("run id %q appears twice in %s", k.id, k.dir)
		}
		seen[k] = true
		if err := j.Spec.Validate(); err != nil {
			return fmt.Errorf("run %s: %w", j.Spec.RunID, err)
		}
	}
	return nil
}

// prepareDirs creates the runs' folders and, without force, refuses a run
// whose CSV or JSON is already there.
func prepareDirs(jobs []Job, force bool) error {
	for i := range jobs {
		if err := os.MkdirAll(jobs[i].Dir, 0o755); err != nil {
			return fmt.Errorf("create output folder: %w", err)
		}
		if force {
			continue
		}
		for _, ext := range []string{".csv", ".json"} {
			p := filepath.Join(jobs[i].Dir, jobs[i].Spec.RunID+ext)
			if _, err := os.Stat(p); err == nil {
				return fmt.Errorf("%s: %w (use --force to overwrite, or another --out-dir)", p, ErrExists)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// runPool runs the jobs on workers goroutines, all joined before it
// returns; the first error cancels the rest, and is the one reported (not
// the cancellations it caused). done, when set, is called after each run,
// one call at a time.
func runPool(ctx context.Context, jobs []Job, workers int, done func(*sim.Spec, *sim.Result)) ([]sim.Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make([]sim.Result, len(jobs))
	errs := make([]error, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range workers {
		wg.Go(func() {
			for i := range next {
				j := &jobs[i]
				res, err := WriteRun(ctx, j.Dir, j.Spec)
				results[i], errs[i] = res, err
				if err != nil {
					cancel()
					continue
				}
				if done != nil {
					mu.Lock()
					done(&j.Spec, &results[i])
					mu.Unlock()
				}
			}
		})
	}
feed:
	for i := range jobs {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return results, err
		}
	}
	if err := errors.Join(errs...); err != nil {
		return results, err
	}
	return results, ctx.Err()
}
