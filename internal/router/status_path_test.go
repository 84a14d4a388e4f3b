package router

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/llm-ring/llm-ring/internal/config"
)

// TestStatusPageAtConfiguredPath: with admin.status_path set, the page and
// its data (status.json beside it, where the page fetches it) move there;
// "/" and "/status.json" are then no longer open: they fall to the admin
// API, behind its token.
func TestStatusPageAtConfiguredPath(t *testing.T) {
	h := newHarness(t, "consistent", 1, withAdmin(t, "s3cret"), func(c *config.Router) { c.Admin.StatusPath = "/ops/board" })
	get := func(p, token string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, p, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		h.rt.AdminHandler().ServeHTTP(rec, req)
		return rec
	}
	if rec := get("/ops/board", ""); rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
		t.Errorf("GET /ops/board: %d %q", rec.Code, rec.Header())
	}
	rec := get("/ops/status.json", "")
	var st StatusInfo
	if err := json.Unmarshal(rec.Body.Bytes(), &st); rec.Code != 200 || err != nil || len(st.Replicas) != 1 {
		t.Errorf("GET /ops/status.json: %d %v %s", rec.Code, err, rec.Body)
	}
	for _, p := range []string{"/", "/status.json", "/ops/"} {
		if rec := get(p, ""); rec.Code != http.StatusUnauthorized {
			t.Errorf("GET %s without a token: %d, want 401", p, rec.Code)
		}
		if rec := get(p, "s3cret"); rec.Code != http.StatusNotFound {
			t.Errorf("GET %s with the token: %d, want 404", p, rec.Code)
		}
	}
}

// TestStatusAdmission: with admission on, the page's data shows the queue:
// its length and bands, the pool's saturation against the limit, and the
// outcomes so far.
func TestStatusAdmission(t *testing.T) {
	h, f := admissionHarness(t)
	var wg sync.WaitGroup
	out := make(chan [2]int, 8)
	bg := context.Background()
	h.send(bg, &wg, 1, "", out)
	h.send(bg, &wg, 2, "", out)
	waitFor(t, "two requests at the replica", func() bool { return f.calls.Load() == 2 })
	h.send(bg, &wg, 3, "batch", out)
	h.send(bg, &wg, 4, "interactive", out)
	waitFor(t, "two requests queued", func() bool { return h.rt.adm.queued() == 2 })

	a := getStatus(t, h).Admission
	if a == nil {
		t.Fatal("no admission in the status with admission on")
	}
	if a.Queued != 2 || a.QueueBytes <= 0 || a.QueueCapacity != 3 || a.Saturation < a.Limit || a.Limit != 1 {
		t.Errorf("admission %+v: want 2 queued of 3, saturated", a)
	}
	bands := map[int]int{}
	for _, b := range a.Bands {
		bands[b.Priority] = b.Waiting
	}
	if bands[10] != 1 || bands[-10] != 1 {
		t.Errorf("bands %+v: want one interactive (10) and one batch (-10) waiting", a.Bands)
	}
	if a.Outcomes["admitted"] != 2 {
		t.Errorf("outcomes %v: want admitted 2", a.Outcomes)
	}

	close(f.hold)
	wg.Wait()
	a = getStatus(t, h).Admission
	if a.Queued != 0 || a.Outcomes["admitted-after-wait"] != 2 {
		t.Errorf("after release: %+v, want an empty queue and 2 admitted after waiting", a)
	}
}
