#!/bin/bash
# The token-share measurement of docs/notes/admission.md ("A token capacity from the KV pool"):
# per preset and workload, rates at about 1x/2x/3x its capacity, one engine ($ENG), every policy,
# seeds 1-3: no admission, admission with token_capacity off, and token_capacity = SHARE x the
# preset's KV pool (what token_share derives) for each SHARE.
# Usage: LR=path/to/llm-ring OUT=results/adm-share ENG=vllm hack/admission/share.sh; then
#        python3 hack/admission/stages.py results/adm-share/*
set -e
LR=${LR:-llm-ring}
OUT=${OUT:-results/adm-share}
ENG=${ENG:-vllm}
SHARES=${SHARES:-0.25 0.45}
SD=${SD:-20s}
mkdir -p "$OUT"
cd "$OUT"
# preset:kv_pool_tokens:workload:rates
CASES=${CASES:-"vllm-h100-8b:450560:low-sharing:32,64,96 vllm-l4-qwen0.5b:987000:low-sharing:48,96,144 vllm-h100-8b:450560:shared-prefix:16,32,48 vllm-l4-qwen0.5b:987000:shared-prefix:24,48,72"}
for c in $CASES; do
  IFS=: read -r pr kv wl rates <<< "$c"
  C="--engine $ENG --replica-preset $pr --replicas 3 --workload $wl --rates $rates --stage-duration $SD --warmup 5s --policies all --seeds 1,2,3 --slo-ttft 1s --force --set predictive.slots=256 --workers 1 --analyze=false"
  A="--admission --admission-tenants 4 --admission-flood-share 0.5 --admission-high-share 0.2 --admission-set service_floor=500ms"
  tag=$ENG-$pr-$wl
  $LR sim $C --out-dir $tag-noadm > /dev/null 2>&1 || echo FAIL $tag-noadm
  $LR sim $C $A --out-dir $tag-tc0 > /dev/null 2>&1 || echo FAIL $tag-tc0
  for sh in $SHARES; do
    tc=$(python3 -c "print(int($sh*$kv))")
    $LR sim $C $A --admission-set token_capacity=$tc --out-dir $tag-share$sh > /dev/null 2>&1 || echo FAIL $tag-share$sh
  done
done
