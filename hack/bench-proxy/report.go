package main

import (
	"fmt"
	"io"
)

// figures are one target's medians over the rounds of one mode.
type figures struct {
	rps, cpuPerReq, p50, p99, relay50, relay99 float64
	errors                                     int
}

func summarize(ss []sample) figures {
	var rps, cpu, p50, p99, r50, r99 []float64
	var f figures
	for _, s := range ss {
		rps = append(rps, float64(s.reqs)/s.seconds)
		if s.reqs > 0 {
			cpu = append(cpu, s.cpuUS/float64(s.reqs))
		}
		p50 = append(p50, quantile(s.latencies, 0.5))
		p99 = append(p99, quantile(s.latencies, 0.99))
		r50 = append(r50, quantile(s.relays, 0.5))
		r99 = append(r99, quantile(s.relays, 0.99))
		f.errors += s.errors
	}
	f.rps, f.cpuPerReq, f.p50, f.p99 = median(rps), median(cpu), median(p50), median(p99)
	f.relay50, f.relay99 = median(r50), median(r99)
	return f
}

// report prints one table per mode: throughput (and its share of
// haproxy's when there is a target of that name), the proxy's CPU per
// request, latency and what the proxy added over the direct call.
func report(w io.Writer, modes []mode, all targetList, res map[string]map[string][]sample) {
	for _, m := range modes {
		fig := map[string]figures{}
		for _, t := range all {
			fig[t.name] = summarize(res[m.name][t.name])
		}
		d, ha := fig["direct"], fig["haproxy"]
		fmt.Fprintf(w, "\n## %s (%d connection(s), streamed %t)\n\n", m.name, m.conns, m.stream)
		if m.gapUS > 0 {
			fmt.Fprintf(w, "| target | req/s | CPU µs/req | event relay p50 µs | p99 µs | added p50 µs | added p99 µs | errors |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
			for _, t := range all {
				f := fig[t.name]
				fmt.Fprintf(w, "| %s | %.0f | %.1f | %.1f | %.1f | %+.1f | %+.1f | %d |\n", t.name, f.rps, f.cpuPerReq,
					f.relay50, f.relay99, f.relay50-d.relay50, f.relay99-d.relay99, f.errors)
			}
			continue
		}
		fmt.Fprintf(w, "| target | req/s | share of haproxy | CPU µs/req | p50 ms | p99 ms | added p50 ms | added p99 ms | errors |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, t := range all {
			f := fig[t.name]
			share := "-"
			if ha.rps > 0 {
				share = fmt.Sprintf("%.2f", f.rps/ha.rps)
			}
			fmt.Fprintf(w, "| %s | %.0f | %s | %.1f | %.3f | %.3f | %+.3f | %+.3f | %d |\n", t.name, f.rps, share, f.cpuPerReq,
				f.p50, f.p99, f.p50-d.p50, f.p99-d.p99, f.errors)
		}
	}
}
