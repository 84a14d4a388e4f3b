package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// The fake replicas answer at once, like a llama.cpp server whose model
// takes no time: a chat completion with usage and timings, or a stream of
// a few chunks, the finish chunk with timings, the usage chunk when asked
// (stream_options.include_usage) and [DONE]. A request with the header
// x-bench-gap (microseconds) gets its stream's events that far apart, each
// carrying the time it was written (for the relay-delay measurement).

const answer = `{"id":"chatcmpl-bench","object":"chat.completion","created":1,"model":"bench",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"ok, routed."},"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":260,"completion_tokens":8,"total_tokens":268,"prompt_tokens_details":{"cached_tokens":200}},` +
	`"timings":{"cache_n":200,"prompt_n":60,"predicted_n":8,"prompt_ms":1.5,"predicted_ms":4.0}}`

var (
	chunk     = []byte("data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"word \"}}]}\n\n")
	finish    = []byte("data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"timings\":{\"cache_n\":200,\"prompt_n\":60,\"predicted_n\":8,\"prompt_ms\":1.5,\"predicted_ms\":4.0}}\n\n")
	usageOnly = []byte("data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":260,\"completion_tokens\":8,\"total_tokens\":268,\"prompt_tokens_details\":{\"cached_tokens\":200}}}\n\n")
	done      = []byte("data: [DONE]\n\n")
)

// events is the number of content chunks in a stream.
const events = 8

func serveReplica(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/health":
		io.WriteString(w, `{"status":"ok"}`)
		return
	case "/metrics":
		w.WriteHeader(http.StatusNotFound)
		return
	}
	body, _ := io.ReadAll(r.Body)
	if !bytes.Contains(body, []byte(`"stream":true`)) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
		io.WriteString(w, answer)
		return
	}
	gap, _ := strconv.Atoi(r.Header.Get("x-bench-gap"))
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	for i := range events {
		if gap > 0 {
			if i > 0 {
				time.Sleep(time.Duration(gap) * time.Microsecond)
			}
			fmt.Fprintf(w, "data: {\"t\":%d,\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w\"}}]}\n\n", time.Now().UnixNano())
		} else {
			w.Write(chunk)
		}
		fl.Flush()
	}
	w.Write(finish)
	if bytes.Contains(body, []byte(`"include_usage":true`)) {
		w.Write(usageOnly)
	}
	w.Write(done)
}

// runReplicas serves the fake replicas on addrs until the process is killed.
func runReplicas(addrs []string) error {
	errc := make(chan error, len(addrs))
	for _, a := range addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: http.HandlerFunc(serveReplica), IdleTimeout: time.Minute}
		go func() { errc <- srv.Serve(ln) }()
	}
	return <-errc
}
