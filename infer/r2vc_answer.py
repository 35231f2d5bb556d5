"""Read an R2VC generator answer (format in ``data_prep/r2vc_format.py``) back into a typed value."""

from __future__ import annotations

from dataclasses import dataclass

from veracity.data_prep.schema import to_ternary
from veracity.infer.parsing import parse_json_answer


@dataclass(frozen=True)
class R2VCAnswer:
    label: str
    rationale: str
    evidence_ids: tuple[int, ...]


def parse_r2vc_answer(text: str, num_passages: int | None = None) -> tuple[R2VCAnswer | None, str | None]:
    """``(answer, None)`` or ``(None, error)``; an error never falls back to a guessed label."""
    result = parse_json_answer(text, {"label": str, "rationale": str, "evidence_ids": list})
    if not result.ok or result.value is None:
        return None, result.error
    label = to_ternary(result.value["label"])
    if label is None:
        return None, f"schema: label {result.value['label']!r} is not SUPPORTS / REFUTES / NOT ENOUGH INFO"
    ids = result.value["evidence_ids"]
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        return None, f"schema: evidence_ids must be integers, got {ids!r}"
    if num_passages is not None and any(not 1 <= i <= num_passages for i in ids):
        return None, f"schema: evidence_ids {ids} outside 1..{num_passages}"
    return R2VCAnswer(label, result.value["rationale"], tuple(ids)), None
