"""AVeriTeC: official JSON (train/dev), the FEVER-8 scorer CSV format, and Task-3 items built from both.

Claims keep their four-way verdict (the AIC pipeline predicts all four). Claim ids are the official ones:
the position of the claim in its split file (``dev-0``, ``train-17``), and the ``id`` column of a FEVER-8 CSV.
"""

from __future__ import annotations

from collections.abc import Iterable

from veracity.data_prep.context import LoadContext
from veracity.data_prep.rows import RawRow
from veracity.data_prep.schema import (
    AVERITEC_LABELS,
    ArticleItem,
    AveritecClaim,
    EvidencePassage,
    QAAnswer,
    QAPair,
    Record,
)

AVERITEC_JSON = {"train": "averitec/train_first1158.json", "dev": "averitec/dev.json"}
FEVER8_CSV = {
    "averitec_fever8_gold_dev": "averitec/fever8_leaderboard_format/solution_dev.csv",
    "averitec_fever8_hero_dev": "averitec/fever8_leaderboard_format/baseline_hero_submission_dev.csv",
    "averitec_fever8_mmr_qwen3_dev": "averitec/fever8_leaderboard_format/heruberuto_mmr_qwen3_submission_dev.csv",
}
# FEVER-8 packs QA evidence into one string: "question\t\t\nanswer" pairs joined and ended by "\t\t\n\n".
FEVER8_PAIR_SEP = "\t\t\n\n"
FEVER8_QA_SEP = "\t\t\n"


def load_averitec(ctx: LoadContext) -> dict[str, list[Record]]:
    outputs: dict[str, list[Record]] = {}
    for source_split, relative in AVERITEC_JSON.items():
        out = f"averitec_{source_split}"
        claims = load_averitec_json(ctx, out, relative, source_split)
        outputs[out] = claims
        task3 = f"averitec_task3_{source_split}"
        ctx.inputs[task3] = list(ctx.inputs[out])
        outputs[task3] = [task3_item(c, task3) for c in claims]  # type: ignore[arg-type]
    for out, relative in FEVER8_CSV.items():
        outputs[out] = load_fever8_csv(ctx, out, relative)
    return outputs


def _label(row: RawRow, name: str = "label", allow_empty: bool = False) -> str:
    value = row.str(name).strip()
    if value in AVERITEC_LABELS or (allow_empty and not value):
        return value
    raise row.error(f"unknown verdict {value!r} (expected one of {list(AVERITEC_LABELS)})", field=name)


def _questions(row: RawRow) -> list[QAPair]:
    pairs = []
    for qi, q in enumerate(row.list("questions", required=False)):
        if not isinstance(q, dict) or not isinstance(q.get("question"), str):
            raise row.error(f"question {qi}: expected an object with a 'question' string", field=f"questions[{qi}]")
        answers = []
        for ai, a in enumerate(q.get("answers") or []):
            if not isinstance(a, dict) or not isinstance(a.get("answer", ""), str):
                raise row.error(f"answer {ai}: expected an object with an 'answer' string",
                                field=f"questions[{qi}].answers[{ai}]")
            answers.append(QAAnswer(
                answer=a.get("answer") or "",
                answer_type=a.get("answer_type") or "",
                source_url=a.get("source_url") or "",
                boolean_explanation=a.get("boolean_explanation") or "",
            ))
        pairs.append(QAPair(question=q["question"], answers=answers))
    return pairs


def load_averitec_json(ctx: LoadContext, out: str, relative: str, source_split: str) -> list[AveritecClaim]:
    index = -1

    def convert(row: RawRow) -> AveritecClaim | None:
        nonlocal index
        index += 1  # the official claim id is the position in the file, empty claims included
        claim = row.str("claim").strip()
        if not claim:
            ctx.drop(out, "empty_claim")
            return None
        return AveritecClaim(
            id=f"{source_split}-{index}", claim=claim, label=_label(row), source=out, split=ctx.split(claim),
            origin=row.origin, source_split=source_split, speaker=row.opt_str("speaker"),
            claim_date=row.opt_str("claim_date"), justification=row.opt_str("justification"),
            questions=_questions(row),
        )

    return ctx.convert(ctx.rows(out, ctx.path(relative), fmt="json"), convert)


