#!/bin/bash
# Every criterion of issue 22 at each policy's own capacity (docs/notes/admission-criteria.md,
# "Every criterion at each policy's own capacity"): per engine, preset and workload, a
# no-admission sweep (ascending stages at the nominal capacity C_n x 0.25 ... 3, every policy);
# each policy's capacity C is the highest swept rate with goodput >= 90 % (own.py caps); then,
# per group of policies with the same C, rates C,2C,3C without admission and with each variant
# NAME:KEY=V[,KEY=V...] in $VARIANTS (each KEY=V passed as --admission-set KEY=V), the traffic
# flags of work.sh.
# Folders: OUT/ENG-PRESET-WORKLOAD-sweep, OUT/ENG-PRESET-WORKLOAD-cC-noadm, ...-cC-NAME.
# Usage: LR=path/to/llm-ring OUT=/tmp/own VARIANTS="pf02s:work_model=prefill,..." hack/admission/own.sh;
#        then python3 hack/admission/own.py OUT
# Smaller runs: POLICIES=round-robin,cache-aware SEEDS=1 CASES=... ENGS=...; SKIPSWEEP=1 reuses
# the sweep folders; NOBASE=1 skips the no-admission C,2C,3C folders (one more variant on
# folders already there: SKIPSWEEP=1 NOBASE=1 VARIANTS=... hack/admission/own.sh).
set -e
LR=${LR:-llm-ring}
OUT=${OUT:-/tmp/own}
ENGS=${ENGS:-llamacpp vllm}
VARIANTS=${VARIANTS:-}
POLICIES=${POLICIES:-all}
SEEDS=${SEEDS:-1,2,3}
SD=${SD:-20s}
OWNPY=$(cd "$(dirname "$0")" && pwd)/own.py
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in the checkout
mkdir -p "$OUT"
cd "$OUT"
# preset:workload:nominal capacity
CASES=${CASES:-"vllm-h100-8b:low-sharing:32 vllm-l4-qwen0.5b:low-sharing:48 vllm-h100-8b:shared-prefix:16 vllm-l4-qwen0.5b:shared-prefix:24"}
for ENG in $ENGS; do
for c in $CASES; do
  IFS=: read -r pr wl cn <<< "$c"
  base="--engine $ENG --replica-preset $pr --replicas 3 --workload $wl --stage-duration $SD --warmup 5s --seeds $SEEDS --slo-ttft 1s --force --set predictive.slots=256 --workers 1 --analyze=false"
  A="--admission --admission-tenants 4 --admission-flood-share 0.5 --admission-high-share 0.2 --admission-set service_floor=500ms"
  tag=$ENG-$pr-$wl
  if [ -z "$SKIPSWEEP" ]; then
    sweep=$(python3 -c "print(','.join(str(round($cn*f)) for f in (0.25,0.5,0.75,1,1.25,1.5,2,2.5,3)))")
    $LR sim $base --policies $POLICIES --rates $sweep --out-dir $tag-sweep > /dev/null 2>&1 || echo FAIL $tag-sweep
  fi
  # one line per capacity: C POLICY,POLICY...
  python3 "$OWNPY" caps $tag-sweep "$POLICIES" | while read -r cap pols; do
    rates=$cap,$((2 * cap)),$((3 * cap))
    C="$base --policies $pols --rates $rates"
    [ -n "$NOBASE" ] || $LR sim $C --out-dir $tag-c$cap-noadm > /dev/null 2>&1 || echo FAIL $tag-c$cap-noadm
    for v in $VARIANTS; do
      name=${v%%:*}; sets=""
      IFS=, read -ra kvs <<< "${v#*:}"
      for kv in "${kvs[@]}"; do sets="$sets --admission-set $kv"; done
      $LR sim $C $A $sets --out-dir $tag-c$cap-$name > /dev/null 2>&1 || echo FAIL $tag-c$cap-$name
    done
  done
done
done
