package router

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llm-ring/llm-ring/internal/wire"
)

// statusDataPath is where the page's data is by default.
const statusDataPath = "/status.json"

// getStatus reads GET /status.json from the admin handler, with no token.
func getStatus(t *testing.T, h *harness) StatusInfo {
	t.Helper()
	rec := httptest.NewRecorder()
	h.rt.AdminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, statusDataPath, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", statusDataPath, rec.Code, rec.Body)
	}
	var st StatusInfo
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestStatusData: the status page's data shows the replicas, the last
// decisions newest first with their traces, and a hit rate and cached share
// that follow what the replicas reported.
func TestStatusData(t *testing.T) {
	h := newHarness(t, "llm-aware", 2, withAdmin(t, "s3cret"))
	st := getStatus(t, h)
	if len(st.Replicas) != 2 || st.Requests != 0 || len(st.Decisions) != 0 || len(st.History) != statusBuckets || st.Admission != nil {
		t.Fatalf("before traffic: %+v", st)
	}
	for turn := 1; turn <= 3; turn++ {
		h.post(t, wire.PathChatCompletions, chatBody(strings.Repeat("abcd ", turn*20), turn == 2), "x-conversation-id", "c1")
	}
	h.idle(t)
	waitFor(t, "three requests recorded", func() bool { return getStatus(t, h).Requests == 3 })
	st = getStatus(t, h)
	if len(st.Decisions) != 3 {
		t.Fatalf("decisions: %+v", st.Decisions)
	}
	first, last := st.Decisions[2], st.Decisions[0]
	if first.CacheN != 0 || last.CacheN == 0 || !last.CountsKnown || last.Replica != first.Replica || last.Status != 200 {
		t.Errorf("first %+v, last %+v: want a cold first turn and a warm last one on the same replica", first, last)
	}
	if !strings.HasPrefix(last.Trace, "llm-aware") || last.Policy != "llm-aware" || last.Reason == "" || last.Attempts != 1 {
		t.Errorf("last decision: %+v", last)
	}
	cur := st.History[len(st.History)-1]
	if cur.Start.After(st.Now) && cur.Requests == 0 {
		t.Fatalf("history does not end now: %+v", cur)
	}
	var req, hits, known int
	for _, iv := range st.History {
		req, hits, known = req+iv.Requests, hits+iv.Hits, known+iv.Known
	}
	if req != 3 || known != 3 || hits != 2 {
		t.Errorf("history: %d requests, %d known, %d hits; want 3, 3, 2", req, known, hits)
	}
	if got := testutil.ToFloat64(h.rt.status.hits.WithLabelValues("hit")); got != 2 {
		t.Errorf("llm_ring_prompt_cache_requests_total{result=hit} %v, want 2", got)
	}
	if n := testutil.CollectAndCount(h.rt.status.ttft); n != 1 {
		t.Errorf("llm_ring_ttft_seconds: %d series, want 1 (one policy)", n)
	}
}

// TestStatusPage: GET / on the admin handler is the page itself, self-
// contained; writes still need the token; the client listener serves
// neither.
func TestStatusPage(t *testing.T) {
	h := newHarness(t, "consistent", 1, withAdmin(t, "s3cret"))
	rec := httptest.NewRecorder()
	h.rt.AdminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	body := rec.Body.String()
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") || !strings.Contains(body, "status.json") {
		t.Fatalf("GET /: %d %q", rec.Code, rec.Header())
	}
	for _, ext := range []string{"http://", "https://", "src=\"/", "href=\"/"} {
		if strings.Contains(strings.ReplaceAll(body, "http://www.w3.org/2000/svg", ""), ext) {
			t.Errorf("the page refers to an external asset (%q)", ext)
		}
	}
	rec = httptest.NewRecorder()
	h.rt.AdminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/admin/reset", nil))
	if rec.Code != http.StatusUnauthorized {
		t.Errorf("POST /admin/reset without a token: %d, want 401", rec.Code)
	}
	for _, p := range []string{"/", statusDataPath} {
		r, err := http.Get(h.srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusNotFound {
			t.Errorf("client listener GET %s: %d, want 404", p, r.StatusCode)
		}
	}
}

// TestStatusRecordAllocs: recording a request allocates nothing.
func TestStatusRecordAllocs(t *testing.T) {
	h := newHarness(t, "consistent", 1)
	f := &flight{start: time.Now(), path: "/v1/chat/completions", status: 200, tries: 1}
	f.d.Trace.Policy = "consistent"
	c := counts{known: true, cacheN: 10, promptN: 5}
	h.rt.status.record(f, c, time.Now()) // the label children exist from here on
	if n := testing.AllocsPerRun(100, func() { h.rt.status.record(f, c, time.Now()) }); n != 0 {
		t.Errorf("record: %v allocations, want 0", n)
	}
}
