package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/config"
)

func validGossip() config.Cluster {
	return config.Cluster{
		Mode: config.ClusterGossip, Bind: "0.0.0.0:7946", Advertise: "${POD_IP}:7946",
		Peers:         config.ClusterPeers{Mode: config.ClusterPeersKubernetes, Kubernetes: &config.ClusterKubernetes{Namespace: "llm-ring", Service: "router-peers", PortName: "gossip"}},
		SecretFile:    "/etc/llm-ring/gossip/key",
		SyncInterval:  config.Duration(time.Second),
		FlushInterval: config.Duration(5 * time.Millisecond),
	}
}

// Validate names the offending key; "" means valid.
func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*config.Cluster)
		want string
	}{
		{"shipped gossip block", func(*config.Cluster) {}, ""},
		{"mode none needs nothing else", func(c *config.Cluster) { *c = config.Cluster{Mode: config.ClusterNone} }, ""},
		{"unknown mode", func(c *config.Cluster) { c.Mode = "raft" }, "cluster.mode: must be none or gossip"},
		{"bind without port", func(c *config.Cluster) { c.Bind = "0.0.0.0" }, "cluster.bind:"},
		{"bind on a host name", func(c *config.Cluster) { c.Bind = "router:7946" }, "cluster.bind: \"router:7946\": host must be an IP"},
		{"literal advertise checked", func(c *config.Cluster) { c.Advertise = "10.0.0.1:x" }, "cluster.advertise:"},
		{"static peers listed", func(c *config.Cluster) { c.Peers = config.ClusterPeers{Mode: config.ClusterPeersStatic} }, "cluster.peers.static: must list"},
		{"static peer without port", func(c *config.Cluster) {
			c.Peers = config.ClusterPeers{Mode: config.ClusterPeersStatic, Static: []string{"router-0"}}
		}, "cluster.peers.static[0]:"},
		{"kubernetes block missing", func(c *config.Cluster) { c.Peers.Kubernetes = nil }, "cluster.peers.kubernetes: missing"},
		{"kubernetes port name", func(c *config.Cluster) { c.Peers.Kubernetes.PortName = "" }, "cluster.peers.kubernetes.port_name"},
		{"unknown peers mode", func(c *config.Cluster) { c.Peers.Mode = "dns" }, "cluster.peers.mode"},
		{"secret required", func(c *config.Cluster) { c.SecretFile = "" }, "cluster.secret_file: required"},
		{"sync too fast", func(c *config.Cluster) { c.SyncInterval = config.Duration(time.Millisecond) }, "cluster.sync_interval"},
		{"flush zero", func(c *config.Cluster) { c.FlushInterval = 0 }, "cluster.flush_interval"},
		{"flush not shorter than sync", func(c *config.Cluster) { c.FlushInterval = config.Duration(time.Second) }, "cluster.flush_interval: must be shorter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validGossip()
			tc.edit(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestAdvertiseExpandsEnv(t *testing.T) {
	c := validGossip()
	got, err := advertise(&c, func(k string) string { return map[string]string{"POD_IP": "10.1.2.3"}[k] })
	if err != nil || got != "10.1.2.3:7946" {
		t.Fatalf("advertise = %q, %v", got, err)
	}
	if _, err := advertise(&c, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "cluster.advertise") {
		t.Fatalf("unset POD_IP: err = %v", err)
	}
}

// ReadKey accepts 16/24/32 raw bytes or their base64, and nothing else.
func TestReadKey(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		content string
		wantLen int // 0: error
	}{
		{"raw 32 bytes ending in a newline byte stays raw", strings.Repeat("k", 31) + "\n", 32},
		{"raw 16 bytes", strings.Repeat("k", 16), 16},
		{"base64 of 32 bytes with newline", "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n", 32},
		{"base64 of 24 bytes", "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3", 32}, // 32 chars: taken raw, the same on every instance
		{"too short", "short", 0},
		{"base64 of 10 bytes", "MDEyMzQ1Njc4OQ==\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			k, err := ReadKey(p)
			if tc.wantLen == 0 {
				if err == nil || !strings.Contains(err.Error(), "cluster.secret_file") {
					t.Fatalf("err = %v, want a cluster.secret_file error", err)
				}
				return
			}
			if err != nil || len(k) != tc.wantLen {
				t.Fatalf("ReadKey = %d bytes, %v; want %d", len(k), err, tc.wantLen)
			}
		})
	}
	if _, err := ReadKey(filepath.Join(dir, "absent")); err == nil || !strings.Contains(err.Error(), "cluster.secret_file") {
		t.Fatalf("absent file: %v", err)
	}
}
