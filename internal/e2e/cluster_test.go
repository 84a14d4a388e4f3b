package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/discovery"
	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/replica"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/ring"
	"github.com/llm-ring/llm-ring/internal/router"
	"github.com/llm-ring/llm-ring/internal/testlog"
	"github.com/llm-ring/llm-ring/internal/wire"
)

// freePort returns a loopback port free for TCP and UDP (memberlist binds
// both) at the time of the call.
func freePort(t *testing.T) int {
	t.Helper()
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if pc, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			pc.Close()
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// setup is how startRouters builds a test cluster.
type setup struct {
	// speed is the simulated replicas' speed-up over the model's
	// real-time figures (replica.Options.Speed).
	speed float64
	// logs, if set, receives every router's log (JSON lines).
	logs io.Writer
}

// defaultSetup: fast replicas, logs discarded.
var defaultSetup = setup{speed: 200}

// holdDoomed keeps the requests of conversations named "doomed-..." until
// their client goes away: requests that are surely in flight when a router
// is killed, however fast the replica is.
func holdDoomed(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.HasPrefix(req.Header.Get("x-conversation-id"), "doomed-") {
			<-req.Context().Done()
			return
		}
		h.ServeHTTP(w, req)
	})
}

// instance is one started router.
type instance struct {
	url string
	rt  *router.Router
	ln  *killableListener
}

// kill stops the instance as a killed process: its listener and every
// connection close at once (requests in flight fail with a connection
// error) and its gossip node stops without leaving.
func (in *instance) kill() {
	in.ln.kill()
	in.rt.CrashCluster()
}

// killableListener keeps the connections it accepted, to close them all.
type killableListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *killableListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *killableListener) kill() {
	l.Listener.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.Close()
	}
}

// startRouters starts n routers in front of three simulated replicas; with
// gossip they form one cluster (static peers: the first instance's address,
// a test key).
func startRouters(t *testing.T, n int, gossip bool, su setup) []*instance {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	host, err := replica.NewHost(replica.Options{Model: model.DefaultConfig(), Speed: su.speed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close() })
	var rs []replicaset.Replica
	for i := range 3 {
		name := fmt.Sprint("llm-", i)
		r, err := host.Add(name, 0)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go replica.Serve(ctx, ln, holdDoomed(r))
		rs = append(rs, replicaset.Replica{Name: name, URL: "http://" + ln.Addr().String()})
	}
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, bytes.Repeat([]byte{7}, 32), 0o600); err != nil {
		t.Fatal(err)
	}
	seed := fmt.Sprint("127.0.0.1:", freePort(t))
	var ins []*instance
	for i := range n {
		cfg, err := config.Load("../../config/router.yaml")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Discovery.Static = rs
		if gossip {
			bind := seed
			if i > 0 {
				bind = fmt.Sprint("127.0.0.1:", freePort(t))
			}
			cfg.Cluster = config.Cluster{Mode: config.ClusterGossip, Bind: bind,
				Peers:      config.ClusterPeers{Mode: config.ClusterPeersStatic, Static: []string{seed}},
				SecretFile: key, SyncInterval: config.Duration(time.Second), FlushInterval: config.Duration(5 * time.Millisecond)}
		}
		var lg *slog.Logger
		if su.logs != nil {
			lg = slog.New(slog.NewJSONHandler(su.logs, nil))
		}
		rt, err := router.New(router.Options{Config: cfg, NodeName: fmt.Sprint("router-", i), Logger: lg})
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln := &killableListener{Listener: l}
		go rt.Serve(ctx, ln, discovery.Static(rs))
		ins = append(ins, &instance{url: "http://" + ln.Addr().String(), rt: rt, ln: ln})
	}
	for _, in := range ins {
		waitFor(t, func() bool {
			var info router.ReplicasInfo
			if !getJSON(in.url+"/replicas", &info) || len(info.Replicas) != 3 {
				return false
			}
			return !gossip || info.Cluster != nil && countAlive(info) == n-1
		})
	}
	return ins
}

