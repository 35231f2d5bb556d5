#!/usr/bin/env bash
# Every R2VC table of the README, measured in one go on the embedded models (≈ 45 min on 2 CPU cores): the
# calibrator on the whole calib split, then each row's `veracity infer r2vc` run, then the tables
# (scripts/r2vc_table.py). Needs `veracity prep`, the embedded verifier and the SFT / DPO generators of the README's
# Training section (runs/train/{sft,dpo}_smollm2/merged). Generation is cached (runs/cache/r2vc_embedded.sqlite):
# the ablations replay the full run's candidates and only re-decide, so a rerun after a verifier change costs the
# verifier and the calibrator, not the generator.
set -euo pipefail
cd "$(dirname "$0")/.."
veracity=${VERACITY:-.venv/bin/veracity}
python=${PYTHON:-.venv/bin/python}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
out=${OUT:-runs/r2vc}
n=${N:-60}            # claims per given-evidence source (FEVER-Symmetric, VitaminC dev)
n_cf=${N_CF:-40}      # Climate-FEVER dev claims (retrieved evidence)
n_ckpt=${N_CKPT:-20}  # claims per source for the generator checkpoints
sft=runs/train/sft_smollm2/merged
dpo=runs/train/dpo_smollm2/merged
cfg=configs/pipelines

echo "verifier: $("$veracity" models resolve nli_verifier)"  # the trained one in the cache, else the pre-built
"$veracity" train calibrator --config configs/train/calibrator_r2vc_embedded.yaml
"$veracity" train calibrator --config configs/train/calibrator_r2vc_nli_only.yaml  # the NLI-only rows' own

run() {  # run NAME RECIPE [options]: one row
  local name=$1 recipe=$2
  shift 2
  "$veracity" infer r2vc --config "$cfg/$recipe.yaml" --output_dir "$out/$name" "$@"
}
run embedded r2vc_embedded --max_examples "$n"
run no_abstention r2vc_no_abstention --max_examples "$n"
run nli_only r2vc_nli_only --max_examples "$n"
run nli_only_no_abstention r2vc_nli_only --abstention none --max_examples "$n"
run generator_only r2vc_generator_only --max_examples "$n"
run no_calibrator r2vc_no_calibrator --max_examples "$n"
run no_calibrator_claim_orientation r2vc_no_calibrator --orientation claim --max_examples "$n"
run no_nli_candidate r2vc_embedded --nli_candidate false --max_examples "$n"
run risk_control r2vc_risk_control --max_examples "$n"
run climate_fever r2vc_embedded --sources climate_fever_claims --max_examples "$n_cf"
run climate_fever_nli_only r2vc_nli_only --sources climate_fever_claims --max_examples "$n_cf"
for generator in base:embedded sft:$sft dpo:$dpo; do
  label=${generator%%:*} model=${generator#*:}
  run "${label}_generator_$n_ckpt" r2vc_embedded --model "$model" --max_examples "$n_ckpt"
  run "${label}_generator_only_$n_ckpt" r2vc_generator_only --model "$model" --max_examples "$n_ckpt"
done

rows=(
  "full (SFT generator + NLI candidate + calibrator + τ_ver/τ_cal)=$out/embedded"
  "full, no abstention=$out/no_abstention"
  "NLI-only (\`r2vc_nli_only\`)=$out/nli_only"
  "NLI-only, no abstention=$out/nli_only_no_abstention"
  "generator-only (\`r2vc_generator_only\`: vote)=$out/generator_only"
  "no calibrator (\`r2vc_no_calibrator\`: rank by s_ver)=$out/no_calibrator"
  "no calibrator, SPEC's claim orientation=$out/no_calibrator_claim_orientation"
  "no NLI candidate=$out/no_nli_candidate"
  "risk control, target 0.10 (\`r2vc_risk_control\`)=$out/risk_control"
)
for source in fever_symmetric vitaminc; do
  "$python" scripts/r2vc_table.py --source "$source" "${rows[@]}"
done
"$python" scripts/r2vc_table.py "full=$out/climate_fever" \
  "NLI-only=$out/climate_fever_nli_only"
"$python" scripts/r2vc_table.py --parse_failures \
  "base SmolLM2-135M | full=$out/base_generator_$n_ckpt" \
  "base SmolLM2-135M | generator only=$out/base_generator_only_$n_ckpt" \
  "SFT | full=$out/sft_generator_$n_ckpt" "SFT | generator only=$out/sft_generator_only_$n_ckpt" \
  "SFT → DPO | full=$out/dpo_generator_$n_ckpt" "SFT → DPO | generator only=$out/dpo_generator_only_$n_ckpt"
"$python" - "$out/risk_control/metrics.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
print(f"\nrisk control: coverage {m['coverage']:.3f}, realised selective risk "
      f"{m['selective_risk'] if m.get('selective_risk') is not None else 'undefined (nothing answered)'}")
PY
