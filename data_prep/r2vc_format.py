"""The R2VC generator's prompt and answer format (SPEC §1), shared by training-set building and inference.

The prompt gives the claim and numbered evidence passages; the answer is one JSON object::

    {"label": "SUPPORTS" | "REFUTES" | "NOT ENOUGH INFO", "rationale": "...", "evidence_ids": [1, 3]}

Messages are plain ``{role, content}`` lists: each model's own chat template renders them (TRL applies it when
training; the engines apply it when generating), so the same records serve SmolLM2 and Nemotron-8B.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from veracity.data_prep.schema import NOT_ENOUGH_INFO, REFUTES, SUPPORTS, TERNARY_LABELS

SYSTEM_PROMPT = (
    "You are a careful fact-checker. Judge the claim only by the numbered evidence passages. "
    "Answer with one JSON object and nothing else."
)
ANSWER_KEYS = ("label", "rationale", "evidence_ids")


def user_prompt(claim: str, passages: Sequence[str]) -> str:
    numbered = "\n".join(f"[{i}] {text}" for i, text in enumerate(passages, start=1))
    return (
        f"Claim: {claim}\n\nEvidence passages:\n{numbered}\n\n"
        f"Does the evidence support the claim ({SUPPORTS}), refute it ({REFUTES}), or not settle it "
        f"({NOT_ENOUGH_INFO})? Reply with JSON: "
        '{"label": "...", "rationale": "one or two sentences grounded in the passages", '
        '"evidence_ids": [numbers of the passages you rely on]}'
    )


def prompt_messages(claim: str, passages: Sequence[str]) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user_prompt(claim, passages)}]


def format_answer(label: str, rationale: str, evidence_ids: Sequence[int]) -> str:
    if label not in TERNARY_LABELS:
        raise ValueError(f"label must be one of {TERNARY_LABELS}, got {label!r}")
    return json.dumps({"label": label, "rationale": rationale, "evidence_ids": list(evidence_ids)},
                      ensure_ascii=False)


def grounded_rationale(label: str, passage: str, passage_id: int, max_chars: int = 220) -> str:
    """A rationale that quotes the passage it rests on (what SFT teaches: cite, then conclude)."""
    quote = passage.strip()
    if len(quote) > max_chars:
        quote = quote[: max_chars].rsplit(" ", 1)[0] + " …"
    if label == SUPPORTS:
        return f'Passage [{passage_id}] states: "{quote}" This supports the claim.'
    if label == REFUTES:
        return f'Passage [{passage_id}] states: "{quote}" This contradicts the claim.'
    return f'Passage [{passage_id}] says: "{quote}" This does not settle the claim either way.'
