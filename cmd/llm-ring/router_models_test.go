package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm-ring/llm-ring/internal/config"
	"github.com/llm-ring/llm-ring/internal/discovery"
	"github.com/llm-ring/llm-ring/internal/replicaset"
)

// The router's replica source carries each replica's models as
// discovery.model_source says: polled (replicas), as configured (static),
// unknown (none).
func TestDiscoverySourceModels(t *testing.T) {
	var polls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		polls.Add(1)
		if r.URL.Path != "/v1/models" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"qwen-0.5b"},{"id":"sql-lora","parent":"qwen-0.5b"}]}`))
	}))
	defer srv.Close()
	ex, err := os.ReadFile("../../config/router.yaml")
	if err != nil {
		t.Fatal(err)
	}
	base := strings.NewReplacer(`"http://127.0.0.1:8081"`, `"`+srv.URL+`"`, `"http://127.0.0.1:8082"`, `"`+srv.URL+`/b"`,
		`url: "http://127.0.0.1:8083"}`, `url: "http://127.0.0.1:8083", models: [{name: configured}]}`).Replace(string(ex))
	polled := []replicaset.Model{{Name: "qwen-0.5b"}, {Name: "sql-lora", Parent: "qwen-0.5b"}}
	configured := []replicaset.Model{{Name: "configured"}}
	for _, tc := range []struct {
		source string
		want   [3][]replicaset.Model // llm-0, llm-1, llm-2
	}{
		{"replicas", [3][]replicaset.Model{polled, nil, configured}}, // llm-1's URL answers 404: unknown
		{"static", [3][]replicaset.Model{nil, nil, configured}},
	} {
		t.Run(tc.source, func(t *testing.T) {
			cfg, err := config.Parse([]byte(strings.Replace(base, "model_source: replicas ", "model_source: "+tc.source+" ", 1)))
			if err != nil {
				t.Fatal(err)
			}
			src, err := discoverySource(cfg, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			sets := make(chan []replicaset.Replica, 100)
			go func() { _ = src.Run(ctx, func(rs []replicaset.Replica) { sets <- rs }) }()
			before := polls.Load()
			timeout := time.After(30 * time.Second)
			for {
				select {
				case rs := <-sets:
					ok := len(rs) == 3
					for i := 0; ok && i < 3; i++ {
						ok = (rs[i].Models == nil) == (tc.want[i] == nil) && slices.Equal(rs[i].Models, tc.want[i])
					}
					if !ok {
						continue
					}
					if tc.source == "static" && polls.Load() != before {
						t.Fatal("model_source static polled a replica")
					}
					return
				case <-timeout:
					t.Fatalf("never published the models %v", tc.want)
				}
			}
		})
	}
	// none: every replica's models unknown, and a static list of models is refused.
	doc := strings.Replace(base, "model_source: replicas ", "model_source: none ", 1)
	if _, err := config.Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), "discovery.static[2].models") {
		t.Fatalf("none with configured models: %v", err)
	}
	for _, source := range []string{"none", "static"} {
		cfg, err := config.Parse([]byte(strings.Replace(string(ex), "model_source: replicas ", "model_source: "+source+" ", 1)))
		if err != nil {
			t.Fatal(err)
		}
		src, err := discoverySource(cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := src.(discovery.Static); !ok {
			t.Errorf("%s: the source is a %T, want the static list itself (nothing polled)", source, src)
		}
	}
}
