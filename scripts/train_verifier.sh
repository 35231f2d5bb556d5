#!/usr/bin/env bash
# The embedded NLI verifier, all stages in order (each resumes if interrupted; the last one installs itself as the
# embedded nli_verifier). ≈ 2.5 h on 2 CPU cores, minutes on a GPU. Needs `veracity prep` first.
set -euo pipefail
cd "$(dirname "$0")/.."
veracity=${VERACITY:-.venv/bin/veracity}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
for recipe in nli_minilm_cpu nli_minilm_cpu_stage2 nli_minilm_cpu_stage3; do
  "$veracity" train nli --config "configs/train/$recipe.yaml"
done