func countAlive(info router.ReplicasInfo) int {
	k := 0
	for _, p := range info.Cluster.Peers {
		if p.Alive {
			k++
		}
	}
	return k
}

func getJSON(url string, v any) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	return resp.StatusCode == 200 && json.NewDecoder(resp.Body).Decode(v) == nil
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// workload sends convs conversations of turns turns, users at once, each
// turn as soon as the previous answer is in (no think time); turn k of
// conversation c goes to urls[hash(c, k) mod len(urls)], as a load balancer
// without affinity spreads them. It returns the follow-up hit rate (turns
// whose cache_n is at least 90 % of the previous turn's prompt and answer)
// and every request's latency.
func workload(t *testing.T, urls []string, convs, turns, users int) (hit float64, lat []time.Duration) {
	t.Helper()
	var mu sync.Mutex
	hits, follow := 0, 0
	var wg sync.WaitGroup
	next := make(chan int)
	for range users {
		wg.Go(func() {
			for c := range next {
				id := fmt.Sprint("conv-", c)
				prompt := fmt.Sprintf("System: you are assistant %d. %s\n", c, strings.Repeat("Be brief and exact. ", 30))
				prev := 0
				for k := range turns {
					prompt += fmt.Sprintf("User: question %d of conversation %d about topic %d?\nAssistant:", k, c, c*7+k)
					u := urls[(ring.HashString(fmt.Sprint(id, "/", k))>>7)%uint64(len(urls))]
					body, _ := json.Marshal(map[string]any{"prompt": prompt, "n_predict": 24})
					req, _ := http.NewRequest("POST", u+wire.PathCompletion, bytes.NewReader(body))
					req.Header.Set("x-conversation-id", id)
					start := time.Now()
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Errorf("%s turn %d: %v", id, k, err)
						return
					}
					var out wire.CompletionResponse
					err = json.NewDecoder(resp.Body).Decode(&out)
					resp.Body.Close()
					if err != nil || resp.StatusCode != 200 {
						t.Errorf("%s turn %d: status %d, %v", id, k, resp.StatusCode, err)
						return
					}
					mu.Lock()
					lat = append(lat, time.Since(start))
					if k > 0 {
						follow++
						if out.Timings.CacheN*10 >= prev*9 {
							hits++
						}
					}
					mu.Unlock()
					prev = out.Timings.CacheN + out.Timings.PromptN
					prompt += out.Content + "\n"
				}
			}
		})
	}
	for c := range convs {
		next <- c
	}
	close(next)
	wg.Wait()
	return float64(hits) / float64(max(follow, 1)), lat
}

func p95(lat []time.Duration) time.Duration {
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[len(s)*95/100]
}

// knew is the share of follow-up turns whose router knew where the
// conversation's previous turn had gone, read from the routers' JSON logs:
// the request log's cached_on (what placement memory, or a turn announced
// by another instance, said at the pick) is the replica of the
// conversation's previous request. A conversation's turns are sequential,
// so their order is that of their starts (the log's time, when a request
// ended, less its latency); the log's own order may differ by a hair.
func knew(t *testing.T, logs []byte) float64 {
	t.Helper()
	type entry struct {
		start             time.Time
		replica, cachedOn string
	}
	turns := map[string][]entry{}
	for line := range bytes.Lines(logs) {
		var e struct {
			Msg, Conversation, Replica string
			Time                       time.Time
			CachedOn                   string  `json:"cached_on"`
			LatencyMS                  float64 `json:"latency_ms"`
		}
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if e.Msg == "request" {
			start := e.Time.Add(-time.Duration(e.LatencyMS * float64(time.Millisecond)))
			turns[e.Conversation] = append(turns[e.Conversation], entry{start, e.Replica, e.CachedOn})
		}
	}
	knew, follow := 0, 0
	for _, ts := range turns {
		slices.SortFunc(ts, func(a, b entry) int { return a.start.Compare(b.start) })
		for i := 1; i < len(ts); i++ {
			follow++
			if ts[i].cachedOn == ts[i-1].replica {
				knew++
			}
		}
	}
	return float64(knew) / float64(max(follow, 1))
}

