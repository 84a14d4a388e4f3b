package epp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/discovery"
	"github.com/llm-ring/llm-ring/internal/replicaset"
	"github.com/llm-ring/llm-ring/internal/router"
)

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

// TestActiveActiveGossip: two EPP instances, each with its pool in gossip
// mode as the proxy's instances run: a turn served (by a fallback) through
// the first is known to the second, which sends the next turn to where the
// conversation lives. Both are ready at once: no leader.
func TestActiveActiveGossip(t *testing.T) {
	var rs []replicaset.Replica
	for i := range 3 {
		s := httptest.NewServer(newLlamaFake(false))
		t.Cleanup(s.Close)
		rs = append(rs, replicaset.Replica{Name: fmt.Sprint("llm-", i), URL: s.URL})
	}
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, bytes.Repeat([]byte{7}, 32), 0o600); err != nil {
		t.Fatal(err)
	}
	seed := fmt.Sprint("127.0.0.1:", freePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var hs []*harness
	var urls []string
	for i := range 2 {
		bind := seed
		if i > 0 {
			bind = fmt.Sprint("127.0.0.1:", freePort(t))
		}
		cfg := testConfig(t, "llm-aware", func(c *config.Router) {
			c.Cluster = config.Cluster{Mode: config.ClusterGossip, Bind: bind,
				Peers:      config.ClusterPeers{Mode: config.ClusterPeersStatic, Static: []string{seed}},
				SecretFile: key, SyncInterval: config.Duration(time.Second), FlushInterval: config.Duration(5 * time.Millisecond)}
		})
		h := newHarnessNamed(t, cfg, Options{Fallbacks: 2}, fmt.Sprint("epp-", i))
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go h.rt.Serve(ctx, ln, discovery.Static(rs))
		hs = append(hs, h)
		urls = append(urls, "http://"+ln.Addr().String())
	}
	for _, u := range urls {
		waitFor(t, "the cluster", func() bool {
			var info router.ReplicasInfo
			resp, err := http.Get(u + "/replicas")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			if json.NewDecoder(resp.Body).Decode(&info) != nil || info.Cluster == nil || len(info.Replicas) != 3 {
				return false
			}
			alive := 0
			for _, p := range info.Cluster.Peers {
				if p.Alive {
					alive++
				}
			}
			return alive == 1
		})
	}
	c := hs[0].start(exchange{Path: chatPath, Body: chat("g", 1, false)})
	eps := strings.Split(c.Dest, ",")
	c.answer(200, "application/json", eps[1], answerJSON(0, 250, 8)) // a fallback served it
	c.close()
	served := endpointsOf(hs[0])[eps[1]]
	var dest string
	waitFor(t, "the second EPP to route turn 2 where turn 1 was served", func() bool {
		c2 := hs[1].start(exchange{Path: chatPath, Body: chat("g", 2, false)})
		dest, _, _ = strings.Cut(c2.Dest, ",")
		c2.cancel()
		return endpointsOf(hs[1])[dest] == served
	})
}
