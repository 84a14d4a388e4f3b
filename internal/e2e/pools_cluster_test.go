package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/discovery"
	"github.com/llm-ring/llm-ring/internal/model"
	"github.com/llm-ring/llm-ring/internal/replica"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/router"
)

// TestGossipPerPool (issue 23): two routers with gossip in front of two
// replicas that both serve two models. A conversation of model A routed
// by one router is learned by the other's pool of model A, and not by its
// pool of model B (the same replicas, another model's cache); and the
// other way round.
func TestGossipPerPool(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	host, err := replica.NewHost(replica.Options{Model: model.DefaultConfig(), Speed: 200, Models: []string{"model-a", "model-b"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close() })
	var rs []replicaset.Replica
	for i := range 2 {
		name := fmt.Sprint("ab-", i)
		r, err := host.Add(name, 0)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go replica.Serve(ctx, ln, r)
		rs = append(rs, replicaset.Replica{Name: name, URL: "http://" + ln.Addr().String(),
			Models: []replicaset.Model{{Name: "model-a"}, {Name: "model-b"}}})
	}
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, bytes.Repeat([]byte{7}, 32), 0o600); err != nil {
		t.Fatal(err)
	}
	seed := fmt.Sprint("127.0.0.1:", freePort(t))
	var rts []*router.Router
	var urls []string
	for i := range 2 {
		cfg, err := config.Load("../../config/router.yaml")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Discovery.Static = rs
		bind := seed
		if i > 0 {
			bind = fmt.Sprint("127.0.0.1:", freePort(t))
		}
		cfg.Cluster = config.Cluster{Mode: config.ClusterGossip, Bind: bind,
			Peers:      config.ClusterPeers{Mode: config.ClusterPeersStatic, Static: []string{seed}},
			SecretFile: key, SyncInterval: config.Duration(time.Second), FlushInterval: config.Duration(5 * time.Millisecond)}
		rt, err := router.New(router.Options{Config: cfg, NodeName: fmt.Sprint("router-", i)})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go rt.Serve(ctx, ln, discovery.Static(rs))
		rts, urls = append(rts, rt), append(urls, "http://"+ln.Addr().String())
	}
	memory := func(rt *router.Router, model string) int {
		p := rt.Pools().Pool(model)
		if p == nil {
			return -1
		}
		return p.Table().Status().Memory
	}
	waitE2E(t, "both routers see both pools and a peer", func() bool {
		for _, rt := range rts {
			if memory(rt, "model-a") != 0 || memory(rt, "model-b") != 0 {
				return false
			}
			if st := rt.Pools().Pool("model-a").Table().Status(); len(st.Replicas) != 2 {
				return false
			}
		}
		resp, err := http.Get(urls[1] + "/replicas")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return strings.Contains(b.String(), `"alive": true`)
	})
	post := func(url, model, conv string) {
		t.Helper()
		body := fmt.Sprintf(`{"model":%q,"max_tokens":4,"messages":[{"role":"user","content":"conversation %s"}]}`, model, conv)
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("x-conversation-id", conv)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s: %d", model, conv, resp.StatusCode)
		}
	}
	post(urls[0], "model-a", "c-1")
	waitE2E(t, "router-1's pool model-a learns router-0's conversation", func() bool { return memory(rts[1], "model-a") == 1 })
	post(urls[1], "model-b", "c-2")
	waitE2E(t, "router-0's pool model-b learns router-1's conversation", func() bool { return memory(rts[0], "model-b") == 1 })
	time.Sleep(100 * time.Millisecond) // anything misapplied would have arrived by now
	for i, rt := range rts {
		if a, b := memory(rt, "model-a"), memory(rt, "model-b"); a != 1 || b != 1 {
			t.Errorf("router-%d remembers %d conversations in model-a and %d in model-b, want 1 and 1", i, a, b)
		}
		if n := memory(rt, ""); n != 0 {
			t.Errorf("router-%d's catch-all pool remembers %d conversations", i, n)
		}
	}
}

func waitE2E(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", what)
		}
	}
}
