package router

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/state"
)

// finish releases the load if the answer's end did not already, and logs
// the request.
func (r *Router) finish(ctx context.Context, f *flight) {
	now := time.Now()
	var out state.Outcome
	var c counts
	complete := f.obs != nil && f.obs.complete()
	if f.obs != nil {
		c = f.obs.counts()
		if !complete && f.fail == failNone {
			r.unfinished(ctx, f)
		}
	}
	if complete && f.status/100 == 2 {
		out = c.outcome()
	}
	r.settle(f, out, now)
	out, fb := f.out, f.fb
	policyName := f.d.Trace.Policy
	code := statusLabel(f.status)
	label := f.pool.Label()
	series := r.metrics.requestSeries(seriesKey{policyName, f.ticket.Replica.Name, f.d.Reason.String(), code, label})
	series.requests.Inc()
	latency := now.Sub(f.start)
	series.latency.Observe(latency.Seconds())
	if out.Known {
		r.metrics.cached.Add(float64(out.CacheN))
		r.metrics.processed.Add(float64(out.PromptN))
		r.metrics.predicted.Add(float64(out.PredictedN))
	}
	if fb.CacheLost {
		r.metrics.cacheLost.Inc()
	}
	r.onFinish(f, c, now) // operator hook (issue 25): status page, tracing (status.go)
	level := slog.LevelInfo
	if f.fail != failNone && f.fail != failClient || f.status >= 500 {
		level = slog.LevelWarn
	}
	if !r.log.Enabled(ctx, level) {
		return
	}
	r.logRequest(ctx, f, level, c, latency)
}

// logRequest writes the request's line, which keeps its decision's trace:
// appended as JSON into a pooled buffer and written at once when the
// logger is NewLogHandler's (loghandler.go), else as a slog record.
func (r *Router) logRequest(ctx context.Context, f *flight, level slog.Level, c counts, latency time.Duration) {
	bp := traceBufs.Get().(*[]byte)
	trace := f.d.AppendFormat((*bp)[:0])
	if f.adm.on { // admission control (issue 22): its wait in the trace
		trace = f.adm.appendNote(trace)
	}
	if r.direct != nil {
		j := jsonLines.Get().(*jsonLine)
		j.begin(time.Now(), level, "request")
		f.requestFields(j, c, latency, trace)
		j.end()
		if j.ok {
			r.direct.w.line(j.b)
		}
		ok := j.ok
		if cap(j.b) <= 64<<10 {
			jsonLines.Put(j)
		}
		if ok {
			putTraceBuf(bp, trace)
			return
		}
	}
	l := attrLine{a: make([]slog.Attr, 0, 28)} // every field: one allocation
	f.requestFields(&l, c, latency, trace)
	putTraceBuf(bp, trace)
	r.log.LogAttrs(ctx, level, "request", l.a...)
}

// requestFields gives e the request line's fields in their order: the one
// list the direct line and the slog record are both made of.
func (f *flight) requestFields(e lineEncoder, c counts, latency time.Duration, trace []byte) {
	e.hex("conversation", f.in.Hash)
	e.str("key_source", f.p.keySource)
	e.int("turn", int64(f.p.turn))
	e.str("path", f.path)
	e.bool("stream", f.p.stream)
	e.str("policy", f.d.Trace.Policy)
	e.str("replica", f.ticket.Replica.Name)
	e.str("cached_on", f.ticket.CachedOn)
	e.str("reason", f.d.Reason.String())
	e.int("est_prompt_tokens", int64(f.ticket.EstPrompt))
	e.int("charge", f.ticket.Charge)
	e.int("expect_cached", int64(f.ticket.ExpectCached))
	e.bool("counts_known", f.out.Known)
	e.int("cache_n", int64(c.cacheN))
	e.int("prompt_n", int64(c.promptN))
	e.int("predicted_n", int64(c.predictedN))
	e.bool("cache_lost", f.fb.CacheLost)
	e.int("status", int64(f.status))
	e.float("latency_ms", ms(latency))
	e.int("attempts", int64(f.tries))
	if f.obs != nil && !f.obs.first.IsZero() {
		e.float("ttft_ms", ms(f.obs.first.Sub(f.start)))
	}
	if f.model != "" { // the model sent upstream and the LoRA adapter with its tier (issue 23)
		e.str("model", clip(f.model, 128))
	}
	if f.in.Adapter != "" {
		e.str("adapter", f.in.Adapter)
		e.int("adapter_tier", int64(f.ticket.AdapterTier))
	}
	if f.fail != failNone {
		e.str("error_kind", f.fail.String())
		e.str("error", clip(f.errMsg, 512))
	}
	if f.adm.on {
		e.float("queue_wait_ms", ms(f.adm.wait))
		e.int("priority", int64(f.adm.priority))
	}
	e.text("trace", trace, maxTrace)
}

// maxTrace is the most bytes of a decision's trace a log line or the status
// page shows (then "…").
const maxTrace = 4096

// traceBufs holds the buffers decision traces are rendered into (issue 21):
// the text is appended without allocating, and only the final string is.
var traceBufs = sync.Pool{New: func() any { b := make([]byte, 0, 2<<10); return &b }}

// putTraceBuf returns a trace buffer to the pool, keeping the storage b grew
// into; one that grew past a few clipped traces is left to the collector.
func putTraceBuf(bp *[]byte, b []byte) {
	if cap(b) > 4*maxTrace {
		return
	}
	*bp = b[:0]
	traceBufs.Put(bp)
}

// traceText renders d's trace as clip(d.Format(), maxTrace) does, with one
// allocation: the string.
func traceText(d *policy.Decision) string {
	bp := traceBufs.Get().(*[]byte)
	b := d.AppendFormat((*bp)[:0])
	s := clipText(b, maxTrace)
	putTraceBuf(bp, b)
	return s
}

// clipText is clip for a text being built: b as a string, cut to n bytes
// and marked with "…" when longer (it may write into b past n).
func clipText(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(append(b[:n], "…"...))
}

// statusLabel is an HTTP status as a metric label, without allocating for
// the usual ones.
func statusLabel(status int) string {
	if status >= 100 && status < 600 {
		return statusLabels[status-100]
	}
	return strconv.Itoa(status)
}

var statusLabels = func() (s [500]string) {
	for i := range s {
		s[i] = strconv.Itoa(i + 100)
	}
	return s
}()

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
