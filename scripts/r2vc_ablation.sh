#!/usr/bin/env bash
# Every R2VC table of docs/results.md, measured in one go on the embedded models: the calibrators on the whole calib
# split (not a pipeline run), then the ablation recipes (configs/ablations/r2vc*.yaml, `veracity infer ablate`: each
# row a `veracity infer r2vc` run, each recipe one table). From a fresh clone it first makes what the tables need and
# is missing: `veracity prep` and the training sets, the embedded verifier (scripts/train_verifier.sh, ≈ 1 h, only
# when the registry resolves none: the pre-built fallback of ../shared/models is this recipe's output on the train
# split, see its README), and the SFT / DPO generators of docs/training.md#sft-and-dpo (runs/train/{sft,dpo}_smollm2/merged, ≈ 36 min).
# Measured here: 58-100 min without generators or caches (the verifier in place), 2 min after a verifier change.
# Generation is cached (runs/cache/r2vc_embedded.sqlite): the ablations replay the full run's candidates and only
# re-decide, so a rerun after a verifier change costs the verifier and the calibrators, not the generator (move the
# earlier rows and calibrator runs aside first: a run refuses to resume under another verifier).
set -euo pipefail
cd "$(dirname "$0")/.."
veracity=${VERACITY:-.venv/bin/veracity}
python=${PYTHON:-.venv/bin/python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
out=${OUT:-runs/r2vc}
n=${N:-60}            # claims per given-evidence source (FEVER-Symmetric, VitaminC dev)
n_cf=${N_CF:-40}      # Climate-FEVER dev claims (retrieved evidence)
n_ckpt=${N_CKPT:-20}  # claims per source for the generator checkpoints

[ -f runs/prep/manifest.json ] || "$veracity" prep
[ -f runs/prep/training/manifest.json ] || "$veracity" prep training-sets  # written last
# the verifier of docs/results.md: the installed one, else the pre-built fallback; trained here only when neither exists
"$veracity" models resolve nli_verifier >/dev/null 2>&1 || bash scripts/train_verifier.sh
if [ ! -f runs/train/sft_smollm2/merged/config.json ]; then
  "$veracity" train sft --config configs/train/sft_lora_smollm2_cpu.yaml
  "$veracity" train merge --adapter runs/train/sft_smollm2/adapter --output_dir runs/train/sft_smollm2/merged
fi
if [ ! -f runs/train/dpo_smollm2/merged/config.json ]; then
  "$veracity" train dpo --config configs/train/dpo_lora_smollm2_cpu.yaml
  "$veracity" train merge --adapter runs/train/dpo_smollm2/adapter --base runs/train/dpo_smollm2/sft_merged \
    --output_dir runs/train/dpo_smollm2/merged
fi
echo "verifier: $("$veracity" models resolve nli_verifier)"
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
