package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/discovery"
	modelcfg "github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/replica"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/router"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// The recorded scenario: a router with two simulated replicas, signals
// scraped, gossip on (one instance), scraped after each step. The steps
// are read as one minute apart when the rules are evaluated on them.
const (
	stepsHealthy  = 30 // multi-turn conversations: a high cached share
	stepsCollapse = 15 // fresh single-turn conversations: almost nothing cached
	stepsOutage   = 15 // every replica down
	turnsPerConv  = 4
)

type recording struct {
	scrapes []map[string]*dto.MetricFamily
	descs   []string // the router's registry's metric names (Describe)
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// families returns every metric family the router's registry describes
// (those with no series yet included) or any scrape exported.
func (r *recording) families() map[string]bool {
	out := map[string]bool{}
	for _, d := range r.descs {
		out[d] = true
	}
	for _, s := range r.scrapes {
		for name := range s {
			out[name] = true
		}
	}
	return out
}

// script writes the scrapes of the named families as a promqltest load
// script (one step a minute), with the labels a Prometheus scrape adds.
func (r *recording) script(names []string) string {
	values := map[string][]string{}
	for i, s := range r.scrapes {
		for _, name := range names {
			mf := s[name]
			if mf == nil {
				continue
			}
			for _, m := range mf.GetMetric() {
				key := seriesKey(name, m)
				if values[key] == nil {
					values[key] = slices.Repeat([]string{"_"}, len(r.scrapes))
				}
				values[key][i] = strconv.FormatFloat(sampleValue(mf.GetType(), m), 'g', -1, 64)
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Recorded by deploy/monitoring_test.go (go test ./deploy -run TestMonitoring -update-monitoring):\n")
	fmt.Fprintf(&b, "# %d scrapes of one router's /metrics, read as one a minute.\n", len(r.scrapes))
	fmt.Fprintf(&b, "# phases: healthy=0-%d collapse=%d-%d outage=%d-%d\n", stepsHealthy-1, stepsHealthy,
		stepsHealthy+stepsCollapse-1, stepsHealthy+stepsCollapse, len(r.scrapes)-1)
	b.WriteString("load 1m\n")
	for _, k := range sortedKeys(values) {
		fmt.Fprintf(&b, "  %s %s\n", k, strings.Join(values[k], " "))
	}
	return b.String()
}

func seriesKey(name string, m *dto.Metric) string {
	labels := []string{`instance="router-0"`, `job="llm-ring"`}
	for _, l := range m.GetLabel() {
		labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	slices.Sort(labels)
	return name + "{" + strings.Join(labels, ",") + "}"
}

func sampleValue(t dto.MetricType, m *dto.Metric) float64 {
	switch t {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	default:
		return m.GetUntyped().GetValue()
	}
}

// scenario is the running system the recording drives.
type scenario struct {
	t        *testing.T
	url      string
	rt       *router.Router
	stops    []context.CancelFunc // the replicas' servers
	client   *http.Client
	conv, tn int
}

func recordScenario(t *testing.T) *recording {
	s := startScenario(t)
	rec := &recording{}
	ch := make(chan *prometheus.Desc)
	go func() { s.rt.Registry().Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			rec.descs = append(rec.descs, m[1])
		}
	}
	for i := range stepsHealthy + stepsCollapse + stepsOutage {
		switch {
		case i < stepsHealthy:
			for range 3 {
				s.nextTurn()
			}
		case i < stepsHealthy+stepsCollapse:
			for range 3 {
				s.freshConversation(i)
			}
		default:
			if i == stepsHealthy+stepsCollapse {
				s.outage()
			}
			for range 3 {
				s.post(fmt.Sprintf("down-%d", i), "anyone there?")
			}
		}
		rec.scrapes = append(rec.scrapes, s.scrape())
	}
	return rec
}

func startScenario(t *testing.T) *scenario {
	t.Helper()
	host, err := replica.NewHost(replica.Options{Model: modelcfg.DefaultConfig(), Speed: 500})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close() })
	s := &scenario{t: t, client: &http.Client{Timeout: 30 * time.Second}}
	var rs []replicaset.Replica
	for i := range 2 {
		name := fmt.Sprint("llm-", i)
		r, err := host.Add(name, 0)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); replica.Serve(ctx, ln, r) }()
		s.stops = append(s.stops, stop)
		t.Cleanup(func() { stop(); <-done })
		rs = append(rs, replicaset.Replica{Name: name, URL: "http://" + ln.Addr().String()})
	}
	cfg, err := config.Load("../config/router.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Discovery.Static = rs
	cfg.HealthCheck.Interval, cfg.HealthCheck.Timeout = config.Duration(20*time.Millisecond), config.Duration(200*time.Millisecond)
	cfg.Signals.Interval = config.Duration(20 * time.Millisecond)
	cfg.Upstream.DialTimeout = config.Duration(200 * time.Millisecond)
	cfg.Cluster = gossipAlone(t)
	cfg.Admission.Enabled = true // its series are registered only when it is on
	rt, err := router.New(router.Options{Config: cfg, NodeName: "router-0"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Serve(ctx, ln, discovery.Static(rs)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("router: %v", err)
		}
	})
	s.url, s.rt = "http://"+ln.Addr().String(), rt
	s.waitMetric("the replicas healthy and their signals read", func(f map[string]*dto.MetricFamily) bool {
		return sumOf(f, "llm_ring_replica_healthy") == 2 && sumOf(f, "llm_ring_scrape_up") == 2
	})
	return s
}

// gossipAlone is a gossip cluster of one (its own seed): the cluster
// series exist, with no peer.
func gossipAlone(t *testing.T) config.Cluster {
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, bytes.Repeat([]byte{7}, 32), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeUDPAndTCP(t)
	return config.Cluster{Mode: config.ClusterGossip, Bind: addr,
		Peers:      config.ClusterPeers{Mode: config.ClusterPeersStatic, Static: []string{addr}},
		SecretFile: key, SyncInterval: config.Duration(time.Second), FlushInterval: config.Duration(5 * time.Millisecond)}
}

// post sends one chat request and reads the answer to its end.
func (s *scenario) post(conv, text string, history ...string) {
	msgs := []map[string]string{{"role": "system", "content": "You are the assistant of conversation " + conv + ". " + strings.Repeat("Answer briefly. ", 40)}}
	for _, h := range history {
		msgs = append(msgs, map[string]string{"role": "user", "content": h}, map[string]string{"role": "assistant", "content": "noted"})
	}
	msgs = append(msgs, map[string]string{"role": "user", "content": text})
	body, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs, "max_tokens": 4})
	req, _ := http.NewRequest(http.MethodPost, s.url+wire.PathChatCompletions, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-conversation-id", conv)
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// nextTurn sends the next turn of the current conversation (a new one every
// turnsPerConv turns), its history growing: each turn finds the last cached.
func (s *scenario) nextTurn() {
	if s.tn == turnsPerConv {
		s.conv, s.tn = s.conv+1, 0
	}
	var hist []string
	for k := range s.tn {
		hist = append(hist, fmt.Sprintf("question %d of conversation %d: %s", k, s.conv, strings.Repeat("more context ", 30)))
	}
	s.post(fmt.Sprint("conv-", s.conv), fmt.Sprintf("question %d", s.tn), hist...)
	s.tn++
}

// freshConversation sends the first turn of a never-seen conversation.
func (s *scenario) freshConversation(step int) {
	s.conv++
	s.post(fmt.Sprintf("fresh-%d-%d", step, s.conv), "hello")
}

// outage stops every replica and waits until the router sees them all down.
func (s *scenario) outage() {
	for _, stop := range s.stops {
		stop()
	}
	s.waitMetric("every replica unhealthy and unscraped", func(f map[string]*dto.MetricFamily) bool {
		return sumOf(f, "llm_ring_replica_healthy") == 0 && sumOf(f, "llm_ring_scrape_up") == 0
	})
}

// scrape reads the router's /metrics once no request is in flight.
func (s *scenario) scrape() map[string]*dto.MetricFamily {
	var out map[string]*dto.MetricFamily
	s.waitMetric("no request in flight", func(f map[string]*dto.MetricFamily) bool {
		out = f
		return sumOf(f, "llm_ring_inflight_requests") == 0
	})
	return out
}

func (s *scenario) get() map[string]*dto.MetricFamily {
	resp, err := s.client.Get(s.url + "/metrics")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	f, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return f
}

func (s *scenario) waitMetric(what string, cond func(map[string]*dto.MetricFamily) bool) {
	s.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if cond(s.get()) {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("waited 10 s for %s", what)
		}
	}
}

func sumOf(f map[string]*dto.MetricFamily, name string) float64 {
	var v float64
	if mf := f[name]; mf != nil {
		for _, m := range mf.GetMetric() {
			v += sampleValue(mf.GetType(), m)
		}
	}
	return v
}

// freeUDPAndTCP returns a loopback address whose port was free for both UDP
// and TCP a moment ago (memberlist binds both on one port): a UDP port
// alone is often taken on TCP by another test's connection.
func freeUDPAndTCP(t *testing.T) string {
	for i := 0; i < 50; i++ {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := pc.LocalAddr().String()
		ln, err := net.Listen("tcp", addr)
		pc.Close()
		if err == nil {
			ln.Close()
			return addr
		}
	}
	t.Fatal("no loopback port free for both UDP and TCP")
	return ""
}
