#!/usr/bin/env bash
# The embedded NLI verifier (issue #28's candidate recipe, docs/training.md#nli-verifier): all-MiniLM-L6-v2 with a
# fresh 3-way head, phase 1 on every NLI source + FEVER-family pairs (≤ 800 per source and label, one epoch), phase 2
# on the claim–evidence sources in full (two epochs); phase 2 installs itself as the embedded nli_verifier. ≈ 30 min
# on 2 idle CPU cores (16 + 13), minutes on a GPU; each phase resumes if interrupted. Needs `veracity prep` first.
# The earlier three-stage recipe from the ms-marco cross-encoder (configs/train/nli_minilm_cpu{,_stage2,_stage3}.yaml,
# 3.5 h here) is kept as the comparison row of docs/results.md#nli-verifier.
set -euo pipefail
cd "$(dirname "$0")/.."
veracity=${VERACITY:-.venv/bin/veracity}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
for recipe in nli_minilm_l6_cpu nli_minilm_l6_cpu_phase2; do
  "$veracity" train nli --config "configs/train/$recipe.yaml"
done
