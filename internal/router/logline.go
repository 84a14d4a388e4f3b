package router

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/llm-ring/llm-ring/internal/policy"
	"github.com/llm-ring/llm-ring/internal/state"
	"github.com/llm-ring/llm-ring/internal/wire"
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
	r.metrics.requests.WithLabelValues(policyName, f.ticket.Replica.Name, f.d.Reason.String(), code, label).Inc()
	latency := now.Sub(f.start)
	r.metrics.latency.WithLabelValues(policyName, label).Observe(latency.Seconds())
	if out.Known {
		r.metrics.promptTokens.WithLabelValues(wire.KindCached).Add(float64(out.CacheN))
		r.metrics.promptTokens.WithLabelValues(wire.KindProcessed).Add(float64(out.PromptN))
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
	attrs := make([]slog.Attr, 0, 28) // every field below: one allocation
	attrs = append(attrs,
		slog.String("conversation", f.convo()),
		slog.String("key_source", f.p.keySource),
		slog.Int("turn", f.p.turn),
		slog.String("path", f.path),
		slog.Bool("stream", f.p.stream),
		slog.String("policy", policyName),
		slog.String("replica", f.ticket.Replica.Name),
		slog.String("cached_on", f.ticket.CachedOn),
		slog.String("reason", f.d.Reason.String()),
		slog.Int("est_prompt_tokens", f.ticket.EstPrompt),
		slog.Int64("charge", f.ticket.Charge),
		slog.Int("expect_cached", f.ticket.ExpectCached),
		slog.Bool("counts_known", out.Known),
		slog.Int("cache_n", c.cacheN),
		slog.Int("prompt_n", c.promptN),
		slog.Int("predicted_n", c.predictedN),
		slog.Bool("cache_lost", fb.CacheLost),
		slog.Int("status", f.status),
		slog.Float64("latency_ms", ms(latency)),
		slog.Int("attempts", f.tries),
	)
	if f.obs != nil && !f.obs.first.IsZero() {
		attrs = append(attrs, slog.Float64("ttft_ms", ms(f.obs.first.Sub(f.start))))
	}
	attrs = f.modelAttrs(attrs)
	if f.fail != failNone {
		attrs = append(attrs, slog.String("error_kind", f.fail.String()), slog.String("error", clip(f.errMsg, 512)))
	}
	bp := traceBufs.Get().(*[]byte)
	trace := f.d.AppendFormat((*bp)[:0])
	if f.adm.on { // admission control (issue 22): its wait in the line and the trace
		attrs = append(attrs, slog.Float64("queue_wait_ms", ms(f.adm.wait)), slog.Int("priority", f.adm.priority))
		trace = append(trace, f.adm.note()...)
	}
	attrs = append(attrs, slog.String("trace", clipText(trace, maxTrace)))
	putTraceBuf(bp, trace)
	r.log.LogAttrs(ctx, level, "request", attrs...)
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

// modelAttrs appends the model sent upstream and the LoRA adapter with its
// tier (issue 23), when the request has them.
func (f *flight) modelAttrs(attrs []slog.Attr) []slog.Attr {
	if f.model != "" {
		attrs = append(attrs, slog.String("model", clip(f.model, 128)))
	}
	if f.in.Adapter != "" {
		attrs = append(attrs, slog.String("adapter", f.in.Adapter), slog.Int("adapter_tier", int(f.ticket.AdapterTier)))
	}
	return attrs
}
