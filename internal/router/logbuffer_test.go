package router

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// writes records each Write it is given, as one element.
type writes struct {
	mu sync.Mutex
	w  [][]byte
}

func (w *writes) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.w = append(w.w, bytes.Clone(p))
	return len(p), nil
}

func (w *writes) snapshot() (n int, all string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.w), string(bytes.Join(w.w, nil))
}

// An hour between flushes: only the size, another line or stop writes.
const noTick = time.Hour

func TestBufferedLogHoldsRequestLines(t *testing.T) {
	var out writes
	h, stop := NewBufferedLogHandler(&out, nil, noTick)
	lw := h.(*logHandler).w
	lw.line([]byte(`{"msg":"request","n":1}` + "\n"))
	lw.line([]byte(`{"msg":"request","n":2}` + "\n"))
	if n, _ := out.snapshot(); n != 0 {
		t.Fatalf("%d writes before any flush, want the request lines held", n)
	}
	// Any other line is written at once, after the request lines before it.
	slog.New(h).Warn("replica down", "replica", "llm-1")
	n, all := out.snapshot()
	if n != 1 {
		t.Fatalf("%d writes after a warning, want 1 (the two request lines and the warning together)", n)
	}
	lines := strings.Split(strings.TrimSuffix(all, "\n"), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], `"n":1`) || !strings.Contains(lines[1], `"n":2`) || !strings.Contains(lines[2], `"replica down"`) {
		t.Fatalf("lines out of order: %q", lines)
	}
	lw.line([]byte(`{"msg":"request","n":3}` + "\n"))
	stop()
	stop() // twice: harmless
	if n, all := out.snapshot(); n != 2 || !strings.HasSuffix(all, `{"msg":"request","n":3}`+"\n") {
		t.Fatalf("after stop: %d writes ending %q, want the third request line written", n, all[max(0, len(all)-40):])
	}
}

func TestBufferedLogWritesWhenFull(t *testing.T) {
	var out writes
	h, stop := NewBufferedLogHandler(&out, nil, noTick)
	defer stop()
	lw := h.(*logHandler).w
	line := []byte(`{"msg":"request","pad":"` + strings.Repeat("x", 1000) + `"}` + "\n")
	for range logFlushSize / len(line) {
		lw.line(line)
	}
	if n, _ := out.snapshot(); n != 0 {
		t.Fatalf("%d writes below %d bytes", n, logFlushSize)
	}
	lw.line(line)
	n, all := out.snapshot()
	if n != 1 || len(all) != (logFlushSize/len(line)+1)*len(line) {
		t.Fatalf("%d writes, %d bytes after passing %d bytes: want one write of every line", n, len(all), logFlushSize)
	}
}

func TestBufferedLogFlushesOnItsInterval(t *testing.T) {
	var out writes
	h, stop := NewBufferedLogHandler(&out, nil, time.Millisecond)
	defer stop()
	h.(*logHandler).w.line([]byte(`{"msg":"request"}` + "\n"))
	deadline := time.Now().Add(10 * time.Second)
	for {
		if n, _ := out.snapshot(); n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the request line was never flushed")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestUnbufferedLogWritesEachLine(t *testing.T) {
	var out writes
	h, stop := NewBufferedLogHandler(&out, nil, 0)
	defer stop()
	h.(*logHandler).w.line([]byte(`{"msg":"request"}` + "\n"))
	if n, _ := out.snapshot(); n != 1 {
		t.Fatalf("%d writes, want the line written at once with flushEvery 0", n)
	}
}

// TestBufferedLogConcurrent: request lines from many goroutines, other
// lines and the flusher at once — every line arrives once, whole, and
// each goroutine's lines in the order it logged them.
func TestBufferedLogConcurrent(t *testing.T) {
	var out writes
	h, stop := NewBufferedLogHandler(&out, nil, 50*time.Microsecond)
	lw, log := h.(*logHandler).w, slog.New(h)
	const goroutines, each = 8, 400
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				if i%50 == 0 {
					log.Info("other", "g", g, "i", i)
					continue
				}
				lw.line(fmt.Appendf(nil, `{"msg":"request","g":%d,"i":%d,"pad":"%s"}`+"\n", g, i, strings.Repeat("y", i)))
			}
		})
	}
	wg.Wait()
	stop()
	_, all := out.snapshot()
	last := make([]int, goroutines)
	for i := range last {
		last[i] = -1
	}
	lines := strings.Split(strings.TrimSuffix(all, "\n"), "\n")
	for _, l := range lines {
		var e struct{ G, I int }
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("a line is not whole JSON: %q (%v)", l[:min(len(l), 80)], err)
		}
		if e.I <= last[e.G] {
			t.Fatalf("goroutine %d: line %d after %d", e.G, e.I, last[e.G])
		}
		last[e.G] = e.I
	}
	if len(lines) != goroutines*each {
		t.Fatalf("%d lines, want %d", len(lines), goroutines*each)
	}
}
