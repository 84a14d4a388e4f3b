// Package eval evaluates llm-ring's alerting rules with Prometheus' own
// rule engine on a recorded scrape of a running router
// (../testdata/recorded.promtest, recorded by deploy/monitoring_test.go).
// It is a module of its own: Prometheus' query engine brings in the
// cloud SDKs of its service discovery (AWS, Azure, GCP), which the router
// does not need; see docs/operations.md.
package eval

import (
	"context"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
)

const (
	rulesFile    = "../llm-ring-rules.yaml"
	recordedFile = "../testdata/recorded.promtest"
)

// phase is a span of recorded minutes [from, to].
type phase struct{ from, to int }

func (p phase) has(m int) bool { return m >= p.from && m <= p.to }

// phases reads the recording's "# phases: name=a-b ..." line.
func phases(t *testing.T, script string) map[string]phase {
	m := regexp.MustCompile(`(?m)^# phases: (.*)$`).FindStringSubmatch(script)
	if m == nil {
		t.Fatalf("%s has no phases line", recordedFile)
	}
	out := map[string]phase{}
	for _, f := range strings.Fields(m[1]) {
		name, span, _ := strings.Cut(f, "=")
		a, b, _ := strings.Cut(span, "-")
		from, err1 := strconv.Atoi(a)
		to, err2 := strconv.Atoi(b)
		if err1 != nil || err2 != nil || to < from {
			t.Fatalf("phases line: bad %q", f)
		}
		out[name] = phase{from, to}
	}
	return out
}

// expectation says in which phase an alert must fire at some minute
// ("" for none), and in which phases it must never fire.
type expectation struct {
	fires string
	never []string
}

var expectations = map[string]expectation{
	"LLMRingNoHealthyReplica":    {"outage", []string{"healthy", "collapse"}},
	"LLMRingHighErrorRate":       {"outage", []string{"healthy", "collapse"}},
	"LLMRingCachedShareCollapse": {"collapse", []string{"healthy"}},
	"LLMRingReplicaReportsStale": {"outage", []string{"healthy", "collapse"}},
	// The recording has no queue and one gossip instance: these must stay
	// quiet on it (a single instance is isolated from the start, which is
	// not a lost peer).
	"LLMRingReplicaQueueGrowing": {"", []string{"healthy", "collapse", "outage"}},
	"LLMRingClusterPeersLost":    {"", []string{"healthy", "collapse", "outage"}},
	// The recording's router has admission on, with an empty queue and
	// nothing shed: quiet here; TestAdmissionAlerts makes them fire.
	"LLMRingAdmissionQueueGrowing": {"", []string{"healthy", "collapse", "outage"}},
	"LLMRingAdmissionShedding":     {"", []string{"healthy", "collapse", "outage"}},
}

// TestAlertRules loads the rule file as Prometheus does (strict, validated),
// evaluates every alert once a minute over the recording, and checks when
// each one fires.
func TestAlertRules(t *testing.T) {
	p := parser.NewParser(parser.Options{})
	groups, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation, p, slog.Default())
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	b, err := os.ReadFile(recordedFile)
	if err != nil {
		t.Fatal(err)
	}
	script := string(b)
	ph := phases(t, script)
	last := 0
	for _, x := range ph {
		last = max(last, x.to)
	}
	storage := promqltest.LoadedStorage(t, script)
	t.Cleanup(func() { storage.Close() })
	engine := promqltest.NewTestEngine(t, false, 0, 1_000_000)
	query := rules.EngineQueryFunc(engine, storage)
	seen := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			seen[r.Alert] = true
			want, ok := expectations[r.Alert]
			if !ok {
				t.Errorf("alert %s: no expectation on the recording; add one", r.Alert)
				continue
			}
			firing := evalAlert(t, p, r, query, last)
			checkAlert(t, r.Alert, want, ph, firing)
		}
	}
	for name := range expectations {
		if !seen[name] {
			t.Errorf("expected alert %s is not in %s", name, rulesFile)
		}
	}
}