// aaResult is one setup's run of the active-active workload.
type aaResult struct {
	hit, knew float64
	p95       time.Duration
}

// runActiveActive runs the workload against n routers (with or without
// gossip) in front of three fresh simulated replicas.
func runActiveActive(t *testing.T, n int, gossip bool, speed float64) aaResult {
	t.Helper()
	logs := &testlog.Buffer{}
	var urls []string
	for _, in := range startRouters(t, n, gossip, setup{speed: speed, logs: logs}) {
		urls = append(urls, in.url)
	}
	hit, lat := workload(t, urls, 32, 6, 4)
	return aaResult{hit: hit, knew: knew(t, logs.Bytes()), p95: p95(lat)}
}

// TestActiveActiveRouters (issue 13): one router, three routers with
// gossip (real memberlist on loopback, static peers, a test key) and three
// without, each in front of three simulated replicas, serve the same
// workload: 32 conversations of 6 turns, 4 users, no think time (a turn is
// sent the moment the previous answer is in, possibly to another instance,
// which may not have heard the release yet), turns spread over the
// instances.
//
// Asserted: every request succeeds; with gossip, the instance that routes
// a follow-up knows where the conversation's previous turn went (from the
// placement, or from the turn announced when it was routed) as one router
// does; without gossip it often does not, and the follow-up hit rate shows
// the loss. The hit rates and p95 are logged: a single run's hit rate
// moves by a few points with timing (llm-aware redirects whenever a
// replica happens to be busy), so "within 1 point of one router" is
// measured over repeated runs instead — LLM_RING_E2E_REPEAT=N runs the
// comparison N times and logs means with 95 % intervals, and
// LLM_RING_E2E_SPEED=X sets the replicas' speed-up (default 50: turns of
// 20-130 ms; docs/notes/cluster.md has both).
func TestActiveActiveRouters(t *testing.T) {
	if testing.Short() {
		t.Skip("live cluster test")
	}
	reps := 1
	if s := os.Getenv("LLM_RING_E2E_REPEAT"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("LLM_RING_E2E_REPEAT=%q: want a positive count", s)
		}
		reps = n
	}
	speed := 50.0
	if s := os.Getenv("LLM_RING_E2E_SPEED"); s != "" {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v <= 0 {
			t.Fatalf("LLM_RING_E2E_SPEED=%q: want a positive speed-up", s)
		}
		speed = v
	}
	names := []string{"one router", "three, gossip", "three, no gossip"}
	res := make([][]aaResult, 3)
	for range reps {
		for i, c := range []struct {
			n      int
			gossip bool
		}{{1, false}, {3, true}, {3, false}} {
			r := runActiveActive(t, c.n, c.gossip, speed)
			res[i] = append(res[i], r)
			t.Logf("%-16s follow-up hit rate %5.1f%%, knew the previous turn's replica %5.1f%%, p95 %v", names[i], r.hit*100, r.knew*100, r.p95.Round(100*time.Microsecond))
		}
		one, three, alone := res[0][len(res[0])-1], res[1][len(res[1])-1], res[2][len(res[2])-1]
		// One router knows every previous turn it routed, unless that turn
		// failed (a health check or an attempt timing out on a starved
		// scheduler: 98.7 % once, at load 23 on 2 cores with -race).
		if one.knew < 0.98 {
			t.Errorf("one router knew the previous replica of %.1f%% of follow-ups, want ≥ 98%% (all on a quiet machine)", one.knew*100)
		}
		// A turn announced when it was routed reaches the others within a
		// flush interval (5 ms) and a hop; the previous turn lasts 20 ms or
		// more here. Allow one follow-up in a hundred for a starved
		// scheduler (-race on a shared box).
		if three.knew < 0.99 {
			t.Errorf("three routers with gossip knew the previous replica of %.1f%% of follow-ups, want ≥ 99%% (one router: all)", three.knew*100)
		}
		// The sensitivity check reads what the instances knew, not the hit
		// rate: one router's own hit rate fell to 89 % in 2 runs of 30 on a
		// busy box, level with three without gossip.
		if alone.knew > 0.9 {
			t.Errorf("three routers without gossip knew the previous replica of %.1f%% of follow-ups: want far fewer than with gossip (else the test cannot tell gossip from none)", alone.knew*100)
		}
	}
	if reps > 1 {
		for i, rs := range res {
			hit := meanCI(rs, func(r aaResult) float64 { return r.hit * 100 })
			q := meanCI(rs, func(r aaResult) float64 { return float64(r.p95) / float64(time.Millisecond) })
			t.Logf("%d runs, %-16s follow-up hit rate %s %%, p95 %s ms", reps, names[i], hit, q)
		}
	}
}

