#!/usr/bin/env bash
# What the lent GPU machine lacks for scripts/gpu_check.sh, into one ignored folder the device tool carries (at most
# 64 MiB). That machine (../shared/PLATFORM.md, "Seen working on the lent GPU machine") has Python 3.12, a CUDA torch,
# peft and accelerate, but no trl, datasets, dill or multiprocess, an older transformers, and no network:
#   wheels/     the lock's trl, datasets, dill, multiprocess, transformers, peft and fsspec as Python 3.12 manylinux
#               wheels without their dependencies (pip download, as seen working there), liger-kernel, and veracity's
#               own wheel (uv build --wheel)
#   tokenizer/  the embedded model's tokenizer (SmolLM2's; its ids fit the 8B shape's vocabulary)
#   records/    the first 1,200 SFT and 600 DPO training records of `veracity prep training-sets`
#
# Usage: bash scripts/gpu_payload.sh [--out runs/gpu_payload] [--records runs/prep/training] [--tokenizer DIR]
#                                    [--dry_run]
#   --dry_run: print what it would download and copy (with the sizes of the local files), write nothing.
# The size check runs either way: more than $GPU_PAYLOAD_LIMIT_MIB (default 64) MiB is one error line, exit 1.
set -euo pipefail
cd "$(dirname "$0")/.."

out=runs/gpu_payload records=runs/prep/training tokenizer= dry_run=false
while [ "$#" -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift ;;
    --records) records="$2"; shift ;;
    --tokenizer) tokenizer="$2"; shift ;;
    --dry_run) dry_run=true ;;
    *) echo "error: gpu_payload.sh: unknown option $1 (see the head of scripts/gpu_payload.sh)" >&2; exit 2 ;;
  esac
  shift
done
limit_mib="${GPU_PAYLOAD_LIMIT_MIB:-64}"
liger=liger-kernel==0.8.5

pins=()
for name in trl datasets dill multiprocess transformers peft fsspec; do
  pin=$(grep -i "^$name==" requirements.lock) || { echo "error: gpu_payload: $name is not pinned in requirements.lock" >&2; exit 1; }
  pins+=("$pin")
done
if [ -z "$tokenizer" ]; then
  tokenizer=$(.venv/bin/python -c "from veracity.models.registry import resolve_model; print(resolve_model('chat_lm', 'embedded'))")
fi
tokenizer_files=()
for name in tokenizer.json tokenizer_config.json chat_template.jinja special_tokens_map.json; do
  [ -f "$tokenizer/$name" ] && tokenizer_files+=("$tokenizer/$name")
done
for name in sft.jsonl dpo.jsonl; do
  [ -f "$records/$name" ] || { echo "error: gpu_payload: no $records/$name (veracity prep training-sets writes it)" >&2; exit 1; }
done

local_bytes() {  # the sizes of what is copied: the tokenizer files and the records' first lines
  { cat "${tokenizer_files[@]}"; head -n 1200 "$records/sft.jsonl"; head -n 600 "$records/dpo.jsonl"; } | wc -c
}
check_size() {  # $1: bytes, $2: what they are
  if [ "$1" -gt $((limit_mib * 1024 * 1024)) ]; then
    echo "error: gpu_payload: $2 come to $(($1 / 1024 / 1024)) MiB, over the $limit_mib MiB the device tool carries" >&2
    exit 1
  fi
}

if [ "$dry_run" = true ]; then
  echo "would download (pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_17_x86_64):"
  printf '  %s\n' "${pins[@]}" "$liger"
  echo "would build: veracity's wheel (uv build --wheel)"
  echo "would copy into $out:"
  for file in "${tokenizer_files[@]}"; do printf '  tokenizer/%s (%s bytes)\n' "$(basename "$file")" "$(wc -c < "$file")"; done
  echo "  records/sft.jsonl (the first 1,200 lines of $records/sft.jsonl)"
  echo "  records/dpo.jsonl (the first 600 lines of $records/dpo.jsonl)"
  bytes=$(local_bytes)
  echo "local files: $bytes bytes; the wheels came to ≈ 18 MiB when last downloaded"
  check_size "$bytes" "the local files alone"
  exit 0
fi

rm -rf "$out"
mkdir -p "$out/wheels" "$out/tokenizer" "$out/records"
${PIP:-python3 -m pip} download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_17_x86_64 -d "$out/wheels" "${pins[@]}" "$liger"
uv build -q --wheel --out-dir "$out/wheels"
cp "${tokenizer_files[@]}" "$out/tokenizer/"
head -n 1200 "$records/sft.jsonl" > "$out/records/sft.jsonl"
head -n 600 "$records/dpo.jsonl" > "$out/records/dpo.jsonl"
find "$out" -type f -printf '%10s  %P\n' | sort -k2
bytes=$(du -sb "$out" | cut -f1)
check_size "$bytes" "$out"
echo "$out: $((bytes / 1024)) KiB, within the $limit_mib MiB limit; run scripts/gpu_check.sh with it carried"