// evalAlert evaluates the rule at every recorded minute and returns the
// minutes it was firing.
func evalAlert(t *testing.T, p parser.Parser, r rulefmt.Rule, query rules.QueryFunc, last int) []bool {
	t.Helper()
	expr, err := p.ParseExpr(r.Expr)
	if err != nil {
		t.Fatalf("%s: %v", r.Alert, err)
	}
	ar := rules.NewAlertingRule(r.Alert, expr, time.Duration(r.For), time.Duration(r.KeepFiringFor),
		labels.FromMap(r.Labels), labels.FromMap(r.Annotations), labels.EmptyLabels(), "", true, nil)
	firing := make([]bool, last+1)
	for m := 0; m <= last; m++ {
		ts := time.Unix(0, 0).Add(time.Duration(m) * time.Minute)
		if _, err := ar.Eval(context.Background(), 0, ts, query, nil, 0); err != nil {
			t.Fatalf("%s at minute %d: %v", r.Alert, m, err)
		}
		for _, a := range ar.ActiveAlerts() {
			if a.State == rules.StateFiring {
				firing[m] = true
			}
			for _, v := range a.Annotations.Map() {
				if strings.Contains(v, "error expanding") {
					t.Errorf("%s: annotation template: %s", r.Alert, v)
				}
			}
		}
	}
	return firing
}

func checkAlert(t *testing.T, name string, want expectation, ph map[string]phase, firing []bool) {
	t.Helper()
	var at []int
	for m, f := range firing {
		if f {
			at = append(at, m)
		}
	}
	t.Logf("%s fires at minutes %v", name, at)
	if want.fires != "" {
		span, ok := ph[want.fires]
		if !ok {
			t.Fatalf("no phase %q in the recording", want.fires)
		}
		if !firingIn(firing, span) {
			t.Errorf("%s never fires in the %s phase (minutes %d-%d)", name, want.fires, span.from, span.to)
		}
	}
	for _, n := range want.never {
		if span := ph[n]; firingIn(firing, span) {
			t.Errorf("%s fires in the %s phase (minutes %d-%d): %v", name, n, span.from, span.to, at)
		}
	}
}

func firingIn(firing []bool, span phase) bool {
	for m := span.from; m <= span.to && m < len(firing); m++ {
		if firing[m] {
			return true
		}
	}
	return false
}

// admissionLoad is a synthetic 30 minutes of an admitting router: the
// queue grows by one a minute and 1 in 11 requests is shed (load), or
// the queue stays empty and 1 in 101 is shed (quiet).
const admissionLoad = `load 1m
  llm_ring_admission_queue_length{instance="r",job="llm-ring"} 0+1x30
  llm_ring_admission_total{instance="r",job="llm-ring",outcome="admitted"} 0+100x30
  llm_ring_admission_total{instance="r",job="llm-ring",outcome="shed-timeout"} 0+10x30
`

const admissionQuiet = `load 1m
  llm_ring_admission_queue_length{instance="r",job="llm-ring"} 0+0x30
  llm_ring_admission_total{instance="r",job="llm-ring",outcome="admitted"} 0+100x30
  llm_ring_admission_total{instance="r",job="llm-ring",outcome="shed-timeout"} 0+1x30
`

// TestAdmissionAlerts evaluates the admission alerts on synthetic series
// (the recording sheds nothing): they fire on a growing queue and a 9%
// shed share, and stay quiet on an empty queue and a 1% share.
func TestAdmissionAlerts(t *testing.T) {
	p := parser.NewParser(parser.Options{})
	groups, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation, p, slog.Default())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for name, script := range map[string]string{"load": admissionLoad, "quiet": admissionQuiet} {
		storage := promqltest.LoadedStorage(t, script)
		engine := promqltest.NewTestEngine(t, false, 0, 1_000_000)
		query := rules.EngineQueryFunc(engine, storage)
		n := 0
		for _, g := range groups.Groups {
			for _, r := range g.Rules {
				if !strings.HasPrefix(r.Alert, "LLMRingAdmission") {
					continue
				}
				n++
				firing := evalAlert(t, p, r, query, 30)
				fired := firingIn(firing, phase{0, 30})
				t.Logf("%s on %s: fires %v", r.Alert, name, fired)
				if fired != (name == "load") {
					t.Errorf("%s on the %s series: fires %v, want %v", r.Alert, name, fired, name == "load")
				}
			}
		}
		storage.Close()
		if n != 2 {
			t.Fatalf("%d admission alerts in %s, want 2", n, rulesFile)
		}
	}
}
