#!/usr/bin/env bash
# bench-proxy.sh: llm-ring's router against a direct call and against
# HAProxy (consistent hashing with bounded loads) and a bare Go reverse
# proxy (net/http's server, httputil.ReverseProxy and the router's
# transport settings, a replica picked by a hash of x-conversation-id:
# the floor of what net/http costs, hack/bench-proxy/bare.go), the same
# bare proxy on the router's own HTTP/1.1 client (bare-h1, internal/h1) on the same
# loopback traffic: 64 connections, 1 KiB POST bodies, three fast fake replicas,
# rounds alternated. Prints one table per mode (loaded / unloaded,
# streamed or not): throughput and its share of HAProxy's, CPU per proxied
# request (from /proc/PID/stat), latency and what each proxy adds over the
# direct call; for an unloaded stream, each event's relay delay.
#
#   hack/bench-proxy.sh [load flags...]   e.g. --rounds 5 --duration 5s
#
# Needs haproxy on PATH (Debian: apt-get install -y haproxy); without it
# the router is measured against the direct call only. BENCH_PORT (default
# 19380) is the first of ten loopback ports used. ROUTER_GOGC and
# ROUTER_PROCS, when set, are the router's GOGC and GOMAXPROCS (the other
# contestants keep Go's defaults). BENCH_NETHTTP_ROUTER=1 adds the same
# router on Go's Transport to the replicas (upstream.client: net/http).
# BENCH_BARE_OWN=1 adds bare-h1's handler on a minimal server loop of its
# own instead of net/http's (bare-own, hack/bench-proxy/own.go: a lower
# bound on what such a loop could cost, not a server).
# BENCH_ROUTER_B=BINARY adds another llm-ring binary's router on the same
# configuration as the target llm-ring-b (a before/after pair measured in
# the same rounds: build the other commit with go build -o BINARY);
# ROUTER_B_ENV, e.g. "GOGC=off GOMEMLIMIT=460MiB", is more environment for
# that router only (after ROUTER_GOGC and ROUTER_PROCS: it wins), so that
# BENCH_ROUTER_B may also be this binary under other runtime settings.
set -euo pipefail
cd "$(dirname "$0")/.."
port=${BENCH_PORT:-19380}
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/llm-ring" ./cmd/llm-ring
go build -o "$tmp/bench-proxy" ./hack/bench-proxy
r0=127.0.0.1:$((port + 1)) r1=127.0.0.1:$((port + 2)) r2=127.0.0.1:$((port + 3))
"$tmp/bench-proxy" replicas "$r0,$r1,$r2" &
pids+=($!)

# The router: config/router.yaml (llm-aware, its defaults) on the bench
# ports, without signal scraping (the fakes have no /metrics); its JSON
# request log goes to a file, as a deployment's would go to a collector.
sed -e "s#^listen: .*#listen: \"127.0.0.1:$port\"#" \
	-e "s#^  interval: 200ms#  interval: 0s#" \
	-e "s#http://127.0.0.1:8081#http://$r0#" -e "s#http://127.0.0.1:8082#http://$r1#" \
	-e "s#http://127.0.0.1:8083#http://$r2#" config/router.yaml >"$tmp/router.yaml"
env ${ROUTER_GOGC:+GOGC=$ROUTER_GOGC} ${ROUTER_PROCS:+GOMAXPROCS=$ROUTER_PROCS} "$tmp/llm-ring" router --config "$tmp/router.yaml" >"$tmp/router.log" 2>&1 &
pids+=($!)
router_pid=$!
targets=(--target "llm-ring=http://127.0.0.1:$port@$router_pid")
if [ -n "${BENCH_NETHTTP_ROUTER:-}" ]; then
	# The same router on Go's Transport to the replicas (upstream.client: net/http).
	sed -e "s#^listen: .*#listen: \"127.0.0.1:$((port + 7))\"#" -e "s#^  client: llm-ring .*#  client: net/http#" \
		"$tmp/router.yaml" >"$tmp/router-nethttp.yaml"
	grep -q "client: net/http" "$tmp/router-nethttp.yaml"
	env ${ROUTER_GOGC:+GOGC=$ROUTER_GOGC} "$tmp/llm-ring" router --config "$tmp/router-nethttp.yaml" >"$tmp/router-nethttp.log" 2>&1 &
	pids+=($!)
	targets+=(--target "llm-ring-nethttp=http://127.0.0.1:$((port + 7))@$!")
fi
if [ -n "${BENCH_ROUTER_B:-}" ]; then
	sed -e "s#^listen: .*#listen: \"127.0.0.1:$((port + 8))\"#" "$tmp/router.yaml" >"$tmp/router-b.yaml"
	# shellcheck disable=SC2086 # ROUTER_B_ENV is a list of assignments
	env ${ROUTER_GOGC:+GOGC=$ROUTER_GOGC} ${ROUTER_PROCS:+GOMAXPROCS=$ROUTER_PROCS} ${ROUTER_B_ENV:-} "$BENCH_ROUTER_B" router --config "$tmp/router-b.yaml" >"$tmp/router-b.log" 2>&1 &
	pids+=($!)
	targets+=(--target "llm-ring-b=http://127.0.0.1:$((port + 8))@$!")
fi
"$tmp/bench-proxy" bare "127.0.0.1:$((port + 5))" "http://$r0,http://$r1,http://$r2" &
pids+=($!)
targets+=(--target "bare-go=http://127.0.0.1:$((port + 5))@$!")
"$tmp/bench-proxy" bare-h1 "127.0.0.1:$((port + 6))" "http://$r0,http://$r1,http://$r2" &
pids+=($!)
targets+=(--target "bare-h1=http://127.0.0.1:$((port + 6))@$!")
if [ -n "${BENCH_BARE_OWN:-}" ]; then
	"$tmp/bench-proxy" bare-own "127.0.0.1:$((port + 9))" "http://$r0,http://$r1,http://$r2" &
	pids+=($!)
	targets+=(--target "bare-own=http://127.0.0.1:$((port + 9))@$!")
fi

if command -v haproxy >/dev/null; then
	cat >"$tmp/haproxy.cfg" <<EOF
global
	maxconn 4096
defaults
	mode http
	timeout connect 2s
	timeout client 60s
	timeout server 60s
	option http-keep-alive
	option http-no-delay
frontend bench
	bind 127.0.0.1:$((port + 4))
	default_backend replicas
backend replicas
	balance hdr(x-conversation-id)
	hash-type consistent
	hash-balance-factor 125
	server llm-0 $r0
	server llm-1 $r1
	server llm-2 $r2
EOF
	haproxy -db -f "$tmp/haproxy.cfg" &
	pids+=($!)
	targets+=(--target "haproxy=http://127.0.0.1:$((port + 4))@$!")
	haproxy -v | sed -n 1p # sed reads it all: head would end haproxy with SIGPIPE (pipefail)
else
	echo "haproxy not found: measuring the router against the direct call only" >&2
fi

for p in $port ${BENCH_ROUTER_B:+$((port + 8))}; do
	for _ in $(seq 50); do
		curl -sf "http://127.0.0.1:$p/readyz" >/dev/null && break
		sleep 0.1
	done
done
echo "go $(go env GOVERSION), $(nproc) CPU(s), $(date -u +%FT%TZ)"
"$tmp/bench-proxy" load --direct "http://$r0,http://$r1,http://$r2" "${targets[@]}" "$@"
echo
echo "router log: $(wc -l <"$tmp/router.log") lines"
