#!/bin/bash
# The band-limit measurement of docs/notes/admission.md ("Band limits"): the top band at a fixed
# 8/s, band 0 adding 0 / 24 / 56 / 88 per s, both engines, every policy, seeds 1-3.
# Usage: LR=path/to/llm-ring OUT=results/adm-bands hack/admission/run.sh; then
#        python3 hack/admission/bands.py results/adm-bands
set -e
LR=${LR:-llm-ring}
OUT=${OUT:-results/adm-bands}
mkdir -p "$OUT"
C="--replica-preset vllm-h100-8b --replicas 3 --workload low-sharing --stage-duration 20s --warmup 5s --policies all --seeds 1,2,3 --slo-ttft 1s --force --set predictive.slots=256 --admission --admission-set service_floor=500ms --workers 2 --analyze=false"
cd "$OUT"
for eng in llamacpp vllm; do
  $LR sim --engine $eng $C --rates 8 --admission-high-share 1 --out-dir $eng-alone > /dev/null 2>&1
  for tot in 32 64 96; do
    share=$(python3 -c "print(8/$tot)")
    for lim in none 0.6 0.4 0.2; do
      extra=""; [ $lim != none ] && extra="--admission-set band_limit=0:$lim"
      $LR sim --engine $eng $C --rates $tot --admission-high-share $share $extra --out-dir $eng-$tot-$lim > /dev/null 2>&1 || echo FAIL $eng $tot $lim
    done
  done
done
