"""NLI pairs for the verifier: every ``nli/<source>/*.jsonl`` (premise, hypothesis, label added to each row).

The hypothesis is the claim, so a pair joins its normalized hypothesis's group when ``prepare`` assigns splits:
a FEVER claim lands in the same split here as in the claim-level datasets.
"""

from __future__ import annotations

from veracity.data_prep.context import LoadContext
from veracity.data_prep.rows import RawRow
from veracity.data_prep.schema import NLIPair, Record


def load_nli(ctx: LoadContext) -> dict[str, list[Record]]:
    root = ctx.path("nli", directory=True)
    outputs: dict[str, list[Record]] = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        out = f"nli_{folder.name}"
        records: list[Record] = []
        for path in sorted(folder.glob("*.jsonl")):
            stem = path.name.removesuffix(".jsonl")

            def convert(row: RawRow, stem: str = stem, out: str = out) -> NLIPair | None:
                premise, hypothesis = row.str("premise").strip(), row.str("hypothesis").strip()
                if not premise or not hypothesis:
                    ctx.drop(out, "empty_premise_or_hypothesis")
                    return None
                return NLIPair(
                    id=f"{out}/{stem}:{row.line}", premise=premise, hypothesis=hypothesis, label=ctx.nli(row, "label"),
                    source=out, split=ctx.split(hypothesis), origin=row.origin, source_split=stem,
                )

            records += ctx.convert(ctx.rows(out, path), convert)
        outputs[out] = records
    return outputs
