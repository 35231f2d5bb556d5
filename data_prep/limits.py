"""Per-field size limits of prepared records: a claim is at most 100,000 characters, evidence text 1,000,000.

A record over a limit is rejected with the file, line and field it came from (a :class:`DataError`), never kept
whole or cut silently: a 50 MB "claim" is a broken export, and a truncated one would be a different claim. With
``--skip_invalid`` the record is skipped, logged in ``skipped.jsonl`` and counted in its output's manifest events
(``skipped:oversized_<field>``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from veracity.data_prep.context import LoadContext
from veracity.data_prep.errors import DataError
from veracity.data_prep.schema import Record

CLAIM_LIMIT = 100_000  # characters: claims, hypotheses, queries (the longest real claim is well under 2,000)
TEXT_LIMIT = 1_000_000  # characters: evidence, premises, documents, articles and every other text field
# record kind -> field -> limit; any other string field (or string in a list) of a record has TEXT_LIMIT
FIELD_LIMITS: dict[str, dict[str, int]] = {
    "claim_example": {"claim": CLAIM_LIMIT},
    "nli_pair": {"hypothesis": CLAIM_LIMIT},
    "retrieval_query": {"text": CLAIM_LIMIT},
    "averitec_claim": {"claim": CLAIM_LIMIT},
    "article_item": {"claim": CLAIM_LIMIT},
}


def oversized(record: Record, data_root: Path) -> DataError | None:
    """The error for the first field of ``record`` over its limit, or None."""
    limits = FIELD_LIMITS.get(record.kind, {})
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if isinstance(value, str):
            texts = [value]
        elif isinstance(value, list):
            texts = [v for v in value if isinstance(v, str)]
        else:
            continue
        limit = limits.get(f.name, TEXT_LIMIT)
        longest = max((len(t) for t in texts), default=0)
        if longest > limit:
            path, line = _where(getattr(record, "origin", ""), data_root)
            return DataError(path, line, f"{longest:,} characters, over the {limit:,}-character limit of this field "
                                         "(see data_prep/limits.py)", field=f.name)
    return None


def _where(origin: str, data_root: Path) -> tuple[str, int | None]:
    relative, _, line = origin.rpartition(":")
    if not line.isdigit():
        return origin, None
    return (relative if relative.startswith("hf:") else str(data_root / relative)), int(line)


def enforce_limits(outputs: dict[str, list[Record]], ctx: LoadContext) -> None:
    """Reject (raise) or, with ``--skip_invalid``, drop and count every record over a field limit, in place."""
    for name, records in outputs.items():
        kept = []
        for record in records:
            error = oversized(record, ctx.data_root)
            if error is None:
                kept.append(record)
                continue
            ctx.policy.handle(error)
            ctx.events[name][f"skipped:oversized_{error.field}"] += 1
        outputs[name] = kept
