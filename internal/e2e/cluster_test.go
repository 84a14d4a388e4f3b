package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/discovery"
	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/replica"
	"github.com/llm-ring/llm-ring/internal/ring"
	"github.com/llm-ring/llm-ring/internal/router"
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

// routers starts n routers in front of three simulated replicas; with
// gossip they form one cluster (static peers: the first instance's address,
// a test key). It returns the routers' URLs.
func routers(t *testing.T, n int, gossip bool) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	host, err := replica.NewHost(replica.Options{Model: model.DefaultConfig(), Speed: 200})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close() })
	var rs []discovery.Replica
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
		go replica.Serve(ctx, ln, r)
		rs = append(rs, discovery.Replica{Name: name, URL: "http://" + ln.Addr().String()})
	}
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, bytes.Repeat([]byte{7}, 32), 0o600); err != nil {
		t.Fatal(err)
	}
	seed := fmt.Sprint("127.0.0.1:", freePort(t))
	var urls []string
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
		rt, err := router.New(router.Options{Config: cfg, NodeName: fmt.Sprint("router-", i)})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go rt.Serve(ctx, ln, discovery.Static(rs))
		urls = append(urls, "http://"+ln.Addr().String())
	}
	for _, u := range urls {
		waitFor(t, func() bool {
			var info router.ReplicasInfo
			if !getJSON(u+"/replicas", &info) || len(info.Replicas) != 3 {
				return false
			}
			return !gossip || info.Cluster != nil && countAlive(info) == n-1
		})
	}
	return urls
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

// workload sends conv conversations of turns turns, users at once; turn k of
// conversation c goes to urls[hash(c, k) mod len(urls)]. It returns the
// follow-up hit rate (turns whose cache_n is ≥ 90 % of the previous turn's
// prompt) and the latencies.
func workload(t *testing.T, urls []string, convs, turns, users int, think time.Duration) (hit float64, lat []time.Duration) {
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
					// Think time: a user reads the answer before the next
					// turn. Gossip is batched for flush_interval (5 ms); a
					// turn sent sooner than that to another instance finds
					// the previous turn still in flight there (see the report).
					time.Sleep(think)
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
	s := append([]time.Duration(nil), lat...)
	for i := range s { // insertion sort: a few hundred values
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s[len(s)*95/100]
}

// TestActiveActiveRouters (issue 13): three router instances with real
// memberlist on loopback (static peers, a test key) form one cluster (each
// sees the other two alive in GET /replicas) and serve a workload whose
// turns are spread over them without an error. The hit rates and p95 are
// logged, not asserted: on this small live workload the follow-up hit rate
// of ONE router already varies by ±3 points between runs (the redirects
// depend on timing), so "within 1 point" cannot be asserted here; the
// simulator's sweep (internal/cluster/SWEEP.md) is where it is measured.
func TestActiveActiveRouters(t *testing.T) {
	if testing.Short() {
		t.Skip("live cluster test")
	}
	const convs, turns, users = 24, 5, 8
	for _, think := range []time.Duration{0, 50 * time.Millisecond} {
		one, latOne := workload(t, routers(t, 1, false), convs, turns, users, think)
		three, latThree := workload(t, routers(t, 3, true), convs, turns, users, think)
		alone, latAlone := workload(t, routers(t, 3, false), convs, turns, users, think)
		t.Logf("think %v: follow-up hit rate: one router %.1f%%, three with gossip %.1f%%, three without %.1f%%", think, one*100, three*100, alone*100)
		t.Logf("think %v: p95 latency: one %v, three with gossip %v, three without %v", think, p95(latOne), p95(latThree), p95(latAlone))
	}
}
