#!/bin/bash
# The band-limit measurement of docs/notes/admission.md ("Band limits"): the top band at a fixed
# $TOP/s (8), band 0 adding the rest up to each of $TOTALS (32 64 96) per s, both engines, every
# policy, seeds 1-3, for each band-0 limit in $LIMS (none 0.6 0.4 0.2).
# Usage: LR=path/to/llm-ring OUT=results/adm-bands hack/admission/run.sh; then
#        python3 hack/admission/bands.py results/adm-bands
# Other settings: EXTRA (more sim flags for every run, e.g. "--admission-set work_model=prefill
# --admission-set work_share=0.2"), PRESET (vllm-h100-8b), WORKLOAD (low-sharing), ENGS
# (llamacpp vllm), POLICIES (all), WORKERS (2).
set -e
LR=${LR:-llm-ring}
OUT=${OUT:-results/adm-bands}
TOP=${TOP:-8}
TOTALS=${TOTALS:-32 64 96}
LIMS=${LIMS:-none 0.6 0.4 0.2}
ENGS=${ENGS:-llamacpp vllm}
C="--replica-preset ${PRESET:-vllm-h100-8b} --replicas 3 --workload ${WORKLOAD:-low-sharing} --stage-duration 20s --warmup 5s --policies ${POLICIES:-all} --seeds 1,2,3 --slo-ttft 1s --force --set predictive.slots=256 --admission --admission-set service_floor=500ms --workers ${WORKERS:-2} --analyze=false ${EXTRA:-}"
mkdir -p "$OUT"
cd "$OUT"
for eng in $ENGS; do
  $LR sim --engine $eng $C --rates $TOP --admission-high-share 1 --out-dir $eng-alone > /dev/null 2>&1 || echo FAIL $eng alone
  for tot in $TOTALS; do
    share=$(python3 -c "print($TOP/$tot)")
    for lim in $LIMS; do
      extra=""; [ $lim != none ] && extra="--admission-set band_limit=0:$lim"
      $LR sim --engine $eng $C --rates $tot --admission-high-share $share $extra --out-dir $eng-$tot-$lim > /dev/null 2>&1 || echo FAIL $eng $tot $lim
    done
  done
done
