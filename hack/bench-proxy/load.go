package main

import (
	"bufio"
	"bytes"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// target is where a round sends its requests: the replicas directly (the
// client picks one by the conversation's hash), or a proxy process whose
// CPU time is read from /proc/PID/stat.
type target struct {
	name string
	urls []string // direct: the replicas; a proxy: its one address
	pid  int      // 0: no proxy (direct)
	tr   *http.Transport
}

func (t *target) url(conv int) string {
	if len(t.urls) == 1 {
		return t.urls[0]
	}
	h := fnv.New32a()
	fmt.Fprint(h, conv)
	return t.urls[h.Sum32()%uint32(len(t.urls))]
}

// mode is one kind of traffic.
type mode struct {
	name   string
	conns  int
	stream bool
	gapUS  int // stream event spacing (relay-delay mode), 0: none
}

// sample is what one round of one mode against one target measured.
type sample struct {
	reqs      int
	seconds   float64
	cpuUS     float64   // the proxy's CPU time over the round, µs
	latencies []float64 // per request, ms
	relays    []float64 // per streamed event: arrival minus the replica's write, µs
	errors    int
}

// bodies are 1 KiB chat requests, one per conversation.
func bodies(n int, stream bool) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		head := fmt.Sprintf(`{"model":"bench","max_tokens":8,"stream":%t,"messages":[{"role":"system","content":"You are a terse assistant."},{"role":"user","content":"conversation %d: `, stream, i)
		tail := `"}]}`
		pad := strings.Repeat("x", max(0, 1024-len(head)-len(tail)))
		out[i] = []byte(head + pad + tail)
	}
	return out
}

const conversations = 256

// round runs one mode against one target for d.
func round(t *target, m mode, d time.Duration) sample {
	bs := bodies(conversations, m.stream)
	cpu0 := cpuTicks(t.pid)
	var next atomic.Int64
	var mu sync.Mutex
	var s sample
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for range m.conns {
		wg.Go(func() {
			var lat, rel []float64
			errs := 0
			for time.Now().Before(deadline) {
				conv := int(next.Add(1)) % conversations
				t0 := time.Now()
				if err := t.do(conv, bs[conv], m, &rel); err != nil {
					errs++
					continue
				}
				lat = append(lat, float64(time.Since(t0).Microseconds())/1000)
			}
			mu.Lock()
			s.latencies = append(s.latencies, lat...)
			s.relays = append(s.relays, rel...)
			s.errors += errs
			mu.Unlock()
		})
	}
	wg.Wait()
	s.seconds = time.Since(start).Seconds()
	s.reqs = len(s.latencies)
	s.cpuUS = float64(cpuTicks(t.pid)-cpu0) * 1e6 / clockTicks
	return s
}

// do sends one request and reads its whole answer.
func (t *target) do(conv int, body []byte, m mode, relays *[]float64) error {
	req, _ := http.NewRequest(http.MethodPost, t.url(conv)+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-conversation-id", "bench-"+strconv.Itoa(conv))
	if m.gapUS > 0 {
		req.Header.Set("x-bench-gap", strconv.Itoa(m.gapUS))
	}
	resp, err := t.tr.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if m.gapUS == 0 {
		_, err = io.Copy(io.Discard, resp.Body)
	} else {
		err = readEvents(resp.Body, relays)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return err // an answer cut short is an error, not a fast request
}

// readEvents reads a stream whose events carry "t": the replica's write
// time (ns), recording each event's delay on arrival, until the end of
// the body (nil) or a read error.
func readEvents(body io.Reader, relays *[]float64) error {
	br := bufio.NewReader(body)
	for {
		line, err := br.ReadSlice('\n')
		now := time.Now().UnixNano()
		if i := bytes.Index(line, []byte(`{"t":`)); i >= 0 {
			rest := line[i+5:]
			if j := bytes.IndexByte(rest, ','); j > 0 {
				if sent, perr := strconv.ParseInt(string(rest[:j]), 10, 64); perr == nil {
					*relays = append(*relays, float64(now-sent)/1000)
				}
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times (100 on Linux).
const clockTicks = 100

// cpuTicks is utime+stime of pid (all its threads), 0 for pid 0.
func cpuTicks(pid int) int64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces): state is 3rd.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func median(xs []float64) float64 { return quantile(xs, 0.5) }
