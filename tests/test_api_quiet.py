"""The Python API is as quiet as the command line: loading a model from Python prints no "Loading weights" bar
unless asked (``VERACITY_VERBOSE=1``, or the program set up veracity's logging itself, verbose) — issue #63."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def tiny_verifier(tmp_path_factory: pytest.TempPathFactory, tiny_encoder_dir: Path) -> Path:
    from tiny_models import build_tiny_nli

    return build_tiny_nli(tmp_path_factory.mktemp("tiny_verifier"), tiny_encoder_dir,
                          {0: "entailment", 1: "neutral", 2: "contradiction"})


@pytest.mark.parametrize(("setup", "verbose", "bars"), [
    ("", "", False),  # a program that only uses the API: quiet
    ("", "1", True),  # VERACITY_VERBOSE=1: the libraries' bars come back
    ("from veracity.logs import setup_logging; setup_logging(verbose=True); ", "", True),  # the program chose
])
def test_loading_a_verifier_from_python_is_quiet_unless_asked(tiny_verifier: Path, setup: str, verbose: str,
                                                              bars: bool) -> None:
    code = f"{setup}from veracity.models.nli import NLIVerifier; NLIVerifier({str(tiny_verifier)!r}, backend='torch')"
    quieted = ("VERACITY_VERBOSE", "TRANSFORMERS_", "HF_HUB_DISABLE")  # what an earlier test may have set here
    env = {k: v for k, v in os.environ.items() if not k.startswith(quieted)}
    env["VERACITY_VERBOSE"] = verbose
    err = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stderr
    assert ("Loading weights" in err) is bars, err[-500:]
