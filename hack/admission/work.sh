#!/bin/bash
# The work-limit measurements of docs/notes/admission.md ("A capacity in time: work_share", "Session
# of 2026-12-03"): per preset and workload, rates at about 1x/2x/3x its capacity, both engines,
# every policy, seeds 1-3: no admission, admission with the work term off (the defaults), and
# work_share = W (saturated when a replica's in-flight tokens at its learned prefill rate exceed
# W x the 1 s SLO) for each W in $SHARES; and each variant NAME:KEY=V[,KEY=V...] in $VARIANTS
# (folder -NAME, each KEY=V passed as --admission-set KEY=V).
# Usage: LR=path/to/llm-ring OUT=/tmp/adm-work hack/admission/work.sh; then
#        python3 hack/admission/share.py /tmp/adm-work
# Smaller runs: POLICIES=round-robin,cache-aware,mod-n SEEDS=1 CASES=... ENGS=...; NOBASE=1 skips
# the noadm and tc0 folders.
set -e
LR=${LR:-llm-ring}
OUT=${OUT:-/tmp/adm-work}
ENGS=${ENGS:-llamacpp vllm}
SHARES=${SHARES-2 4 8}
VARIANTS=${VARIANTS:-}
POLICIES=${POLICIES:-all}
SEEDS=${SEEDS:-1,2,3}
SD=${SD:-20s}
mkdir -p "$OUT"
cd "$OUT"
# preset:workload:rates
CASES=${CASES:-"vllm-h100-8b:low-sharing:32,64,96 vllm-l4-qwen0.5b:low-sharing:48,96,144 vllm-h100-8b:shared-prefix:16,32,48 vllm-l4-qwen0.5b:shared-prefix:24,48,72"}
for ENG in $ENGS; do
for c in $CASES; do
  IFS=: read -r pr wl rates <<< "$c"
  C="--engine $ENG --replica-preset $pr --replicas 3 --workload $wl --rates $rates --stage-duration $SD --warmup 5s --policies $POLICIES --seeds $SEEDS --slo-ttft 1s --force --set predictive.slots=256 --workers 1 --analyze=false"
  A="--admission --admission-tenants 4 --admission-flood-share 0.5 --admission-high-share 0.2 --admission-set service_floor=500ms"
  tag=$ENG-$pr-$wl
  [ -n "$NOBASE" ] || $LR sim $C --out-dir $tag-noadm > /dev/null 2>&1 || echo FAIL $tag-noadm
  [ -n "$NOBASE" ] || $LR sim $C $A --out-dir $tag-tc0 > /dev/null 2>&1 || echo FAIL $tag-tc0
  for w in $SHARES; do
    $LR sim $C $A --admission-set work_share=$w --out-dir $tag-work$w > /dev/null 2>&1 || echo FAIL $tag-work$w
  done
  for v in $VARIANTS; do
    name=${v%%:*}; sets=""
    IFS=, read -ra kvs <<< "${v#*:}"
    for kv in "${kvs[@]}"; do sets="$sets --admission-set $kv"; done
    $LR sim $C $A $sets --out-dir $tag-$name > /dev/null 2>&1 || echo FAIL $tag-$name
  done
done
done
