// Package epp is llm-ring's third driver: an endpoint picker (EPP) for a
// Gateway API gateway, speaking the Gateway API Inference Extension's
// endpoint picker protocol (v1.0.0) over Envoy's external processing gRPC
// service, full-duplex streaming. The gateway's Envoy sends each request's
// headers and body; the EPP parses them with the proxy's parser, routes
// them through the proxy's state (policy, placement memory, prefix index,
// peers' gossip), answers with the picked endpoint and its fallbacks, then
// follows the answer to learn its counts and release the load: the
// proxy's decisions, without the proxy's data path. docs/epp.md lists the
// protocol's MUSTs and where each is met.
//
//	s, _ := epp.New(epp.Options{Router: rt})
//	go rt.Serve(ctx, httpLn, src)   // the pool: discovery, health, gossip, /metrics
//	s.Serve(ctx, grpcLn)            // the ext_proc and gRPC health services
package epp

import (
	"context"
	"errors"
	"net"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/llm-ring/llm-ring/internal/router"
)

// The gRPC health services the protocol names (GIE-004 §Health Checking).
const (
	ServiceLiveness  = "liveness"
	ServiceReadiness = "readiness"
	ServiceExtProc   = "envoy.service.ext_proc.v3.ExternalProcessor"
)

// Options configure a Server.
type Options struct {
	// Router is the pool: its configuration, policy, state, gossip, health
	// checks, metrics and request log. Serve it (router.Serve) beside the
	// EPP so that discovery and gossip run.
	Router *router.Router
	// Fallbacks is how many endpoints follow the pick in the destination
	// list (the policy's failover order); 0 sends the pick alone.
	Fallbacks int
	// MaxBody bounds a buffered request body (bytes); a larger one gets a
	// 413 (the proxy's max_body_bytes). 0: 16 MiB.
	MaxBody int
	// ReadyEvery is how often readiness is recomputed (0: 250 ms).
	ReadyEvery time.Duration
}

// Server is the ext_proc service. It is safe for concurrent use: each
// gRPC stream (one HTTP request) is handled by its own goroutine.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	opts    Options
	rt      *router.Router
	health  *health.Server
	streams prometheus.Counter
	refused *prometheus.CounterVec
}

// New builds a Server over opts.Router.
func New(opts Options) (*Server, error) {
	if opts.Router == nil {
		return nil, errors.New("epp: Options.Router is required")
	}
	if opts.Fallbacks < 0 {
		return nil, errors.New("epp: fallbacks must be ≥ 0")
	}
	if opts.MaxBody == 0 {
		opts.MaxBody = 16 << 20
	}
	if opts.ReadyEvery == 0 {
		opts.ReadyEvery = 250 * time.Millisecond
	}
	s := &Server{opts: opts, rt: opts.Router, health: health.NewServer()}
	s.streams = prometheus.NewCounter(prometheus.CounterOpts{Name: "llm_ring_epp_streams_total",
		Help: "ext_proc streams (one per request the gateway asked about)."})
	s.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llm_ring_epp_immediate_responses_total",
		Help: "Requests the EPP answered itself (immediate responses), by HTTP status."}, []string{"code"})
	if err := s.rt.Registry().Register(s.streams); err != nil {
		return nil, err
	}
	if err := s.rt.Registry().Register(s.refused); err != nil {
		return nil, err
	}
	s.health.SetServingStatus(ServiceLiveness, healthpb.HealthCheckResponse_SERVING)
	s.setReady(false)
	return s, nil
}

// GRPC returns a gRPC server with the ext_proc and health services
// registered (Serve uses it; tests may serve it on their own listener).
func (s *Server) GRPC() *grpc.Server {
	g := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(g, s)
	healthpb.RegisterHealthServer(g, s.health)
	return g
}

// Serve serves the gRPC services on ln until ctx ends: then readiness and
// the ext_proc service turn NOT_SERVING, and streams in flight have
// Router's shutdown grace to end before they are cut.
func (s *Server) Serve(ctx context.Context, ln net.Listener, grace time.Duration) error {
	g := s.GRPC()
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(ln) }()
	tick := time.NewTicker(s.opts.ReadyEvery)
	defer tick.Stop()
	s.setReady(s.ready())
	for {
		select {
		case err := <-errc:
			return err
		case <-tick.C:
			s.setReady(s.ready())
			continue
		case <-ctx.Done():
		}
		break
	}
	s.setReady(false)
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		g.Stop()
		<-done
	}
	return nil
}

// ready: at least one replica can take requests. There is no leader: every
// instance shares state by gossip and is ready (active-active).
func (s *Server) ready() bool {
	st := s.rt.Table().Status()
	return st.Healthy() > 0
}

func (s *Server) setReady(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus(ServiceReadiness, st)
	s.health.SetServingStatus(ServiceExtProc, st)
	s.health.SetServingStatus("", st)
}

// Process implements the ext_proc service: one stream is one HTTP request.
func (s *Server) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	s.streams.Inc()
	st := &stream{s: s, srv: srv, ctx: srv.Context()}
	return st.run()
}
