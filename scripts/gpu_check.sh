#!/usr/bin/env bash
# The prepared GPU check of issue #64: the training bench (bench/train.py, SFT and DPO variants of the 8B LoRA
# recipes, each in two rotated rounds) on random weights of models/model_configs/llama31_8b.json built on the GPU (no
# download), in about 7 minutes, printing one table with the device and the library versions
# (docs/training.md#gpu-memory-and-speed). The inference bench is not in it: bench/engines.py has no GPU rows yet.
#
#   bash scripts/gpu_payload.sh                 # here: what the lent GPU machine lacks, into runs/gpu_payload/
#   bash scripts/gpu_check.sh                   # there (the device tool, carry runs/gpu_payload): install, bench
#   bash scripts/gpu_check.sh --cpu             # the same script on the tiny shape, on this CPU (in the tests)
#
# Options: --payload DIR (default runs/gpu_payload), --tokenizer DIR, --train_file F, --dpo_file F (default: the
# payload's, for --cpu the embedded model's tokenizer and runs/prep/training/), --minutes M (no bench run starts after
# M minutes; default 6.5), --out DIR (the table and rows as JSON; default $OUT when set, as the device tool sets it).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=gpu payload=runs/gpu_payload tokenizer= train_file= dpo_file= minutes=6.5 out="${OUT:-}"
while [ "$#" -gt 0 ]; do
  case "$1" in
    --cpu) mode=cpu ;;
    --payload) payload="$2"; shift ;;
    --tokenizer) tokenizer="$2"; shift ;;
    --train_file) train_file="$2"; shift ;;
    --dpo_file) dpo_file="$2"; shift ;;
    --minutes) minutes="$2"; shift ;;
    --out) out="$2"; shift ;;
    *) echo "error: gpu_check.sh: unknown option $1 (see the head of scripts/gpu_check.sh)" >&2; exit 2 ;;
  esac
  shift
done
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

if [ "$mode" = gpu ]; then
  python="${PYTHON:-python3}"
  if [ -d "$payload/wheels" ]; then  # the packages the machine lacks, on top of its own (its torch stays)
    site=/tmp/veracity_site
    "$python" -m pip install -q --no-index --no-deps --target "$site" "$payload"/wheels/*.whl
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  fi
  tokenizer="${tokenizer:-$payload/tokenizer}" train_file="${train_file:-$payload/records/sft.jsonl}"
  dpo_file="${dpo_file:-$payload/records/dpo.jsonl}"
  # SFT: the recipe, the fast recipe's batch without checkpointing, padding-free, Liger; packed 1024-token rows with
  # every 2nd layer recomputed. DPO: 4 pairs per batch (8 pairs without checkpointing peaked at 82.7 GiB), the same.
  shape=(--architecture llama31_8b --steps 2 --warmup 1 --accumulation 2 --max_length 1024 --batches 8
         --dpo_batches 4 --memory_limit_gib 75
         --variants shipped no_checkpointing no_checkpointing+padding_free no_checkpointing+padding_free+liger
                    packing+selective
         --dpo_variants shipped no_checkpointing no_checkpointing+padding_free no_checkpointing+padding_free+liger)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
else
  python="${PYTHON:-.venv/bin/python}"
  export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
  tokenizer="${tokenizer:-embedded}" train_file="${train_file:-runs/prep/training/sft.jsonl}"
  dpo_file="${dpo_file:-runs/prep/training/dpo.jsonl}"
  # the tiny shape: 1 warm-up + 1 timed step, 2 rounds of 2 variants per job (a check of the script, not a timing)
  shape=(--architecture tiny --device cpu --steps 1 --warmup 1 --batch 2 --accumulation 2 --max_length 256
         --batches 4 --variants shipped no_checkpointing+padding_free)
fi

echo "gpu_check ($mode): $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
json=()
if [ -n "$out" ]; then
  mkdir -p "$out"
  json=(--json "$out/gpu_check.json")
fi
"$python" bench/train.py "${shape[@]}" --rounds 2 --max_minutes "$minutes" --tokenizer "$tokenizer" \
  --train_file "$train_file" --dpo_file "$dpo_file" "${json[@]}" | tee ${out:+"$out/gpu_check.md"}
