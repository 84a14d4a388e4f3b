package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRouterConfigErrors: a bad configuration stops the router at startup
// with a non-zero exit code and the key's name.
func TestRouterConfigErrors(t *testing.T) {
	ex, err := os.ReadFile("../../config/router.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"router"}, 2, "--config is required"},
		{[]string{"router", "--config", filepath.Join(dir, "nope.yaml")}, 1, "no such file"},
		{[]string{"router", "--config", write("missing.yaml", strings.Replace(string(ex), "virtual_nodes: 160", "", 1))}, 1, "virtual_nodes: missing"},
		{[]string{"router", "--config", write("unknown.yaml", string(ex)+"colour: blue\n")}, 1, "colour: unknown key"},
		{[]string{"router", "--config", write("bad.yaml", strings.Replace(string(ex), "max_attempts: 3", "max_attempts: 0", 1))}, 1, "upstream.max_attempts: must be ≥ 1"},
		{[]string{"router", "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"router", "--config", filepath.Join(dir, "nope.yaml"), "--log-flush", "-1s"}, 2, "--log-flush must be ≥ 0, got -1s"},
		{[]string{"epp", "--config", filepath.Join(dir, "nope.yaml"), "--log-flush", "-5ms"}, 2, "--log-flush must be ≥ 0, got -5ms"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tt.args, &stdout, &stderr)
		if code != tt.code || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d with %q", tt.args, code, stderr.String(), tt.code, tt.want)
		}
	}
}

// TestRouterStartsAndStops: a valid configuration serves until the context
// ends (SIGTERM in production), then exits 0.
func TestRouterStartsAndStops(t *testing.T) {
	ex, _ := os.ReadFile("../../config/router.yaml")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	aln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr, adminAddr := ln.Addr().String(), aln.Addr().String()
	ln.Close()
	aln.Close()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "token"), []byte("t0ken\n"), 0o600)
	cfg := strings.Replace(string(ex), `listen: "127.0.0.1:8080"`, `listen: "`+addr+`"`, 1)
	cfg = strings.Replace(cfg, "shutdown_grace: 30s", "shutdown_grace: 2s", 1)
	cfg = strings.Replace(cfg, `  listen: ""`, `  listen: "`+adminAddr+`"`, 1)
	cfg = strings.Replace(cfg, `  token_file: ""`, `  token_file: "`+filepath.Join(dir, "token")+`"`, 1)
	path := filepath.Join(dir, "router.yaml")
	os.WriteFile(path, []byte(cfg), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"router", "--config", path}, &stdout, &stderr) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("router never ready: %v %s", err, stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Ready means one replica is known; the models poll brings the rest
	// (at its own pace on a loaded machine): wait for all three.
	for {
		resp, err := http.Get("http://" + addr + "/replicas")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if bytes.Contains(b, []byte(`"llm-0"`)) && bytes.Contains(b, []byte(`"llm-1"`)) && bytes.Contains(b, []byte(`"llm-2"`)) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the router never listed its three replicas: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The admin API answers on its own address with the token, never on the client's.
	for _, tt := range []struct {
		addr, token string
		code        int
	}{{adminAddr, "t0ken", 200}, {adminAddr, "", 401}, {addr, "t0ken", 404}} {
		req, _ := http.NewRequest("GET", "http://"+tt.addr+"/admin/policy", nil)
		if tt.token != "" {
			req.Header.Set("Authorization", "Bearer "+tt.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != tt.code {
			t.Errorf("GET /admin/policy on %s with token %q: %v %v, want %d", tt.addr, tt.token, err, resp, tt.code)
		} else {
			resp.Body.Close()
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), `"msg":"replicas_changed"`) || !strings.Contains(stdout.String(), `"llm-0","llm-1","llm-2"`) {
		t.Errorf("no replicas_changed event with the names in the log:\n%s", stdout.String())
	}
}
