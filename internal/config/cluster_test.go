package config

import (
	"strings"
	"testing"
)

// gossipBlock replaces the shipped `cluster: {mode: none}` with the
// commented gossip example of router.yaml, uncommented.
func gossipBlock(t *testing.T) string {
	t.Helper()
	ex := example(t)
	i := strings.Index(ex, "cluster:")
	j := strings.Index(ex, "discovery:")
	var b strings.Builder
	for _, line := range strings.Split(ex[i:j], "\n") {
		if rest, ok := strings.CutPrefix(line, "# "); ok && (strings.HasPrefix(rest, "cluster:") || strings.HasPrefix(rest, " ")) {
			b.WriteString(rest + "\n")
		}
	}
	return ex[:i] + b.String() + ex[j:]
}

// The cluster block: none needs nothing else; the documented gossip example
// is valid; errors name the key under cluster.
func TestClusterBlock(t *testing.T) {
	g := gossipBlock(t)
	c, err := Parse([]byte(g))
	if err != nil {
		t.Fatalf("the documented gossip example: %v\n%s", err, g)
	}
	if c.Cluster.Mode != ClusterGossip || c.Cluster.Peers.Kubernetes == nil || c.Cluster.Peers.Kubernetes.Service != "router-peers" {
		t.Errorf("gossip example read as %+v", c.Cluster)
	}
	for _, tc := range []struct {
		name, doc, want string
	}{
		// The block is required, like every key.
		{"cluster missing", strings.Replace(example(t), "cluster:", "unused_cluster:", 1), "cluster: missing"},
		{"unknown mode", strings.Replace(example(t), "mode: none ", "mode: raft ", 1), "cluster.mode: must be none or gossip"},
		// gossip mode requires its keys (Strict's mode=gossip tags).
		{"gossip without secret", strings.Replace(g, "secret_file:", "#", 1), "cluster.secret_file: missing"},
		{"gossip without peers", strings.Replace(g, "peers:", "unknown_peers:", 1), "cluster.peers: missing"},
		{"bind on a name", strings.Replace(g, "bind: 0.0.0.0:7946", "bind: router:7946", 1), "cluster.bind:"},
		{"unknown key", strings.Replace(g, "  sync_interval:", "  resync: 1s\n  sync_interval:", 1), "cluster.resync: unknown key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// CheckHostPort splits like net.SplitHostPort without importing net.
func TestCheckHostPort(t *testing.T) {
	for _, tc := range []struct {
		in     string
		ipOnly bool
		ok     bool
	}{
		{"10.0.0.1:7946", true, true},
		{"[::1]:7946", true, true},
		{"0.0.0.0:0", true, true},       // any free port, for bind
		{"router-0:7946", false, true},  // static peers may be names
		{"router-0:7946", true, false},  // bind/advertise must be IPs
		{"router-0", false, false},      // no port
		{"router-0:0", false, false},    // a peer's port 0 is no port
		{"10.0.0.1:99999", true, false}, // out of range
		{"user@10.0.0.1:1", true, false},
		{"10.0.0.1:1/x", true, false},
		{":7946", false, false}, // empty host
	} {
		err := CheckHostPort(tc.in, tc.ipOnly)
		if (err == nil) != tc.ok {
			t.Errorf("CheckHostPort(%q, %v) = %v, want ok=%v", tc.in, tc.ipOnly, err, tc.ok)
		}
	}
}
