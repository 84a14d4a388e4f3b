package testlog

import (
	"strings"
	"sync"
	"testing"
)

// Concurrent writes all arrive, whole (run with -race).
func TestBuffer(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				b.Write([]byte("line\n"))
			}
		})
	}
	wg.Wait()
	if n := strings.Count(b.String(), "line\n"); n != 800 || len(b.Bytes()) != 800*5 {
		t.Fatalf("%d lines, %d bytes; want 800, 4000", n, len(b.Bytes()))
	}
}
