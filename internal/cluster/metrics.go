package cluster

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Drop reasons (the reason label of llm_ring_cluster_messages_dropped_total).
const (
	dropQueueFull = "queue_full"   // local publish queue full: update not sent
	dropSendError = "send_error"   // memberlist could not send to a peer
	dropNoPeer    = "no_peer"      // nothing to send to (isolated)
	dropStale     = "stale"        // received load entries older than what is known
	dropUnknown   = "unknown_peer" // load message from a peer not alive in membership
	dropOldGen    = "old_generation"
	dropTestHook  = "test_hook"
	dropWrongKind = "wrong_kind" // a push-pull state that is not a load snapshot
	dropOversized = "oversized"  // a snapshot over maxMessage, not sent
)

// metrics are the node's Prometheus series. Labels are bounded: kind is one
// of the five message kinds, reason one of the drop reasons above; no label
// carries a peer or replica name. Safe for concurrent use (Prometheus
// counters); set once by New, never replaced.
type metrics struct {
	sent, received, dropped *prometheus.CounterVec
	bytesSent, bytesRecv    *prometheus.CounterVec
	decodeErrors            prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, n *Node) *metrics {
	m := &metrics{
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm_ring_cluster_messages_sent_total",
			Help: "Cluster messages sent to peers (one per peer and packet), by kind.",
		}, []string{"kind"}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm_ring_cluster_messages_received_total",
			Help: "Cluster messages received and decoded, by kind.",
		}, []string{"kind"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm_ring_cluster_messages_dropped_total",
			Help: "Cluster updates not sent or not applied, by kind and reason.",
		}, []string{"kind", "reason"}),
		bytesSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm_ring_cluster_bytes_sent_total",
			Help: "Payload bytes of cluster messages sent (before encryption), by kind.",
		}, []string{"kind"}),
		bytesRecv: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm_ring_cluster_bytes_received_total",
			Help: "Payload bytes of cluster messages received (after decryption), by kind.",
		}, []string{"kind"}),
		decodeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "llm_ring_cluster_decode_errors_total",
			Help: "Cluster messages rejected as malformed.",
		}),
	}
	if reg == nil {
		return m
	}
	reg.MustRegister(m.sent, m.received, m.dropped, m.bytesSent, m.bytesRecv, m.decodeErrors,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "llm_ring_cluster_peers_alive",
			Help: "Other router instances this one currently sees alive.",
		}, func() float64 { return float64(n.alivePeers()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "llm_ring_cluster_isolated",
			Help: "1 when no other router instance is reachable: this instance routes on its own view alone.",
		}, func() float64 {
			if n.alivePeers() == 0 {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "llm_ring_cluster_peer_load_staleness_seconds",
			Help: "Age of the oldest last-heard load message among alive peers (0 with no peers).",
		}, func() float64 { return n.maxStaleness().Seconds() }),
	)
	return m
}
