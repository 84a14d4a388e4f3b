package wire_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/router"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// TestRouterRegistersMetricNames: the names the simulator writes are the
// router's own, and the requests counter carries exactly wire's labels. An
// external test, so that the core package wire never imports the router.
func TestRouterRegistersMetricNames(t *testing.T) {
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	rt, err := router.New(router.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	fams, err := rt.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range fams {
		got[f.GetName()] = true
	}
	for _, name := range []string{wire.MetricPromptTokens, wire.MetricPredictedTokens, wire.MetricCacheLost, wire.MetricFailovers} {
		if !got[name] {
			t.Errorf("the router registers no %s", name)
		}
	}
	// A vector shows in Gather only with a child, its labels sorted by name.
	want := slices.Sorted(slices.Values(wire.RequestLabels()))
	if got := requestsLabels(t, rt); !slices.Equal(got, want) {
		t.Errorf("%s labels %v, want %v", wire.MetricRequests, got, want)
	}
}

func TestSeries(t *testing.T) {
	for _, c := range []struct {
		pairs []string
		want  string
	}{
		{nil, "m"},
		{[]string{"kind", "cached"}, `m{kind="cached"}`},
		{[]string{"code", "200", "policy", "p", "reason", "", "replica", `a"b`}, `m{code="200",policy="p",reason="",replica="a\"b"}`},
	} {
		if got := wire.Series("m", c.pairs...); got != c.want {
			t.Errorf("Series(m, %q) = %s, want %s", c.pairs, got, c.want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Series with a label and no value did not panic")
		}
	}()
	wire.Series("m", "kind")
}

// requestsLabels sends one request through the router to a stub replica
// and returns the label names of the requests counter's child it created.
func requestsLabels(t *testing.T, rt *router.Router) []string {
	t.Helper()
	stub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}]}`)
	}))
	defer stub.Close()
	rt.SetReplicas([]replicaset.Replica{{Name: "r0", URL: stub.URL}})
	rec := httptest.NewRecorder()
	body := `{"messages":[{"role":"user","content":"hi"}],"max_tokens":4}`
	rt.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("request through the router: %d %s", rec.Code, rec.Body)
	}
	fams, err := rt.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != wire.MetricRequests || len(f.GetMetric()) == 0 {
			continue
		}
		var names []string
		for _, l := range f.GetMetric()[0].GetLabel() {
			names = append(names, l.GetName())
		}
		return names
	}
	t.Fatalf("no %s series after a request", wire.MetricRequests)
	return nil
}
