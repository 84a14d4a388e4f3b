package router

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/llm-ring/llm-ring/internal/config"
)

// Tracing (issue 25): with tracing.mode otlp, every proxied request is one
// OpenTelemetry server span carrying the routing decision (policy, replica,
// reason, cached tokens expected and reported, attempts), a child of the
// client's W3C traceparent when it sent one; the request to the replica
// carries the span's own traceparent. Spans are batched to an OTLP/HTTP
// receiver. Off (the default), the hooks below return at their first line
// and allocate nothing.
//
// The hooks in the request path (router.go): startSpan (and the end it
// returns) in serveProxied, traceFinish through onFinish in finish,
// shutdownTracing in Serve; initTracing through initOperator (initAdmin, in
// New), which wraps the transport to the replicas (tracedTransport) to
// carry the traceparent.

// tracing is the router's tracer; nil when tracing is off.
type tracing struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TraceContext
}

func noEnd() {}

// initTracing builds the OTLP exporter the configuration asks for (none
// when tracing is off). The exporter connects lazily: an unreachable
// receiver loses spans, never requests.
func (r *Router) initTracing() error {
	c := r.cfg.Tracing
	if !c.On() {
		return nil
	}
	u := c.Endpoint
	if !strings.Contains(strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://"), "/") || strings.HasSuffix(u, "/") {
		u = strings.TrimSuffix(u, "/") + "/v1/traces"
	}
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(u))
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	r.setTracing(c, r.nodeName(), sdktrace.WithBatcher(exp))
	return nil
}

// setTracing turns tracing on with the given span processor option (the
// tests' in-memory exporter).
func (r *Router) setTracing(c config.Tracing, instance string, export sdktrace.TracerProviderOption) {
	ratio := c.SampleRatio
	if ratio == 0 {
		ratio = 1
	}
	name := c.ServiceName
	if name == "" {
		name = "llm-ring"
	}
	res := resource.NewSchemaless(attribute.String("service.name", name), attribute.String("service.instance.id", instance))
	tp := sdktrace.NewTracerProvider(export, sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))))
	r.tracing = &tracing{provider: tp, tracer: tp.Tracer("github.com/llm-ring/llm-ring/internal/router")}
	r.base = tracedTransport{next: r.base}
}

// nodeName is this instance's name for the spans' resource.
func (r *Router) nodeName() string {
	if r.node != nil {
		return r.node.Status().Name
	}
	return r.cfg.Listen
}

// shutdownTracing flushes the spans still batched (Serve, at its end).
func (r *Router) shutdownTracing() {
	if r.tracing == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.tracing.provider.Shutdown(ctx); err != nil {
		r.log.Warn("tracing: spans not flushed", "error", err.Error())
	}
}

// startSpan starts the request's span (a child of the client's
// traceparent, if any), sets *ctx to the context carrying it, and returns
// the function that ends it.
func (r *Router) startSpan(ctx *context.Context, req *http.Request) func() {
	t := r.tracing
	if t == nil {
		return noEnd
	}
	c := t.prop.Extract(*ctx, propagation.HeaderCarrier(req.Header))
	c, span := t.tracer.Start(c, req.Method+" "+req.URL.Path, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", req.Method), attribute.String("url.path", req.URL.Path)))
	*ctx = c
	return func() { span.End() }
}

// tracedTransport sends each request to a replica with the traceparent of
// the span in its context (every attempt of a failover), replacing the
// client's.
type tracedTransport struct {
	next http.RoundTripper
	prop propagation.TraceContext
}

func (t tracedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !trace.SpanContextFromContext(req.Context()).IsValid() {
		return t.next.RoundTrip(req) // health checks, model lists
	}
	out := req.Clone(req.Context()) // a RoundTripper must not change its request
	out.Header.Del("traceparent")
	out.Header.Del("tracestate")
	t.prop.Inject(req.Context(), propagation.HeaderCarrier(out.Header))
	return t.next.RoundTrip(out)
}

// traceFinish records the decision and the outcome on the span.
func (r *Router) traceFinish(f *flight, c counts) {
	if r.tracing == nil {
		return
	}
	span := trace.SpanFromContext(f.ctx)
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{
		attribute.String("llm_ring.policy", f.d.Trace.Policy),
		attribute.String("llm_ring.replica", f.ticket.Replica.Name),
		attribute.String("llm_ring.reason", f.d.Reason.String()),
		attribute.String("llm_ring.conversation", f.convo()),
		attribute.String("llm_ring.key_source", f.p.keySource),
		attribute.Int("llm_ring.turn", f.p.turn),
		attribute.Int("llm_ring.attempts", f.tries),
		attribute.StringSlice("llm_ring.failed_replicas", f.failed),
		attribute.Int("llm_ring.prompt_tokens.estimated", f.ticket.EstPrompt),
		attribute.Int("llm_ring.cached_tokens.expected", f.ticket.ExpectCached),
		attribute.Bool("llm_ring.counts_known", c.known),
		attribute.Int("llm_ring.cached_tokens.reported", c.cacheN),
		attribute.Int("llm_ring.prompt_tokens.processed", c.promptN),
		attribute.Int("llm_ring.tokens.generated", c.predictedN),
		attribute.Bool("llm_ring.cache_lost", f.fb.CacheLost),
		attribute.Int("http.response.status_code", f.status),
	}
	if f.obs != nil && !f.obs.first.IsZero() {
		attrs = append(attrs, attribute.Float64("llm_ring.ttft_ms", ms(f.obs.first.Sub(f.start))))
	}
	span.SetAttributes(attrs...)
	if f.fail != failNone {
		span.SetAttributes(attribute.String("error.type", f.fail.String()))
	}
	if f.status >= 500 || f.fail != failNone && f.fail != failClient {
		span.SetStatus(codes.Error, clip(f.errMsg, 512))
	}
}

// traceAdmission records admission's verdict on the request's span: how
// long the request waited in the router's queue (0 when admitted at once),
// and the outcome as llm_ring_admission_total counts it (admitted,
// admitted-after-wait, shed-<reason>, cancelled). A shed request's reason
// is the header the shed answer carries.
func (r *Router) traceAdmission(ctx context.Context, w http.ResponseWriter, since time.Time, queued, ok bool) {
	if r.tracing == nil {
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	outcome := "admitted"
	switch reason := w.Header().Get(HeaderShedReason); {
	case !ok && reason != "":
		outcome = "shed-" + reason
	case !ok:
		outcome = "cancelled"
	case queued:
		outcome = "admitted-after-wait"
	}
	span.SetAttributes(attribute.String("llm_ring.admission.outcome", outcome),
		attribute.Float64("llm_ring.admission.wait_ms", ms(time.Since(since))))
}
