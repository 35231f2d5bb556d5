#!/usr/bin/env bash
# Every R2VC table of docs/results.md, measured in one go on the embedded models (≈ 45 min on 2 CPU cores): the
# calibrators on the whole calib split (not a pipeline run), then the ablation recipes (configs/ablations/r2vc*.yaml,
# `veracity infer ablate`: each row a `veracity infer r2vc` run, each recipe one table). Needs `veracity prep`, the
# embedded verifier and the SFT / DPO generators of docs/training.md#sft-and-dpo (runs/train/{sft,dpo}_smollm2/
# merged). Generation is cached (runs/cache/r2vc_embedded.sqlite): the ablations replay the full run's candidates
# and only re-decide, so a rerun after a verifier change costs the verifier and the calibrator, not the generator.
set -euo pipefail
cd "$(dirname "$0")/.."
veracity=${VERACITY:-.venv/bin/veracity}
python=${PYTHON:-.venv/bin/python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
out=${OUT:-runs/r2vc}
n=${N:-60}            # claims per given-evidence source (FEVER-Symmetric, VitaminC dev)
n_cf=${N_CF:-40}      # Climate-FEVER dev claims (retrieved evidence)
n_ckpt=${N_CKPT:-20}  # claims per source for the generator checkpoints

echo "verifier: $("$veracity" models resolve nli_verifier)"  # the trained one in the cache, else the pre-built
"$veracity" train calibrator --config configs/train/calibrator_r2vc_embedded.yaml
"$veracity" train calibrator --config configs/train/calibrator_r2vc_nli_only.yaml  # the NLI-only rows' own

# the rows are recipes of `veracity infer ablate` (configs/ablations/r2vc*.yaml): each runs through the driver
# (resumable) into $out/<row> and the command prints and writes its table ($out/ablation*.md)
"$veracity" infer ablate --config configs/ablations/r2vc.yaml --output_dir "$out" --max_examples "$n"
"$veracity" infer ablate --config configs/ablations/r2vc_climate_fever.yaml --output_dir "$out" --max_examples "$n_cf"
"$veracity" infer ablate --config configs/ablations/r2vc_generators.yaml --output_dir "$out" \
  --max_examples "$n_ckpt"
"$python" - "$out/risk_control/metrics.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
print(f"\nrisk control: coverage {m['coverage']:.3f}, realised selective risk "
      f"{m['selective_risk'] if m.get('selective_risk') is not None else 'undefined (nothing answered)'}")
PY
