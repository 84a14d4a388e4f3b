package config

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The cluster block lives here, not in internal/cluster, so that the
// configuration (which the simulator reads) does not depend on memberlist:
// internal/cluster uses these types as they are.

// Modes of Cluster.Mode and ClusterPeers.Mode.
const (
	ClusterNone            = "none"
	ClusterGossip          = "gossip"
	ClusterPeersStatic     = "static"
	ClusterPeersKubernetes = "kubernetes"
)

// Cluster is the `cluster:` block of router.yaml. The json tags are the YAML
// keys; the cfg tags follow internal/strict (required unless
// optional, or required only when the sibling mode selects them).
//
//	cluster:
//	  mode: gossip                 # none | gossip
//	  bind: 0.0.0.0:7946           # gossip UDP+TCP listen address
//	  advertise: ${POD_IP}:7946    # optional; ${VAR} is read from the environment
//	  peers:
//	    mode: kubernetes           # static | kubernetes
//	    kubernetes: {namespace: llm-ring, service: router-peers, port_name: gossip}
//	  secret_file: /var/run/secrets/llm-ring/gossip/key
//	  sync_interval: 1s            # full load snapshot to every peer
//	  flush_interval: 5ms          # longest a change waits to be pushed
type Cluster struct {
	Mode string `json:"mode"`
	// Bind is the host:port memberlist listens on (UDP and TCP). The host
	// is an IP address (0.0.0.0 for all interfaces).
	Bind string `json:"bind,omitempty" cfg:"mode=gossip"`
	// Advertise is the host:port peers reach this instance at; "" lets
	// memberlist pick a private address of the host. ${VAR} references are
	// expanded from the environment (the Downward API's POD_IP).
	Advertise string       `json:"advertise,omitempty" cfg:"optional"`
	Peers     ClusterPeers `json:"peers" cfg:"mode=gossip"`
	// SecretFile holds the AES key (16, 24 or 32 bytes, raw or base64) that
	// encrypts and authenticates every gossip packet.
	SecretFile string `json:"secret_file,omitempty" cfg:"mode=gossip"`
	// SyncInterval is how often each instance sends its full load snapshot
	// to every peer (the repair of lost pushes).
	SyncInterval Duration `json:"sync_interval,omitempty" cfg:"mode=gossip"`
	// FlushInterval is the longest a local change waits to be pushed,
	// batched with others; a routed turn (with its load and prefix insert)
	// and a release are pushed at once.
	FlushInterval Duration `json:"flush_interval,omitempty" cfg:"mode=gossip"`
}

// ClusterPeers says where the other router instances are found.
type ClusterPeers struct {
	Mode       string             `json:"mode"`
	Static     []string           `json:"static,omitempty" cfg:"mode=static"`
	Kubernetes *ClusterKubernetes `json:"kubernetes,omitempty" cfg:"mode=kubernetes"`
}

// ClusterKubernetes names the headless Service whose EndpointSlices list the router
// pods, and the port (by name) that carries gossip.
type ClusterKubernetes struct {
	Namespace string `json:"namespace"`
	Service   string `json:"service"`
	PortName  string `json:"port_name"`
	// Kubeconfig is a kubeconfig path; "" means in-cluster configuration.
	Kubeconfig string `json:"kubeconfig,omitempty" cfg:"optional"`
}

// Limits of the intervals: below the minimum the batching does not pay for
// its wake-ups; above the maximum a lost push stays wrong for too long.
const (
	minClusterFlush = time.Millisecond
	maxClusterFlush = time.Second
	minClusterSync  = 100 * time.Millisecond
	maxClusterSync  = time.Minute
)

// Validate checks c. Every error names its key under "cluster.". It reads no
// files: the key file is checked by ReadKey when the node starts.
func (c *Cluster) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("cluster.%s: %s", key, fmt.Sprintf(format, args...)))
	}
	switch c.Mode {
	case ClusterNone:
		return nil
	case ClusterGossip:
	default:
		bad("mode", "must be none or gossip, got %q", c.Mode)
		return errors.Join(errs...)
	}
	if err := CheckHostPort(c.Bind, true); err != nil {
		bad("bind", "%v", err)
	}
	if c.Advertise != "" && !strings.Contains(c.Advertise, "$") {
		if err := CheckHostPort(c.Advertise, true); err != nil {
			bad("advertise", "%v", err)
		}
	}
	switch c.Peers.Mode {
	case ClusterPeersStatic:
		if len(c.Peers.Static) == 0 {
			bad("peers.static", "must list at least one host:port (this instance's own address may be listed)")
		}
		for i, p := range c.Peers.Static {
			if err := CheckHostPort(p, false); err != nil {
				bad(fmt.Sprintf("peers.static[%d]", i), "%v", err)
			}
		}
	case ClusterPeersKubernetes:
		k := c.Peers.Kubernetes
		if k == nil {
			bad("peers.kubernetes", "missing")
			break
		}
		validateService("peers.kubernetes", k.Namespace, k.Service, k.PortName, bad)
	default:
		bad("peers.mode", "must be static or kubernetes, got %q", c.Peers.Mode)
	}
	if c.SecretFile == "" {
		bad("secret_file", "required in gossip mode (gossip is always encrypted)")
	}
	if d := c.SyncInterval.D(); d < minClusterSync || d > maxClusterSync {
		bad("sync_interval", "must be between %v and %v, got %v", minClusterSync, maxClusterSync, d)
	}
	if d := c.FlushInterval.D(); d < minClusterFlush || d > maxClusterFlush {
		bad("flush_interval", "must be between %v and %v, got %v", minClusterFlush, maxClusterFlush, d)
	}
	if c.FlushInterval >= c.SyncInterval && len(errs) == 0 {
		bad("flush_interval", "must be shorter than sync_interval (%v)", c.SyncInterval.D())
	}
	return errors.Join(errs...)
}

// CheckHostPort accepts "host:port". With ipOnly the host must be an IP
// literal (memberlist binds and advertises addresses, not names) and port 0
// (any free port) is allowed.
func CheckHostPort(s string, ipOnly bool) error {
	// net/url splits host and port as net.SplitHostPort does (brackets
	// around IPv6) without making this package depend on net.
	u, err := url.Parse("//" + s)
	if err != nil || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || !strings.Contains(u.Host, ":") {
		return fmt.Errorf("%q is not host:port", s)
	}
	host, port := u.Hostname(), u.Port()
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 || (p == 0 && !ipOnly) {
		return fmt.Errorf("%q: invalid port %q", s, port)
	}
	if host == "" {
		return fmt.Errorf("%q: empty host", s)
	}
	if ipOnly {
		if _, err := netip.ParseAddr(host); err != nil {
			return fmt.Errorf("%q: host must be an IP address", s)
		}
	}
	return nil
}
