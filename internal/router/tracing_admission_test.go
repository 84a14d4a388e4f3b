package router

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/config"
)

// TestTracingAdmission: with admission on, each request's span says what
// admission did and how long the request waited in the router: two
// admitted at once, one admitted after waiting (for as long as it waited),
// one shed because the queue was full.
func TestTracingAdmission(t *testing.T) {
	capacity := 1
	h, exp, _ := tracedHarness(t, 1, func(c *config.Router) {
		c.Admission = config.Admission{Enabled: true, QueueThreshold: 1, QueueCapacity: &capacity}
	})
	f := h.fakes[0]
	f.hold = make(chan struct{})
	var wg sync.WaitGroup
	out := make(chan [2]int, 4)
	bg := context.Background()
	h.send(bg, &wg, 1, "", out)
	h.send(bg, &wg, 2, "", out)
	waitFor(t, "two requests at the replica", func() bool { return f.calls.Load() == 2 })
	h.send(bg, &wg, 3, "", out)
	waitFor(t, "one request queued", func() bool { return h.rt.adm.queued() == 1 })
	queuedAt := time.Now()
	h.send(bg, &wg, 4, "", out)
	waitSpans(t, exp, 1) // the shed one ends at once
	time.Sleep(50 * time.Millisecond)
	close(f.hold)
	wg.Wait()
	waited := time.Since(queuedAt)

	var outcomes []string
	for _, s := range waitSpans(t, exp, 4) {
		a := attrs(s)
		o, w := a["llm_ring.admission.outcome"].AsString(), a["llm_ring.admission.wait_ms"].AsFloat64()
		outcomes = append(outcomes, o)
		switch o {
		case "admitted-after-wait":
			if w < 50 || w > float64(waited.Milliseconds())+50 {
				t.Errorf("the queued request's span says it waited %.1f ms, want 50 ms to %d ms", w, waited.Milliseconds())
			}
			if a["llm_ring.replica"].AsString() != "llm-0" {
				t.Errorf("the queued request's span has no decision: %v", a)
			}
		case "admitted", "shed-queue-full":
			if w > 50 {
				t.Errorf("%s: wait %.1f ms, want ~0", o, w)
			}
		}
	}
	slices.Sort(outcomes)
	if want := []string{"admitted", "admitted", "admitted-after-wait", "shed-queue-full"}; !slices.Equal(outcomes, want) {
		t.Errorf("admission outcomes on the spans %v, want %v", outcomes, want)
	}
}
