package deploy

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// Monitoring (issue 25): deploy/monitoring holds a Grafana dashboard and
// Prometheus alerting rules. These tests check that every expression parses
// with Prometheus' own parser and names only series the router exports
// (read from a running router's /metrics, not from a list kept by hand),
// and that the recorded scrape the rules are evaluated on (deploy/monitoring
// /eval, a module of its own) is still what the router exports.

var updateMonitoring = flag.Bool("update-monitoring", false, "re-record deploy/monitoring/testdata/recorded.promtest")

const (
	rulesFile     = "monitoring/llm-ring-rules.yaml"
	dashboardFile = "monitoring/grafana-dashboard.json"
	recordedFile  = "monitoring/testdata/recorded.promtest"
)

// ruleFile is the part of a Prometheus rule file the tests read.
type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Record      string            `json:"record"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

func loadRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.UnmarshalStrict(b, &rf); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	return rf
}

// expression is one PromQL expression and where it comes from.
type expression struct{ where, expr string }

func ruleExpressions(t *testing.T) []expression {
	var out []expression
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			out = append(out, expression{rulesFile + ": " + r.Alert + r.Record, r.Expr})
		}
	}
	return out
}

// grafanaVars are what Grafana substitutes before a query reaches
// Prometheus: the dashboard's variables with "All" selected (their
// allValue) and the rate interval macro.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$job", ".*", "$instance", ".*")

func dashboardExpressions(t *testing.T) []expression {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var out []expression
	for _, p := range d.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", dashboardFile, p.Title)
		}
		for _, tg := range p.Targets {
			out = append(out, expression{dashboardFile + ": " + p.Title, grafanaVars.Replace(tg.Expr)})
		}
	}
	for _, v := range d.Templating.List {
		q, ok := v.Query.(map[string]any)
		if v.Type != "query" || !ok {
			continue
		}
		// label_values(<selector>, <label>): the selector is PromQL.
		s, _ := q["query"].(string)
		inner, ok := strings.CutPrefix(s, "label_values(")
		i := strings.LastIndex(inner, ",")
		if !ok || i < 0 {
			t.Errorf("%s: variable %s: query %q is not label_values(selector, label)", dashboardFile, v.Name, s)
			continue
		}
		out = append(out, expression{dashboardFile + ": variable " + v.Name, grafanaVars.Replace(inner[:i])})
	}
	return out
}

// seriesNames parses expr and returns the metric names it selects.
func seriesNames(expr string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	var bad error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			if vs.Name == "" {
				bad = fmt.Errorf("selector %s names no metric", vs)
			}
			names = append(names, vs.Name)
		}
		return nil
	})
	return names, bad
}

// family maps a series name to its metric family (a histogram's _bucket,
// _sum and _count are series of one family).
func family(name string, families map[string]bool) string {
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok && families[base] {
			return base
		}
	}
	return name
}

// TestMonitoring runs a router through the recorded scenario (healthy
// traffic, a cache collapse, an outage) and checks the dashboard's and the
// rules' expressions against what its /metrics exported.
func TestMonitoring(t *testing.T) {
	rec := recordScenario(t)
	exported := rec.families()
	exprs := append(ruleExpressions(t), dashboardExpressions(t)...)
	if len(exprs) < 30 {
		t.Fatalf("only %d expressions found", len(exprs))
	}
	used := map[string]bool{}
	for _, e := range exprs {
		names, err := seriesNames(e.expr)
		if err != nil {
			t.Errorf("%s: %v\n%s", e.where, err, e.expr)
			continue
		}
		for _, n := range names {
			f := family(n, exported)
			used[f] = true
			if !exported[f] {
				t.Errorf("%s: %s is not exported by the router (it exports %v)", e.where, n, sortedKeys(exported))
			}
		}
	}
	// The dashboard shows every llm_ring series but the simulated
	// replica's own.
	for f := range exported {
		if strings.HasPrefix(f, "llm_ring_") && !used[f] && !slices.Contains(notOnDashboard, f) {
			t.Errorf("the router exports %s but no panel or rule shows it", f)
		}
	}
	script := rec.script(ruleSeries(t, exported))
	if *updateMonitoring {
		if err := os.WriteFile(recordedFile, []byte(script), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old, err := os.ReadFile(recordedFile)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := seriesOf(string(old)), seriesOf(script); !slices.Equal(got, want) {
		t.Errorf("%s is out of date: it has the series %v, the router now exports %v; rerun with -update-monitoring", recordedFile, got, want)
	}
}

// notOnDashboard: exported families the dashboard leaves out, and why.
var notOnDashboard = []string{
	"llm_ring_body_budget_full_total",   // the Server errors panel counts its 503s (llm_ring_rejected_total)
	"llm_ring_scrape_errors_total",      // the Signals scrape panel shows up and age; the alert text names it
	"llm_ring_scrape_duration_seconds",  // the scraper's own cost
	"llm_ring_cluster_bytes_sent_total", // message counts are on the Cluster messages panel
	"llm_ring_cluster_bytes_received_total",
	"llm_ring_cluster_decode_errors_total",
}

// ruleSeries returns the families the rules select: those recorded.
func ruleSeries(t *testing.T, exported map[string]bool) []string {
	var out []string
	for _, e := range ruleExpressions(t) {
		names, _ := seriesNames(e.expr)
		for _, n := range names {
			if f := family(n, exported); !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	slices.Sort(out)
	return out
}

// seriesOf returns the series (name and labels) of a promqltest load script.
func seriesOf(script string) []string {
	var out []string
	for _, line := range strings.Split(script, "\n") {
		if !strings.HasPrefix(line, "  ") {
			continue
		}
		s := strings.TrimSpace(line)
		if i := strings.Index(s, "} "); i >= 0 {
			s = s[:i+1]
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}
