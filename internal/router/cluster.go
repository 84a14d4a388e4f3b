package router

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/llm-ring/llm-ring/internal/cluster"
	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/pool"
)

// Active-active routers (issue #13): with cluster.mode gossip, the router
// joins its peers over memberlist (internal/cluster) and its routing table
// publishes what it learns to them and applies what they learn
// (state.Peers), so that several instances behind one Service route as one.
// An instance that reaches no peer keeps routing on its own view, and says
// so: llm_ring_cluster_isolated is 1 and GET /replicas shows
// "isolated": true.

// newCluster builds the gossip node when the configuration asks for one and
// connects the routing table to it. It binds the gossip port; Serve joins.
// name "" is the host name and the listen port.
func (r *Router) newCluster(name string) error {
	cfg := r.cfg.Cluster
	if cfg.Mode != config.ClusterGossip {
		return nil
	}
	if name == "" {
		// The host name (a pod's is unique) and the HTTP port, so that
		// several instances on one host get distinct names too.
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("cluster: node name: %w", err)
		}
		name = host
		if _, port, err := net.SplitHostPort(r.cfg.Listen); err == nil {
			name += "-" + port
		}
	}
	n, err := cluster.New(cluster.Options{
		Config:     cfg,
		Name:       name,
		Applier:    poolApplier{r.pools},
		Logger:     r.log,
		Registerer: r.reg,
	})
	if err != nil {
		return err
	}
	r.node = n
	for _, p := range r.pools.Pools() { // the pools created later get theirs in newTable
		p.Table().SetPeers(cluster.TablePeers{Node: n, Model: p.Model()})
	}
	return nil
}

// poolApplier applies what peers publish to the pool of the same model
// (issue 23): each update carries its model; one for a pool this instance
// has not created (no replica of it discovered here yet) is dropped, as
// the pool would have no row to apply it to.
type poolApplier struct{ pools *pool.Set }

var _ cluster.Applier = poolApplier{}

func (a poolApplier) table(model string) (cluster.TableApplier, bool) {
	p := a.pools.Pool(model)
	if p == nil {
		return cluster.TableApplier{}, false
	}
	return cluster.TableApplier{Table: p.Table()}, true
}

// ApplyPlacement implements cluster.Applier.
func (a poolApplier) ApplyPlacement(u cluster.Placement) {
	if t, ok := a.table(u.Model); ok {
		t.ApplyPlacement(u)
	}
}

// ApplyTurn implements cluster.Applier.
func (a poolApplier) ApplyTurn(u cluster.Turn) {
	if t, ok := a.table(u.Model); ok {
		t.ApplyTurn(u)
	}
}

// ApplyPrefix implements cluster.Applier.
func (a poolApplier) ApplyPrefix(u cluster.PrefixUpdate) {
	if t, ok := a.table(u.Model); ok {
		t.ApplyPrefix(u)
	}
}

// runCluster runs the node until the returned stop is called: Serve stops
// it after the HTTP server has drained, so that peers keep counting this
// instance's requests in flight until they end, and then see it leave.
func (r *Router) runCluster(ctx context.Context, errc chan<- error) (stop func()) {
	if r.node == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.node.Run(ctx); err != nil {
			select {
			case errc <- fmt.Errorf("cluster: %w", err):
			default:
			}
		}
	}()
	st := r.node.Status()
	r.log.Info("cluster_started", slog.String("name", st.Name), slog.String("addr", st.Addr))
	return func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second): // leave waits at most 2 s
		}
	}
}

// clusterStatus returns the node's view of its cluster, or nil without one.
func (r *Router) clusterStatus() *cluster.Status {
	if r.node == nil {
		return nil
	}
	st := r.node.Status()
	return &st
}

// flushCluster pushes the table's pending changes to the peers at once (a
// release: the load gone, the placement learned), before the answer's last
// bytes reach the client and it sends its next turn, possibly to another
// instance.
func (r *Router) flushCluster() {
	if r.node != nil {
		r.node.Flush()
	}
}

// CrashCluster stops the gossip node as a killed process would, without a
// leave message: peers notice through the failure detector. For tests that
// kill an instance (they close its listener and connections for the HTTP
// side); without a cluster it does nothing.
func (r *Router) CrashCluster() {
	if r.node != nil {
		r.node.Crash()
	}
}