def qa_pair(question: str, answer: str) -> QAPair:
    """One question with one answer: a pair as the FEVER-8 ``evi`` format and the scorers hold them."""
    return QAPair(question=question, answers=[QAAnswer(answer=answer)])


def flat_pairs(pairs: Iterable[QAPair]) -> list[tuple[str, str]]:
    """``(question, answer)`` once per answer, in order (FEVER-8's flattening; a question without answers gives
    none): the pairs the ``evi`` string holds and the AVeriTeC scorers compare."""
    return [(p.question, a.answer) for p in pairs for a in p.answers]


def parse_fever8_evidence(evi: str) -> list[QAPair]:
    """Split a FEVER-8 ``evi`` string into question–answer pairs (one answer each), taken as written; empty pieces
    are skipped, as the official scorer does.

    Raises:
        ValueError: a piece without exactly one question/answer separator.
    """
    pairs = []
    for number, piece in enumerate((p for p in evi.split(FEVER8_PAIR_SEP) if p != ""), start=1):
        parts = piece.split(FEVER8_QA_SEP)
        if len(parts) != 2:
            raise ValueError(f"QA pair {number} has {len(parts) - 1} question/answer separators (\\t\\t\\n), "
                             f"expected 1: {piece[:60]!r}")
        pairs.append(qa_pair(parts[0], parts[1]))
    return pairs


def format_fever8_evidence(pairs: Iterable[QAPair]) -> str:
    """The inverse of :func:`parse_fever8_evidence`: the ``evi`` string, one pair per answer (:func:`flat_pairs`)."""
    return "".join(f"{question}{FEVER8_QA_SEP}{answer}{FEVER8_PAIR_SEP}" for question, answer in flat_pairs(pairs))


def load_fever8_csv(ctx: LoadContext, out: str, relative: str) -> list[AveritecClaim]:
    def convert(row: RawRow) -> AveritecClaim | None:
        claim = row.str("claim").strip()
        if not claim:
            ctx.drop(out, "empty_claim")
            return None
        claim_id = row.str("id").strip()
        if not claim_id.isdigit():
            raise row.error(f"expected an integer claim id, got {claim_id!r}", field="id")
        if not ctx.first_of_id(out, f"dev-{claim_id}", row):
            return None
        try:
            pairs = parse_fever8_evidence(row.str("evi"))
        except ValueError as error:
            raise row.error(str(error), field="evi") from None
        return AveritecClaim(
            id=f"dev-{claim_id}", claim=claim, label=_label(row, allow_empty=True), source=out,
            split=ctx.split(claim), origin=row.origin, source_split=row.str("split"),
            # prepared records keep the pairs stripped, and a pair of whitespace alone is none
            questions=[qa_pair(q.strip(), a.strip()) for q, a in flat_pairs(pairs) if (q + a).strip()],
        )

    rows = ctx.rows(out, ctx.path(relative), fmt="csv", required=("id", "claim", "evi", "label", "split"))
    return ctx.convert(rows, convert)


def task3_item(claim: AveritecClaim, source: str) -> ArticleItem:
    """A CheckThat 2026 Task 3 input from an AVeriTeC claim (docs/pipelines/uts.md#items).

    Evidence = the QA answers grouped by source URL (one ``{url, text}`` per URL, in first-seen order); the
    human justification is the reference text.
    """
    by_url: dict[str, list[str]] = {}
    for pair in claim.questions:
        for answer in pair.answers:
            if answer.source_url and answer.answer.strip():
                by_url.setdefault(answer.source_url, []).append(answer.answer.strip())
    evidence = [EvidencePassage(text=" ".join(texts), url=url) for url, texts in by_url.items()]
    return ArticleItem(
        id=claim.id, claim=claim.claim, claimant=claim.speaker, label=claim.label, evidence=evidence,
        source=source, split=claim.split, origin=claim.origin, reference_article=claim.justification,
    )
