#!/usr/bin/env bash
# Seed variance of the verifier recipe (issue #28): its two phases (configs/train/nli_minilm_l12_cpu.yaml, then
# …_phase2.yaml) with other training seeds (the head's init, batch order, dropout; phase 1's three starts use seeds
# S, S+1, S+2, so the default seeds are three apart; the pair selection stays seed_data 13), each scored on the full
# dev splits like the verifier table of docs/results.md#nli-verifier, then mean ± spread per dev set
# (bench/seed_spread.py) into runs/eval/verifier_seeds.md and the "Seed spread" section of the installed verifier's
# card (the recipe's seed 13: scripts/train_verifier.sh). Does not install.
# Usage: bash scripts/verifier_seeds.sh [seed ...]   (default: 13 16 19; ≈ 1 h a seed on 2 idle cores). A seed
# whose evaluation exists is not trained again (runs/eval/verifier_seed<seed>/metrics.json), so seed 13 can be the
# installed run's own evaluation: cp -r runs/eval/nli_l12_phase2 runs/eval/verifier_seed13.
# A phase-2 variant: VARIANT=name PHASE2_ARGS="--option value …" bash scripts/verifier_seeds.sh 16 19 trains phase 2
# with those options added into runs/train/verifier_seed<seed>/phase2_<name> and scores it into
# runs/eval/verifier_seed<seed>_<name> (the table: runs/eval/verifier_seeds_<name>.md; the card is left alone);
# a seed's phase 1 is trained once and shared by every variant.
set -euo pipefail
cd "$(dirname "$0")/.."
veracity=${VERACITY:-.venv/bin/veracity}
python=${PYTHON:-.venv/bin/python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
seeds=("$@"); [ ${#seeds[@]} -gt 0 ] || seeds=(13 16 19)
sources=(fever_symmetric vitaminc sufficient_facts_vitaminc climate_fever_evidence)
variant=${VARIANT:-} phase2_args=(${PHASE2_ARGS:-})
suffix=${variant:+_$variant}
evals=()
for seed in "${seeds[@]}"; do
  p1=runs/train/verifier_seed$seed/phase1 p2=runs/train/verifier_seed$seed/phase2$suffix
  eval=runs/eval/verifier_seed$seed$suffix
  if [ ! -f "$eval/metrics.json" ]; then
    start=$(date +%s)
    [ -f "$p1/COMPLETED" ] ||
      "$veracity" train nli --config configs/train/nli_minilm_l12_cpu.yaml --seed "$seed" --output_dir "$p1" --install false
    "$veracity" train nli --config configs/train/nli_minilm_l12_cpu_phase2.yaml --seed "$seed" --init "$p1/model" \
      --output_dir "$p2" --install false "${phase2_args[@]}"
    echo "seed $seed: trained in $(( ($(date +%s) - start) / 60 )) min"
    "$veracity" eval checkpoint --kind nli --nli_model "$p2/model" --nli_backend torch --sources "${sources[@]}" \
      --output_dir "$eval"
  fi
  evals+=("$eval/metrics.json")
done
"$python" bench/seed_spread.py "${evals[@]}" | tee "runs/eval/verifier_seeds$suffix.md"
[ -n "$variant" ] ||
  "$veracity" models card "$("$veracity" models resolve nli_verifier)" --section "Seed spread" runs/eval/verifier_seeds.md
