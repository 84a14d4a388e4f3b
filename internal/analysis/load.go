package analysis

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/llm-ring/llm-ring/internal/record"
)

// ErrNoRuns reports a results folder (or a Summary) without any run.
var ErrNoRuns = errors.New("no runs")

// Load reads every run of a results folder: each <run_id>.csv (request rows)
// with its <run_id>.json (run description). Runs are returned in file-name
// order. Other files are ignored, and so is PerRunCSV (an earlier analysis
// written into the same folder).
//
// Errors name the file and, for rows, the line: an unreadable row, a CSV
// without its JSON (or the reverse), a JSON whose run_id differs from its
// file name, a row of another run or policy, a turn below 1, a
// conversation's turn recorded twice, a requests count that disagrees with
// the rows, or a folder with no runs.
func Load(dir string) ([]Run, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("results folder: %w", err)
	}
	files := map[string]bool{}
	for _, e := range entries {
		if !e.IsDir() {
			files[e.Name()] = true
		}
	}
	var runs []Run
	for _, e := range entries { // ReadDir sorts by name
		name := e.Name()
		if e.IsDir() || name == PerRunCSV || name == PerStageCSV || name == FieldPerRunCSV || name == AdmissionCSV {
			continue
		}
		ext := filepath.Ext(name)
		stem := strings.TrimSuffix(name, ext)
		switch ext {
		case ".json":
			if !files[stem+".csv"] {
				return nil, fmt.Errorf("%s: no matching %s.csv (each run needs <run_id>.csv and <run_id>.json)",
					filepath.Join(dir, name), stem)
			}
		case ".csv":
			if !files[stem+".json"] {
				return nil, fmt.Errorf("%s: no matching %s.json (each run needs <run_id>.csv and <run_id>.json)",
					filepath.Join(dir, name), stem)
			}
			run, err := loadRun(dir, stem)
			if err != nil {
				return nil, err
			}
			runs = append(runs, run)
		}
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("%s: %w found (want <run_id>.csv + <run_id>.json pairs)", dir, ErrNoRuns)
	}
	return runs, nil
}

func loadRun(dir, stem string) (Run, error) {
	jsonPath := filepath.Join(dir, stem+".json")
	csvPath := filepath.Join(dir, stem+".csv")
	info, err := record.ReadRunFile(jsonPath)
	if err != nil {
		return Run{}, err
	}
	switch {
	case info.RunID != stem:
		return Run{}, fmt.Errorf("%s: run_id %q does not match the file name (want %q)", jsonPath, info.RunID, stem)
	case info.Policy == "":
		return Run{}, fmt.Errorf("%s: policy is empty", jsonPath)
	case info.Replicas < 0:
		return Run{}, fmt.Errorf("%s: replicas is %d", jsonPath, info.Replicas)
	}
	f, err := os.Open(csvPath)
	if err != nil {
		return Run{}, err
	}
	defer f.Close()
	rows, err := record.ReadRequests(f)
	if err != nil {
		return Run{}, fmt.Errorf("%s: %w", csvPath, err)
	}
	if err := checkRows(rows, info); err != nil {
		return Run{}, fmt.Errorf("%s: %w", csvPath, err)
	}
	if info.Requests > 0 && info.Requests != len(rows) {
		return Run{}, fmt.Errorf("%s: has %d rows but %s says requests=%d (truncated records?)",
			csvPath, len(rows), jsonPath, info.Requests)
	}
	return Run{Info: *info, Requests: rows}, nil
}

// checkRows checks that rows belong to the run and that each conversation's
// turn appears once. Line numbers count the header as line 1.
func checkRows(rows []record.Request, info *record.Run) error {
	seen := make(map[turnKey]int, len(rows))
	for i := range rows {
		r := &rows[i]
		line := i + 2
		switch {
		case r.RunID != info.RunID:
			return fmt.Errorf("line %d: run_id %q, want %q", line, r.RunID, info.RunID)
		case r.Policy != info.Policy:
			return fmt.Errorf("line %d: policy %q, want %q (from the run's JSON)", line, r.Policy, info.Policy)
		case r.Turn < 1:
			return fmt.Errorf("line %d: turn %d, want >= 1", line, r.Turn)
		}
		k := turnKey{r.Conversation, r.Turn}
		if first, dup := seen[k]; dup {
			return fmt.Errorf("line %d: conversation %q turn %d already recorded on line %d", line, r.Conversation, r.Turn, first)
		}
		seen[k] = line
	}
	return nil
}
