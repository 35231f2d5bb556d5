"""CheckThat! 2025 Task 4b: tweets that refer to a CORD-19 paper (``post_id, tweet_text, cord_uid``)."""

from __future__ import annotations

from veracity.data_prep.context import LoadContext
from veracity.data_prep.rows import RawRow
from veracity.data_prep.schema import Record, RetrievalQuery

CHECKTHAT_TSV = {
    "train": "checkthat_2025_task4b/subtask4b_query_tweets_train.tsv",
    "dev": "checkthat_2025_task4b/subtask4b_query_tweets_dev.tsv",
}


def load_checkthat(ctx: LoadContext) -> dict[str, list[Record]]:
    out = "checkthat4b_queries"
    records: list[Record] = []
    for source_split, relative in CHECKTHAT_TSV.items():

        def convert(row: RawRow, source_split: str = source_split) -> RetrievalQuery | None:
            text = row.str("tweet_text").strip()
            if not text:
                ctx.drop(out, "empty_claim")
                return None
            post_id = row.str("post_id").strip()
            gold = row.str("cord_uid").strip()
            if not post_id:
                raise row.error("empty post id", field="post_id")
            if not gold:
                raise row.error("empty gold id", field="cord_uid")
            if not ctx.first_of_id(out, post_id, row):
                return None
            return RetrievalQuery(
                query_id=post_id, text=text, gold_ids=[gold], source=out, split=ctx.split(text),
                origin=row.origin, source_split=source_split,
            )

        rows = ctx.rows(out, ctx.path(relative), fmt="tsv", required=("post_id", "tweet_text", "cord_uid"))
        records += ctx.convert(rows, convert)
    return {out: records}