// meanCI formats the mean of f over rs with its 95 % confidence interval
// (Student's t, two-sided).
func meanCI(rs []aaResult, f func(aaResult) float64) string {
	n := float64(len(rs))
	var sum, sq float64
	for _, r := range rs {
		sum += f(r)
	}
	mean := sum / n
	for _, r := range rs {
		sq += (f(r) - mean) * (f(r) - mean)
	}
	// t(0.975, n-1) for n-1 = 1..9, then the normal value.
	tq := []float64{12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26}
	q := 1.96
	if k := len(rs) - 2; k >= 0 && k < len(tq) {
		q = tq[k]
	}
	return fmt.Sprintf("%.1f ± %.1f", mean, q*math.Sqrt(sq/max(n-1, 1)/n))
}

// conv is one conversation of a test, as its client keeps it.
type conv struct {
	id     string
	prompt string
	turns  int
	// The last successful turn: the instance that routed it, the replica
	// it went to, and why.
	inst   int
	to     string
	reason string
}

// turn sends the conversation's next turn to url and, when it succeeds,
// appends the answer. It returns the replica and the route reason.
func (c *conv) turn(url string, nPredict int) (to, reason string, err error) {
	prompt := c.prompt + fmt.Sprintf("User: question %d of %s?\nAssistant:", c.turns, c.id)
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "n_predict": nPredict})
	req, _ := http.NewRequest("POST", url+wire.PathCompletion, bytes.NewReader(body))
	req.Header.Set("x-conversation-id", c.id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	var out wire.CompletionResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", "", err
	}
	if resp.StatusCode != 200 {
		return "", "", fmt.Errorf("status %d", resp.StatusCode)
	}
	c.prompt = prompt + out.Content + "\n"
	c.turns++
	return resp.Header.Get(router.HeaderRoutedTo), resp.Header.Get(router.HeaderRouteReason), nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// redirected: the route reasons that send a turn away from its ring home
// (and away from its placement, if it had one).
func redirected(reason string) bool { return reason == "overflow" || reason == "least-loaded" }

