#!/usr/bin/env bash
# Live against simulated on the real engine (issue 20 §4; docs/notes/ollama.md):
# starts 3 Ollama servers (hack/ollama.sh's binary, the tiny model of
# hack/tinymodel, 4 slots, the multi-user cache, Ollama's own engine,
# OLLAMA_DEBUG=1 for the cache lines) and a router (engine: ollama, an admin
# API) on loopback, drives the profile's conversations through it with
# `llm-ring run --router` for each policy and seed, stops everything it
# started (by PID), fills the runs' cache columns from the servers' logs
# (hack/ollamacache: Ollama's answers do not say what was cached), analyses
# them, and simulates the same profile and seeds with the fitted preset.
#
#   bash hack/ollama-live.sh OUT [SEEDS]      # SEEDS: default 1-2
#
# OUT/live-cache/summary.md is the live table, OUT/sim/summary.md the
# simulated one. Ports 18900-18902, 18910 and 18919 must be free.
set -euo pipefail
out="${1:?usage: hack/ollama-live.sh OUT [SEEDS]}"
seeds="${2:-1-2}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
policies=round-robin,consistent,llm-aware,cache-aware,predictive
profile="$repo/internal/e2e/testdata/ollama-live.json"
bin="$(bash "$repo/hack/ollama.sh")"
mkdir -p "$out/logs" && out="$(cd "$out" && pwd)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

(cd "$repo" && go build -o "$out/llm-ring" ./cmd/llm-ring && go run ./hack/tinymodel -out "$out/tiny")
for i in 0 1 2; do
	OLLAMA_HOST=127.0.0.1:1890$i OLLAMA_MODELS="$out/models" HOME="$out" OLLAMA_DEBUG=1 OLLAMA_NUM_PARALLEL=4 \
		OLLAMA_MULTIUSER_CACHE=1 OLLAMA_NEW_ENGINE=1 OLLAMA_KEEP_ALIVE=1h OLLAMA_NOPRUNE=1 \
		"$bin" serve >"$out/logs/ollama-$i.log" 2>&1 &
	pids+=($!)
done
for i in 0 1 2; do
	until curl -sf "localhost:1890$i/api/version" >/dev/null; do sleep 0.2; done
done
(cd "$out/tiny" && OLLAMA_HOST=127.0.0.1:18900 HOME="$out" "$bin" create tiny -f Modelfile >/dev/null 2>&1)
for i in 0 1 2; do # load the model on every server before the runs
	curl -sf "localhost:1890$i/api/chat" -d '{"model":"tiny","messages":[{"role":"user","content":"warm up"}],"stream":false,"options":{"num_predict":4}}' >/dev/null
done

head -c 24 /dev/urandom | base64 >"$out/token" && chmod 600 "$out/token"
sed -e 's/^engine: llamacpp /engine: ollama /' \
	-e 's|listen: ""  |listen: "127.0.0.1:18919"|' -e "s|token_file: \"\"  |token_file: \"$out/token\"|" \
	-e 's|listen: "127.0.0.1:8080"|listen: "127.0.0.1:18910"|' \
	-e 's|127.0.0.1:8081|127.0.0.1:18900|;s|127.0.0.1:8082|127.0.0.1:18901|;s|127.0.0.1:8083|127.0.0.1:18902|' \
	"$repo/config/router.yaml" >"$out/router.yaml"
"$out/llm-ring" router --config "$out/router.yaml" >"$out/logs/router.log" 2>&1 &
pids+=($!)
until curl -sf localhost:18910/replicas >/dev/null; do sleep 0.2; done

"$out/llm-ring" run --router http://127.0.0.1:18910 --admin http://127.0.0.1:18919 --admin-token-file "$out/token" \
	--model tiny --speed 1 --replicas 3 --profile "$profile" --policies "$policies" --seeds "$seeds" \
	--out-dir "$out/live" --force
cleanup
pids=()

(cd "$repo" && go run ./hack/ollamacache -runs "$out/live" -out "$out/live-cache" \
	-log "llm-0=$out/logs/ollama-0.log" -log "llm-1=$out/logs/ollama-1.log" -log "llm-2=$out/logs/ollama-2.log")
"$out/llm-ring" analyze --results-dir "$out/live-cache" >"$out/live-table.md"
"$out/llm-ring" sim --replica-preset ollama-tiny-cpu-simtok --shared-cpu=false --profile "$profile" \
	--policies "$policies" --seeds "$seeds" --out-dir "$out/sim" --force >"$out/sim-table.md"
echo "live: $out/live-cache/per_run.csv, simulated: $out/sim/per_run.csv" >&2
