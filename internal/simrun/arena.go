package simrun

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/llm-ring/llm-ring/internal/analysis"
)

// ArenaFolder is one scenario of an arena and the folder holding its runs.
type ArenaFolder struct {
	Name string // the scenario (profile) name: a column of the arena
	Dir  string
}

// ArenaFolderName checks that a scenario name can be a folder of its own
// under the arena's folder: not empty, no path separator, not "." or "..".
func ArenaFolderName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`) || filepath.Base(name) != name {
		return fmt.Errorf("scenario name %q cannot name a folder", name)
	}
	return nil
}

// AnalyzeArena analyses each scenario's folder as `llm-ring sim` does for
// one (summary.md, per_run.csv and charts in the folder, Workers folders
// at once; 0: GOMAXPROCS), then combines them into the arena and writes
// its files into dir (analysis.WriteArena). It returns the arena and the
// paths of its files.
func AnalyzeArena(dir string, folders []ArenaFolder, opts analysis.ArenaOptions, workers int) (analysis.Arena, []string, error) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	scen := make([]analysis.ArenaScenario, len(folders))
	errs := make([]error, len(folders))
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	for i, f := range folders {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s, err := analysis.Write(f.Dir, f.Dir, analysis.Options{})
			if err != nil {
				errs[i] = fmt.Errorf("scenario %s: %w", f.Name, err)
				return
			}
			scen[i] = analysis.ArenaScenario{Name: f.Name, Summary: s}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return analysis.Arena{}, nil, err
		}
	}
	a, err := analysis.NewArena(scen)
	if err != nil {
		return analysis.Arena{}, nil, err
	}
	paths, err := analysis.WriteArena(dir, &a, opts)
	if err != nil {
		return analysis.Arena{}, nil, err
	}
	return a, paths, nil
}