// TestKillOneRouter (issue 13): three instances gossip; one is killed (its
// listener and connections closed at once, its gossip node stopped without
// leaving). Its requests in flight fail with a connection error; once the
// others' failure detector has declared it dead, every later request is
// served by them; and the conversations whose last turn it had redirected
// away from their home keep that placement: their next turn, on another
// instance, goes to the same replica (the others learned it by gossip).
func TestKillOneRouter(t *testing.T) {
	if testing.Short() {
		t.Skip("live cluster test")
	}
	ins := startRouters(t, 3, true, defaultSetup)
	convs := make([]*conv, 48)
	for i := range convs {
		convs[i] = &conv{id: fmt.Sprint("conv-", i),
			prompt: fmt.Sprintf("System: you are assistant %d. %s\n", i, strings.Repeat("Be brief and exact. ", 30))}
	}
	// Rounds of one turn per conversation, all at once (load makes the
	// instances redirect), turns spread over the instances, until one
	// instance holds the last turn of at least two redirected conversations.
	victim := -1
	for round := 0; victim < 0; round++ {
		if round == 8 {
			t.Fatal("no instance redirected two conversations' last turns in 8 rounds")
		}
		var wg sync.WaitGroup
		for _, c := range convs {
			wg.Go(func() {
				inst := int((ring.HashString(fmt.Sprint(c.id, "/", c.turns)) >> 7) % 3)
				to, reason, err := c.turn(ins[inst].url, 24)
				if err != nil {
					t.Errorf("%s turn %d on instance %d: %v", c.id, c.turns, inst, err)
					return
				}
				c.inst, c.to, c.reason = inst, to, reason
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		var n [3]int
		for _, c := range convs {
			if redirected(c.reason) {
				n[c.inst]++
			}
		}
		for i, k := range n {
			if k >= 2 && (victim < 0 || k > n[victim]) {
				victim = i
			}
		}
	}
	var keep []*conv // last served by the victim, redirected
	for _, c := range convs {
		if c.inst == victim && redirected(c.reason) {
			keep = append(keep, c)
		}
	}

	// Requests in flight on the victim when it dies (held by the replicas
	// until their client goes away), then the kill.
	const inflight = 4
	errs := make(chan error, inflight)
	for i := range inflight {
		c := &conv{id: fmt.Sprint("doomed-", i), prompt: "System: write a long story.\n"}
		go func() { _, _, err := c.turn(ins[victim].url, 24); errs <- err }()
	}
	waitFor(t, func() bool {
		var info router.ReplicasInfo
		if !getJSON(ins[victim].url+"/replicas", &info) {
			return false
		}
		var n int64
		for _, r := range info.Replicas {
			n += r.InflightRequests
		}
		return n == inflight
	})
	ins[victim].kill()
	for range inflight {
		err := <-errs
		var op *net.OpError
		switch {
		case err == nil:
			t.Error("a request in flight on the killed instance succeeded")
		case !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.As(err, &op):
			t.Errorf("a request in flight on the killed instance: %v, want a connection error", err)
		}
	}

	var alive []*instance
	for i, in := range ins {
		if i != victim {
			alive = append(alive, in)
		}
	}
	for _, in := range alive {
		waitFor(t, func() bool {
			var info router.ReplicasInfo
			return getJSON(in.url+"/replicas", &info) && info.Cluster != nil && countAlive(info) == 1
		})
	}
	// Every conversation's next turn on the survivors, one at a time with a
	// short think time (no load to redirect for: a release reaches the other
	// instance a UDP hop after the answer, which a client with no think time
	// can overtake), those to check first (no traffic routed since that
	// could make a router believe their cache evicted).
	kept := 0
	slices.SortStableFunc(convs, func(a, b *conv) int {
		return cmp.Compare(btoi(!slices.Contains(keep, a)), btoi(!slices.Contains(keep, b)))
	})
	for _, c := range convs {
		time.Sleep(20 * time.Millisecond)
		inst := int((ring.HashString(fmt.Sprint(c.id, "/", c.turns)) >> 7) % 2)
		prev := *c
		to, reason, err := c.turn(alive[inst].url, 24)
		if err != nil {
			t.Errorf("%s turn %d after the kill: %v", c.id, c.turns, err)
			continue
		}
		if prev.inst == victim && redirected(prev.reason) {
			if to != prev.to {
				t.Errorf("%s: its last turn was redirected to %s by the killed instance; the next went to %s (%s)", c.id, prev.to, to, reason)
			} else {
				kept++
			}
		}
	}
	t.Logf("killed instance %d: %d requests in flight failed; %d conversations it had redirected kept their replica (of %d)", victim, inflight, kept, len(keep))
}
