// Command ollamacache fills in the cache columns of live runs against
// Ollama servers from the servers' own logs: Ollama's answers give the whole
// prompt (prompt_eval_count, usage.prompt_tokens) but not how much of it
// came from the cache, which only its runner logs with OLLAMA_DEBUG=1
// ("loading cache slot id=… cache=… prompt=N used=K"). Every run row
// (<run>.csv of `llm-ring run`) served by replica R is matched, in the order
// the rows started, with the first unmatched line of R's log with the same
// prompt length; cache_n becomes K and prompt_n N − K. The runs, with the
// CSVs so rewritten, are written to -out, ready for `llm-ring analyze`.
//
//	go run ./hack/ollamacache -runs results/live -out results/live-cache \
//	    -log llm-0=/tmp/ollama-0.log -log llm-1=/tmp/ollama-1.log ...
package main

import (
	"bufio"
	"cmp"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

type logs map[string]string

func (l logs) String() string { return fmt.Sprint(map[string]string(l)) }
func (l logs) Set(v string) error {
	name, path, ok := strings.Cut(v, "=")
	if !ok || name == "" || path == "" {
		return fmt.Errorf("-log %q: want REPLICA=PATH", v)
	}
	l[name] = path
	return nil
}

// line is one "loading cache slot" line.
type line struct {
	at           time.Time
	prompt, used int
}

var slotRE = regexp.MustCompile(`^time=(\S+) .*msg="loading cache slot" id=\d+ cache=\d+ prompt=(\d+) used=(\d+)`)

func readLog(path string) ([]line, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []line
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := slotRE.FindStringSubmatch(sc.Text()); m != nil {
			at, err := time.Parse(time.RFC3339Nano, m[1])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			p, _ := strconv.Atoi(m[2])
			u, _ := strconv.Atoi(m[3])
			out = append(out, line{at, p, u})
		}
	}
	return out, sc.Err()
}

func main() {
	runs := flag.String("runs", "", "folder of <run>.csv and <run>.json written by llm-ring run")
	out := flag.String("out", "", "folder to write the runs with their cache columns filled in")
	ls := logs{}
	flag.Var(ls, "log", "REPLICA=PATH of a server's OLLAMA_DEBUG=1 log (repeat per replica)")
	flag.Parse()
	if err := run(*runs, *out, ls); err != nil {
		fmt.Fprintln(os.Stderr, "ollamacache:", err)
		os.Exit(1)
	}
}

func run(runs, out string, ls logs) error {
	if runs == "" || out == "" || len(ls) == 0 {
		return errors.New("-runs, -out and at least one -log are required")
	}
	lines := map[string][]line{}
	for name, path := range ls {
		l, err := readLog(path)
		if err != nil {
			return err
		}
		lines[name] = l
	}
	used := map[string][]bool{}
	for name, l := range lines {
		used[name] = make([]bool, len(l))
	}
	csvs, err := filepath.Glob(filepath.Join(runs, "*.csv"))
	if err != nil || len(csvs) == 0 {
		return fmt.Errorf("no runs (*.csv) in %s", runs)
	}
	if err := byStart(csvs); err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, c := range csvs {
		if err := fill(c, out, lines, used); err != nil {
			return fmt.Errorf("%s: %w", c, err)
		}
	}
	return nil
}

// window is when a run ran (its JSON's started and finished, to the
// second), widened by a second each way: only log lines in it are its.
type window struct{ from, to time.Time }

func (w window) has(t time.Time) bool { return !t.Before(w.from) && !t.After(w.to) }

func runWindow(csvPath string) (window, error) {
	js := strings.TrimSuffix(csvPath, ".csv") + ".json"
	b, err := os.ReadFile(js)
	if err != nil {
		return window{}, err
	}
	var info struct{ Started, Finished time.Time }
	if err := json.Unmarshal(b, &info); err != nil || info.Started.IsZero() || info.Finished.IsZero() {
		return window{}, fmt.Errorf("%s: no \"started\" and \"finished\" (%v)", js, err)
	}
	return window{info.Started.Add(-time.Second), info.Finished.Add(time.Second)}, nil
}

// byStart sorts the runs' CSVs in the order the runs started (their
// JSON's "started"; the run id breaks ties): the logs hold every run's
// lines one after the other.
func byStart(csvs []string) error {
	started := map[string]string{}
	for _, c := range csvs {
		b, err := os.ReadFile(strings.TrimSuffix(c, ".csv") + ".json")
		if err != nil {
			return err
		}
		var info struct{ Started string }
		if err := json.Unmarshal(b, &info); err != nil || info.Started == "" {
			return fmt.Errorf("%s.json: no \"started\" (%v)", strings.TrimSuffix(c, ".csv"), err)
		}
		started[c] = info.Started
	}
	slices.SortFunc(csvs, func(a, b string) int { return cmp.Or(cmp.Compare(started[a], started[b]), cmp.Compare(a, b)) })
	return nil
}

// fill rewrites one run's CSV into out with cache_n and prompt_n from the
// logs, and copies its JSON beside it.
func fill(path, out string, lines map[string][]line, used map[string][]bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	rows, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil || len(rows) < 1 {
		return fmt.Errorf("read: %v", err)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	for _, h := range []string{"replica", "cache_n", "prompt_n", "start_ms", "status"} {
		if _, ok := col[h]; !ok {
			return fmt.Errorf("no column %q", h)
		}
	}
	body := rows[1:]
	order := make([]int, len(body))
	for i := range order {
		order[i] = i
	}
	start := func(i int) float64 { v, _ := strconv.ParseFloat(body[i][col["start_ms"]], 64); return v }
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(start(a), start(b)) })
	w, err := runWindow(path)
	if err != nil {
		return err
	}
	missing := 0
	for _, i := range order {
		r := body[i]
		if r[col["status"]] != "200" {
			continue
		}
		n, _ := strconv.Atoi(r[col["prompt_n"]])
		k := match(lines[r[col["replica"]]], used[r[col["replica"]]], w, n+mustAtoi(r[col["cache_n"]]))
		if k < 0 {
			missing++
			continue
		}
		l := lines[r[col["replica"]]][k]
		r[col["cache_n"]], r[col["prompt_n"]] = strconv.Itoa(l.used), strconv.Itoa(l.prompt-l.used)
	}
	if missing > 0 {
		return fmt.Errorf("%d answered rows have no log line of their replica and prompt length", missing)
	}
	if err := writeCSV(filepath.Join(out, filepath.Base(path)), rows); err != nil {
		return err
	}
	js := strings.TrimSuffix(path, ".csv") + ".json"
	b, err := os.ReadFile(js)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, filepath.Base(js)), b, 0o644)
}

// match returns the first unused line in w of prompt length n, marking
// it, or -1.
func match(ls []line, used []bool, w window, n int) int {
	for k, l := range ls {
		if !used[k] && l.prompt == n && w.has(l.at) {
			used[k] = true
			return k
		}
	}
	return -1
}

func mustAtoi(s string) int { v, _ := strconv.Atoi(s); return v }

func writeCSV(path string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	if err := w.WriteAll(rows); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
