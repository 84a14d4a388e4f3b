// Command bench-proxy measures llm-ring's router against a direct call and
// against other proxies on the same loopback traffic (see
// hack/bench-proxy.sh, which starts everything):
//
//	bench-proxy replicas ADDR,ADDR,ADDR        serve fast fake replicas
//	bench-proxy bare ADDR URL,URL,URL          serve the bare Go reverse proxy (bare.go)
//	bench-proxy bare-h1 ADDR URL,URL,URL       the same on the router's HTTP/1.1 client
//	bench-proxy bare-own ADDR URL,URL,URL      bare-h1 on a minimal server loop (own.go)
//	bench-proxy load --direct URL,URL,URL --target NAME=URL@PID ...
//
// The load rounds alternate between the targets (the order rotates every
// round), so that a machine that gets busier or quieter during the run
// affects every target alike. Each mode is measured per round; the report
// gives the median over rounds.
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: bench-proxy replicas ADDRS | bare|bare-h1|bare-own ADDR URLS | load FLAGS")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "replicas":
		if len(os.Args) != 3 {
			err = fmt.Errorf("replicas: want one comma-separated list of addresses")
			break
		}
		err = runReplicas(strings.Split(os.Args[2], ","))
	case "bare", "bare-h1", "bare-own":
		if len(os.Args) != 4 {
			err = fmt.Errorf("%s: want an address and one comma-separated list of replica URLs", os.Args[1])
			break
		}
		if os.Args[1] == "bare-own" {
			err = runOwn(os.Args[2], strings.Split(os.Args[3], ","))
			break
		}
		err = runBare(os.Args[2], strings.Split(os.Args[3], ","), os.Args[1] == "bare-h1")
	case "load":
		err = runLoad(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (replicas, bare, bare-h1, bare-own, load)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-proxy:", err)
		os.Exit(1)
	}
}

type targetList []*target

func (l *targetList) String() string { return fmt.Sprint(len(*l)) }

// Set reads NAME=URL@PID.
func (l *targetList) Set(v string) error {
	name, rest, ok := strings.Cut(v, "=")
	url, pidS, ok2 := strings.Cut(rest, "@")
	pid, err := strconv.Atoi(pidS)
	if !ok || !ok2 || err != nil || pid <= 0 {
		return fmt.Errorf("target %q: want NAME=URL@PID", v)
	}
	*l = append(*l, &target{name: name, urls: []string{url}, pid: pid})
	return nil
}

func newTransport(conns int) *http.Transport {
	return &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, IdleConnTimeout: time.Minute, DisableCompression: true}
}

func runLoad(args []string) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	direct := fs.String("direct", "", "the replicas' URLs, comma-separated")
	var targets targetList
	fs.Var(&targets, "target", "a proxy: NAME=URL@PID (repeatable)")
	rounds := fs.Int("rounds", 3, "rounds per mode and target")
	loaded := fs.Duration("duration", 3*time.Second, "length of a loaded round")
	unloaded := fs.Duration("unloaded-duration", 2*time.Second, "length of an unloaded round")
	conns := fs.Int("conns", 64, "connections of the loaded modes")
	gap := fs.Int("gap-us", 1000, "spacing of stream events in the relay-delay mode, µs")
	only := fs.String("modes", "", "the modes to run, comma-separated (loaded, loaded-stream, unloaded, unloaded-stream); \"\": all")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *direct == "" || len(targets) == 0 {
		return fmt.Errorf("load: --direct and at least one --target are required")
	}
	all := append(targetList{{name: "direct", urls: strings.Split(*direct, ",")}}, targets...)
	for _, t := range all {
		t.tr = newTransport(*conns)
	}
	modes := []mode{
		{name: "loaded", conns: *conns},
		{name: "loaded-stream", conns: *conns, stream: true},
		{name: "unloaded", conns: 1},
		{name: "unloaded-stream", conns: 1, stream: true, gapUS: *gap},
	}
	if *only != "" {
		modes = slices.DeleteFunc(modes, func(m mode) bool { return !slices.Contains(strings.Split(*only, ","), m.name) })
	}
	res := map[string]map[string][]sample{}
	for _, m := range modes {
		res[m.name] = map[string][]sample{}
		d := *loaded
		if m.conns == 1 {
			d = *unloaded
		}
		for r := range *rounds {
			for i := range all {
				t := all[(i+r)%len(all)]
				round(t, m, 300*time.Millisecond) // warm the connections
				res[m.name][t.name] = append(res[m.name][t.name], round(t, m, d))
			}
		}
	}
	report(os.Stdout, modes, all, res)
	return nil
}
