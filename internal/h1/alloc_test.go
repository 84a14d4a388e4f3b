package h1

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
)

// cannedServer answers every request on its connections with the same
// bytes, reading requests with a reused buffer: next to nothing of its own
// is allocated, so what AllocsPerRun counts is the transport's.
func cannedServer(tb testing.TB, answer string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					// head, then a body of the Content-Length the test sends
					n := 0
					for {
						line, err := br.ReadSlice('\n')
						if err != nil {
							return
						}
						if bytes.HasPrefix(line, []byte("Content-Length: ")) {
							for _, d := range bytes.TrimSpace(line[16:]) {
								n = n*10 + int(d-'0')
							}
						}
						if len(line) == 2 {
							break
						}
					}
					if _, err := br.Discard(n); err != nil {
						return
					}
					if _, err := io.WriteString(c, answer); err != nil {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// maxAllocsPerRoundTrip guards the transport's allocations per exchange
// (request written, answer's head parsed by http.ReadResponse, body read
// and closed): 16 measured when it was written, where net/http's Transport
// takes 42 on the same exchange (BenchmarkRoundTrip).
const maxAllocsPerRoundTrip = 16

func roundTrips(tb testing.TB, tr http.RoundTripper, url string) func() {
	body := []byte(strings.Repeat("x", 1024))
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", nil)
	req.Header.Set("Content-Type", "application/json")
	req.Header["User-Agent"] = []string{""}
	rd := bytes.NewReader(body)
	buf := make([]byte, 512)
	return func() {
		rd.Reset(body)
		req.Body, req.ContentLength = io.NopCloser(rd), int64(len(body))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			tb.Fatal(err)
		}
		for {
			if _, err := resp.Body.Read(buf); err != nil {
				break
			}
		}
		resp.Body.Close()
	}
}

const cannedAnswer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}"

// TestAllocsPerRoundTrip: a count, not a time, so it cannot be noisy.
func TestAllocsPerRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation count: not in -short")
	}
	url := cannedServer(t, cannedAnswer)
	rt := roundTrips(t, newTransport(), url)
	for range 20 {
		rt()
	}
	got := testing.AllocsPerRun(200, rt)
	t.Logf("%.0f allocations per round trip", got)
	if got > maxAllocsPerRoundTrip {
		t.Errorf("%.0f allocations per round trip, over the guard's %d", got, maxAllocsPerRoundTrip)
	}
}

// BenchmarkRoundTrip: one exchange with a fast server, h1 against Go's
// Transport (ns/op counts the canned server's share of the CPU too).
func BenchmarkRoundTrip(b *testing.B) {
	url := cannedServer(b, cannedAnswer)
	for _, c := range []struct {
		name string
		tr   http.RoundTripper
	}{{"h1", newTransport()}, {"net-http", &http.Transport{DisableCompression: true}}} {
		b.Run(c.name, func(b *testing.B) {
			rt := roundTrips(b, c.tr, url)
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				rt()
			}
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU is the process's CPU time (user + system, every thread), in
// ns: on a shared machine a steadier figure than ns/op.
func processCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
