package policy

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

var updateTraces = flag.Bool("update", false, "rewrite testdata/traces.golden")

// TestTraceGolden renders every registered policy's decisions on random
// views (3, 12 and 40 replicas: more than the trace keeps rows for) and
// compares the texts with testdata/traces.golden byte for byte: a change
// to how a trace is filled or written shows here first, before the
// simulator's goldens and the router's logs.
func TestTraceGolden(t *testing.T) {
	var out bytes.Buffer
	for _, name := range Names() {
		p := mustNew(t, name, nil)
		rng := rand.New(rand.NewPCG(11, 13))
		for _, n := range []int{3, 12, 40} {
			for i := range 6 {
				v := randomView(rng, n)
				req := randomRequest(rng, uint64(i), n)
				d := pickOnce(p, &req, v)
				fmt.Fprintf(&out, "=== %s n=%d #%d\n%s\n", name, n, i, d.Format())
			}
		}
	}
	path := filepath.Join("testdata", "traces.golden")
	if *updateTraces {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/policy -run TestTraceGolden -update)", err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		got, w := bytes.Split(out.Bytes(), []byte("\n")), bytes.Split(want, []byte("\n"))
		for i := range min(len(got), len(w)) {
			if !bytes.Equal(got[i], w[i]) {
				t.Fatalf("traces differ from %s at line %d:\n got: %s\nwant: %s", path, i+1, got[i], w[i])
			}
		}
		t.Fatalf("traces differ from %s: %d lines, want %d", path, len(got), len(w))
	}
}

// pickOnce runs one Pick into a fresh decision (the tests' shorthand).
func pickOnce(p Policy, req *Request, v *View) Decision {
	var d Decision
	p.Pick(req, v, &d)
	return d
}
