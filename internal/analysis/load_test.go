package analysis

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// copyResults copies testdata/results into a fresh folder and applies edit
// (file name → new content; "" removes the file).
func copyResults(t *testing.T, edit map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join("testdata", "results")
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range edit {
		path := filepath.Join(dir, name)
		if content == "" {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "results", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestLoadErrors(t *testing.T) {
	csv := readTestdata(t, "bounded-s1.csv")
	js := readTestdata(t, "bounded-s1.json")
	tests := []struct {
		name string
		edit map[string]string
		want []string // substrings of the error
	}{
		{"a CSV without its JSON",
			map[string]string{"bounded-s1.json": ""}, []string{"bounded-s1.csv", "no matching bounded-s1.json"}},
		{"a JSON without its CSV",
			map[string]string{"bounded-s1.csv": ""}, []string{"bounded-s1.json", "no matching bounded-s1.csv"}},
		{"an unreadable number names the file, line and column",
			map[string]string{"bounded-s1.csv": strings.Replace(csv, ",800.000,", ",fast,", 1)},
			[]string{"bounded-s1.csv", "line 4", "latency_ms"}},
		{"a wrong header",
			map[string]string{"bounded-s1.csv": strings.Replace(csv, "cache_n", "cached", 1)},
			[]string{"bounded-s1.csv", "header"}},
		{"a row of another run",
			map[string]string{"bounded-s1.csv": strings.Replace(csv, "bounded-s1,bounded,1,b,2", "bounded-s9,bounded,1,b,2", 1)},
			[]string{"bounded-s1.csv", "line 5", `run_id "bounded-s9"`}},
		{"a row of another policy",
			map[string]string{"bounded-s1.csv": strings.Replace(csv, "bounded-s1,bounded,1,b,2", "bounded-s1,consistent,1,b,2", 1)},
			[]string{"line 5", `policy "consistent"`}},
		{"a turn recorded twice",
			map[string]string{"bounded-s1.csv": strings.Replace(csv, "bounded-s1,bounded,1,b,3", "bounded-s1,bounded,1,b,2", 1)},
			[]string{"line 7", `conversation "b" turn 2 already recorded on line 5`}},
		{"turn 0",
			map[string]string{"bounded-s1.csv": strings.Replace(csv, "bounded-s1,bounded,1,b,1,", "bounded-s1,bounded,1,b,0,", 1)},
			[]string{"line 3", "turn 0"}},
		{"a JSON whose run_id is not its file name",
			map[string]string{"bounded-s1.json": strings.Replace(js, `"run_id": "bounded-s1"`, `"run_id": "other"`, 1)},
			[]string{"bounded-s1.json", `run_id "other"`}},
		{"a JSON without a policy",
			map[string]string{"bounded-s1.json": strings.Replace(js, `"policy": "bounded"`, `"policy": ""`, 1)},
			[]string{"bounded-s1.json", "policy is empty"}},
		{"malformed JSON",
			map[string]string{"bounded-s1.json": "{"}, []string{"bounded-s1.json"}},
		{"fewer rows than the JSON's requests count (truncated CSV)",
			map[string]string{"bounded-s1.csv": csv[:strings.LastIndex(strings.TrimSuffix(csv, "\n"), "\n")+1]},
			[]string{"bounded-s1.csv", "has 7 rows", "requests=8"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(copyResults(t, tt.edit))
			if err == nil {
				t.Fatalf("Load succeeded, want an error containing %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadFolder(t *testing.T) {
	if _, err := Load(t.TempDir()); !errors.Is(err, ErrNoRuns) || !strings.Contains(err.Error(), "no runs found") {
		t.Errorf("empty folder: err = %v, want \"no runs found\"", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("missing folder: no error")
	}
	// An analysis written into the results folder (per_run.csv, summary.md,
	// PNGs) and unrelated files are not runs.
	dir := copyResults(t, map[string]string{
		PerRunCSV: "run_id,policy\n", SummaryMD: "# old\n", SummaryPNG: "x", "notes.txt": "x",
	})
	runs, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range runs {
		ids = append(ids, r.Info.RunID)
	}
	if got := strings.Join(ids, " "); got != "bounded-s1 bounded-s2 llm-aware-s1 llm-aware-s2" {
		t.Errorf("runs = %s", got)
	}
}
