#!/usr/bin/env bash
# The embedded NLI verifier (issue #28's recipe, docs/training.md#nli-verifier): the ms-marco MiniLM-L12 cross-encoder
# (the embedded reranker, dequantized) with a fresh 3-way head; phase 1 on every NLI source + FEVER-family pairs
# (<= 500 per source and label, one epoch; three starts compared on calib at step 200, the best finished), phase 2 on
# the claim–evidence sources in full, SufficientFacts-VitaminC five times (one epoch, its last step); length-grouped
# batches in shuffled order; phase 2 installs itself as the embedded nli_verifier. About 55 min on 2 idle CPU cores
# (docs/figures.yaml verifier_training_min; phases of 37-46 + 15-17 min in the runs measured; the configs set
# use_cpu); each phase resumes if interrupted. Needs `veracity prep` first.
# Then, into the model card of the run and of the installed copy (`veracity models card`): the full dev splits (the
# command of docs/results.md#nli-verifier), this invocation's training time, and the CPU backends (bench/r2vc.py).
# Earlier recipes stay as configs and comparison rows of docs/experiment-log.md#nli-verifier: the two-phase
# MiniLM-L6 one (configs/train/nli_minilm_l6_cpu{,_phase2}.yaml, 29 min) and the three-stage one
# (nli_minilm_cpu{,_stage2,_stage3}).
set -euo pipefail
cd "$(dirname "$0")/.."
veracity=${VERACITY:-.venv/bin/veracity}
python=${PYTHON:-.venv/bin/python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
start=$(date +%s)
for recipe in nli_minilm_l12_cpu nli_minilm_l12_cpu_phase2; do
  "$veracity" train nli --config "configs/train/$recipe.yaml"
done
seconds=$(( $(date +%s) - start ))
model=runs/train/nli_l12_phase2/model eval=runs/eval/nli_l12_phase2
"$veracity" eval checkpoint --kind nli --nli_model "$model" --nli_backend torch \
  --sources fever_symmetric vitaminc sufficient_facts_vitaminc climate_fever_evidence --output_dir "$eval"
printf 'Both phases in %d min %02d s wall time (this invocation of `bash scripts/train_verifier.sh`, %s threads, %s; a\nphase finished by an earlier invocation counts 0 here).\n' \
  $((seconds / 60)) $((seconds % 60)) "$OMP_NUM_THREADS" "$(date -u +%Y-%m-%d)" > "$eval/training_time.md"
"$python" bench/r2vc.py --nli_model "$model" > "$eval/backends.md"
for folder in "$model" "$("$veracity" models resolve nli_verifier)"; do
  "$veracity" models card "$folder" --section "Full dev splits" "$eval/results.md" \
    --section "Training time" "$eval/training_time.md" --section "CPU backends" "$eval/backends.md"
done
