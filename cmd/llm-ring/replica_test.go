package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestReplicaServedFlagsRejectBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"max-loras on llama.cpp", []string{"replica", "--max-loras", "2"}, "max_loras: 2 needs engine vllm or sglang"},
		{"negative adapter load", []string{"replica", "--engine", "vllm", "--adapter-load", "-1s"}, "adapter_load: must not be negative"},
		{"empty adapter name", []string{"replica", "--adapters", ":a"}, `--adapters: adapter ":a": the name is empty`},
		{"adapter base not served", []string{"replica", "--models", "a", "--adapters", "x:b"}, `"x"'s base model "b" is not among --models a`},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), tc.args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 and %q", tc.name, code, stderr.String(), tc.want)
		}
	}
}

// llm-ring replica --models a,b --adapters x:a: GET /v1/models lists
// them, an unknown model gets 404.
func TestReplicaServesModelsAndAdapters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"replica", "--listen", "127.0.0.1:0", "--engine", "vllm", "--quiet",
			"--models", "a,b", "--adapters", "x:a,y:b", "--max-loras", "1", "--adapter-load", "20ms"}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("no startup line: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	addr := regexp.MustCompile(`http://[0-9.:]+`).FindString(line)
	if addr == "" || !strings.Contains(line, "1 adapter slots") {
		t.Fatalf("startup line %q", line)
	}
	get := func(method, path, body string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, method, addr+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("GET", "/v1/models", ""); code != 200 || !strings.Contains(body, `"id":"x"`) || !strings.Contains(body, `"parent":"b"`) {
		t.Errorf("models: %d %s", code, body)
	}
	if code, body := get("POST", "/v1/completions", `{"model":"c","prompt":"hi","max_tokens":2}`); code != 404 || !strings.Contains(body, "NotFoundError") {
		t.Errorf("unknown model: %d %s", code, body)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d", code)
	}
}
