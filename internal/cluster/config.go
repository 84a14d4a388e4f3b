package cluster

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Modes of Config.Mode and Peers.Mode.
const (
	ModeNone        = "none"
	ModeGossip      = "gossip"
	PeersStatic     = "static"
	PeersKubernetes = "kubernetes"
)

// Config is the `cluster:` block of router.yaml. The json tags are the YAML
// keys; the cfg tags follow internal/config.Strict (required unless
// optional, or required only when the sibling mode selects them).
//
//	cluster:
//	  mode: gossip                 # none | gossip
//	  bind: 0.0.0.0:7946           # gossip UDP+TCP listen address
//	  advertise: ${POD_IP}:7946    # optional; ${VAR} is read from the environment
//	  peers:
//	    mode: kubernetes           # static | kubernetes
//	    kubernetes: {namespace: llm-ring, service: router-peers, port_name: gossip}
//	  secret_file: /etc/llm-ring/gossip/key
//	  sync_interval: 1s            # full load snapshot to every peer
//	  flush_interval: 5ms          # batching window of pushed changes
type Config struct {
	Mode string `json:"mode"`
	// Bind is the host:port memberlist listens on (UDP and TCP). The host
	// is an IP address (0.0.0.0 for all interfaces).
	Bind string `json:"bind,omitempty" cfg:"mode=gossip"`
	// Advertise is the host:port peers reach this instance at; "" lets
	// memberlist pick a private address of the host. ${VAR} references are
	// expanded from the environment (the Downward API's POD_IP).
	Advertise string `json:"advertise,omitempty" cfg:"optional"`
	Peers     Peers  `json:"peers" cfg:"mode=gossip"`
	// SecretFile holds the AES key (16, 24 or 32 bytes, raw or base64) that
	// encrypts and authenticates every gossip packet.
	SecretFile string `json:"secret_file,omitempty" cfg:"mode=gossip"`
	// SyncInterval is how often each instance sends its full load snapshot
	// to every peer (the repair of lost pushes).
	SyncInterval Duration `json:"sync_interval,omitempty" cfg:"mode=gossip"`
	// FlushInterval is how long local changes are batched before they are
	// pushed.
	FlushInterval Duration `json:"flush_interval,omitempty" cfg:"mode=gossip"`
}

// Peers says where the other router instances are found.
type Peers struct {
	Mode       string      `json:"mode"`
	Static     []string    `json:"static,omitempty" cfg:"mode=static"`
	Kubernetes *Kubernetes `json:"kubernetes,omitempty" cfg:"mode=kubernetes"`
}

// Kubernetes names the headless Service whose EndpointSlices list the router
// pods, and the port (by name) that carries gossip.
type Kubernetes struct {
	Namespace string `json:"namespace"`
	Service   string `json:"service"`
	PortName  string `json:"port_name"`
	// Kubeconfig is a kubeconfig path; "" means in-cluster configuration.
	Kubeconfig string `json:"kubeconfig,omitempty" cfg:"optional"`
}

// Duration is a time.Duration written as a Go duration string ("5ms", "1s").
type Duration time.Duration

// UnmarshalJSON accepts a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New("must be a duration string such as \"1s\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Limits of the intervals: below the minimum the batching does not pay for
// its wake-ups; above the maximum a lost push stays wrong for too long.
const (
	minFlush = time.Millisecond
	maxFlush = time.Second
	minSync  = 100 * time.Millisecond
	maxSync  = time.Minute
)

// Validate checks c. Every error names its key under "cluster.". It reads no
// files: the key file is checked by ReadKey when the node starts.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("cluster.%s: %s", key, fmt.Sprintf(format, args...)))
	}
	switch c.Mode {
	case ModeNone:
		return nil
	case ModeGossip:
	default:
		bad("mode", "must be none or gossip, got %q", c.Mode)
		return errors.Join(errs...)
	}
	if err := checkHostPort(c.Bind, true); err != nil {
		bad("bind", "%v", err)
	}
	if c.Advertise != "" && !strings.Contains(c.Advertise, "$") {
		if err := checkHostPort(c.Advertise, true); err != nil {
			bad("advertise", "%v", err)
		}
	}
	switch c.Peers.Mode {
	case PeersStatic:
		if len(c.Peers.Static) == 0 {
			bad("peers.static", "must list at least one host:port (this instance's own address may be listed)")
		}
		for i, p := range c.Peers.Static {
			if err := checkHostPort(p, false); err != nil {
				bad(fmt.Sprintf("peers.static[%d]", i), "%v", err)
			}
		}
	case PeersKubernetes:
		k := c.Peers.Kubernetes
		if k == nil {
			bad("peers.kubernetes", "missing")
			break
		}
		if k.Namespace == "" {
			bad("peers.kubernetes.namespace", "must not be empty")
		}
		if k.Service == "" {
			bad("peers.kubernetes.service", "must not be empty")
		}
		if k.PortName == "" {
			bad("peers.kubernetes.port_name", "must not be empty")
		}
	default:
		bad("peers.mode", "must be static or kubernetes, got %q", c.Peers.Mode)
	}
	if c.SecretFile == "" {
		bad("secret_file", "required in gossip mode (gossip is always encrypted)")
	}
	if d := c.SyncInterval.D(); d < minSync || d > maxSync {
		bad("sync_interval", "must be between %v and %v, got %v", minSync, maxSync, d)
	}
	if d := c.FlushInterval.D(); d < minFlush || d > maxFlush {
		bad("flush_interval", "must be between %v and %v, got %v", minFlush, maxFlush, d)
	}
	if c.FlushInterval >= c.SyncInterval && len(errs) == 0 {
		bad("flush_interval", "must be shorter than sync_interval (%v)", c.SyncInterval.D())
	}
	return errors.Join(errs...)
}

// checkHostPort accepts "host:port". With ipOnly the host must be an IP
// literal (memberlist binds and advertises addresses, not names) and port 0
// (any free port) is allowed.
func checkHostPort(s string, ipOnly bool) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not host:port", s)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 || (p == 0 && !ipOnly) {
		return fmt.Errorf("%q: invalid port %q", s, port)
	}
	if host == "" {
		return fmt.Errorf("%q: empty host", s)
	}
	if ipOnly && net.ParseIP(host) == nil {
		return fmt.Errorf("%q: host must be an IP address", s)
	}
	return nil
}

// advertise expands ${VAR} in c.Advertise with getenv and checks the result.
func (c *Config) advertise(getenv func(string) string) (string, error) {
	if c.Advertise == "" {
		return "", nil
	}
	a := os.Expand(c.Advertise, getenv)
	if err := checkHostPort(a, true); err != nil {
		return "", fmt.Errorf("cluster.advertise: %v (expanded from %q)", err, c.Advertise)
	}
	return a, nil
}

// ReadKey reads the gossip key file: exactly 16, 24 or 32 raw bytes (AES-128,
// -192, -256), or such a key in standard base64 (surrounding whitespace
// ignored), as `openssl rand -base64 32` writes it. Errors name the key and
// the file, never the content.
func ReadKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster.secret_file: %w", err)
	}
	if keyLen(len(b)) {
		return b, nil
	}
	txt := bytes.TrimSpace(b)
	k := make([]byte, base64.StdEncoding.DecodedLen(len(txt)))
	n, err := base64.StdEncoding.Decode(k, txt)
	if err == nil && keyLen(n) {
		return k[:n], nil
	}
	return nil, fmt.Errorf("cluster.secret_file: %s: holds %d bytes; want a 16, 24 or 32-byte key, raw or base64", path, len(b))
}

func keyLen(n int) bool { return n == 16 || n == 24 || n == 32 }
