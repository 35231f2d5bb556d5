"""WatClaimCheck review articles (via FlawCheck): the human-written targets of CheckThat 2026 Task 3."""

from __future__ import annotations

from veracity.data_prep.context import LoadContext
from veracity.data_prep.rows import RawRow
from veracity.data_prep.schema import Record, ReferenceArticle

WATCLAIMCHECK = "watclaimcheck_flawcheck/review_articles_train_sample500.shared.jsonl"
WATCLAIMCHECK_LABELS = ("correct", "incorrect", "partly false", "unproven")


def load_watclaimcheck(ctx: LoadContext) -> dict[str, list[Record]]:
    out = "watclaimcheck_articles"

    def convert(row: RawRow) -> ReferenceArticle | None:
        label = row.str("label").strip().lower()
        if label not in WATCLAIMCHECK_LABELS:
            raise row.error(f"unknown verdict {label!r} (expected one of {list(WATCLAIMCHECK_LABELS)})", field="label")
        paragraphs = row.list("review_article")
        for index, p in enumerate(paragraphs):
            if not isinstance(p, str):
                raise row.error(f"paragraph {index} is not a string", field="review_article")
        paragraphs = [p for p in paragraphs if p.strip()]
        if not paragraphs:
            ctx.drop(out, "empty_article")
            return None
        wat_id = row.id("wat_id")
        if not ctx.first_of_id(out, f"wat-{wat_id}", row):
            return None
        return ReferenceArticle(
            id=f"wat-{wat_id}", label=label, paragraphs=paragraphs, source=out,
            split=ctx.split(f"wat:{wat_id}"), origin=row.origin, source_split=row.opt_str("flawcheck_split"),
        )

    return {out: ctx.convert(ctx.rows(out, ctx.path(WATCLAIMCHECK)), convert)}
