"""VitaminC: the Lifelong-ICL sample (train/test rows of ``tals/vitaminc``) and SufficientFacts-VitaminC."""

from __future__ import annotations

from collections.abc import Iterable

from veracity.data_prep.context import LoadContext
from veracity.data_prep.fever import load_sufficient_facts
from veracity.data_prep.rows import RawRow
from veracity.data_prep.schema import ClaimExample, EvidencePassage, Record

LIFELONG = {
    "test": ["vitaminc/lifelong_icl_sample/test.shared.jsonl"],
    "train": [f"vitaminc/lifelong_icl_sample/train_{i}.shared.jsonl" for i in range(5)],
}
SUFFICIENT_FACTS_VITAMINC = "vitaminc/sufficient_facts_vitaminc.shared.jsonl"


def load_vitaminc(ctx: LoadContext) -> dict[str, list[Record]]:
    rows = []
    for source_split, files in LIFELONG.items():
        rows += [(source_split, row) for f in files for row in ctx.rows("vitaminc", ctx.path(f))]
    return {
        "vitaminc": convert_vitaminc_rows(ctx, rows, "vitaminc"),
        "sufficient_facts_vitaminc": load_sufficient_facts(
            ctx, "sufficient_facts_vitaminc", SUFFICIENT_FACTS_VITAMINC
        ),
    }


def convert_vitaminc_rows(ctx: LoadContext, rows: Iterable[tuple[str, RawRow]], out: str) -> list[ClaimExample]:
    """Rows with ``claim, evidence, label`` and ``id`` or ``unique_id`` (``<case_id>_<n>``; the hub uses both).

    Rows of one contrastive case (same ``case_id``, kept as ``group_id``) share a split once ``prepare`` has
    assigned splits over connected groups; a repeated id follows the one rule (``LoadContext.first_of_id``).
    """
    ctx.group_namespace(out, "vitaminc")  # local samples and the hub share tals/vitaminc case ids

    def convert(item: tuple[str, RawRow]) -> ClaimExample | None:
        source_split, row = item
        claim = row.str("claim").strip()
        if not claim:
            ctx.drop(out, "empty_claim")
            return None
        unique_id = row.id("unique_id" if row.has("unique_id") else "id")
        if not ctx.first_of_id(out, f"vitc-{unique_id}", row):
            return None
        case_id = row.opt_str("case_id") or unique_id.rsplit("_", 1)[0]
        evidence = row.str("evidence")
        return ClaimExample(
            id=f"vitc-{unique_id}",
            claim=claim,
            label=ctx.ternary(row, "label"),
            evidence_text=evidence,
            source=out,
            split=ctx.split(claim),  # provisional: prepare() joins the case through group_id
            origin=row.origin,
            group_id=case_id,
            source_split=source_split,
            evidence=[EvidencePassage(text=evidence, title=row.opt_str("page"))],
        )

    return ctx.convert(rows, convert)  # type: ignore[arg-type]
