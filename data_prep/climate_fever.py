"""CLIMATE-FEVER: claim-level examples, evidence-level pairs, the pooled evidence corpus and retrieval queries.

Claim labels include DISPUTED (evidence both supports and refutes), which has no place in the ternary schema:
those claims are excluded from the claim-level output and counted; their evidence pairs are kept.

An evidence sentence's label is the strict majority of its annotators' votes, else NOT_ENOUGH_INFO; the votes are
kept on each pair (``meta.votes``, ternary labels) so that evaluation can separate agreed labels from split ones.
"""

from __future__ import annotations

from veracity.data_prep.context import LoadContext
from veracity.data_prep.rows import RawRow
from veracity.data_prep.schema import (
    NOT_ENOUGH_INFO,
    ClaimExample,
    CorpusDocument,
    EvidencePassage,
    Record,
    RetrievalQuery,
)

CLIMATE_FEVER = "climate_fever/climate-fever.shared.jsonl"
EVIDENCE = "climate_fever_evidence"


def _evidences(ctx: LoadContext, row: RawRow) -> list[tuple[EvidencePassage, str, list[str]]]:
    items = []
    for index, ev in enumerate(row.list("evidences")):
        if not isinstance(ev, dict):
            raise row.error(f"evidence {index} is not an object", field="evidences")
        for name in ("evidence_id", "evidence", "article", "evidence_label"):
            if not isinstance(ev.get(name), str):
                raise row.error(f"evidence {index}: '{name}' missing or not a string",
                                field=f"evidences[{index}].{name}")
        # counted under the evidence pairs they label (the row is read for the claims): one per pair, one per vote
        label = ctx.ternary(row, f"evidences[{index}].evidence_label", ev["evidence_label"], EVIDENCE)
        raw_votes = ev.get("votes") or []
        if not isinstance(raw_votes, list) or not all(v is None or isinstance(v, str) for v in raw_votes):
            raise row.error(f"evidence {index}: 'votes' is not a list of labels", field=f"evidences[{index}].votes")
        votes = [ctx.ternary(row, f"evidences[{index}].votes", v, EVIDENCE, vote=True) for v in raw_votes if v]
        url = "https://en.wikipedia.org/wiki/" + ev["article"].replace(" ", "_")
        passage = EvidencePassage(text=ev["evidence"], title=ev["article"], url=url, passage_id=ev["evidence_id"])
        items.append((passage, label, votes))
    return items


def load_climate_fever(ctx: LoadContext) -> dict[str, list[Record]]:
    rows = list(ctx.rows("climate_fever_claims", ctx.path(CLIMATE_FEVER)))
    for name in ("climate_fever_evidence", "climate_fever_corpus", "climate_fever_queries"):
        ctx.inputs[name] = list(ctx.inputs["climate_fever_claims"])
    for name in ("climate_fever_claims", "climate_fever_evidence"):
        ctx.group_namespace(name, "climate_fever")  # both carry the claim_id as group_id
    claims: list[Record] = []
    pairs: list[Record] = []
    corpus: dict[str, CorpusDocument] = {}
    queries: list[Record] = []

    def convert(row: RawRow) -> None:
        claim = row.str("claim").strip()
        if not claim:
            ctx.drop("climate_fever_claims", "empty_claim")
            return None
        claim_id = row.id("claim_id")
        if not ctx.first_of_id("climate_fever_claims", f"cf-{claim_id}", row):
            return None
        raw_label = row.str("claim_label")
        evidences = _evidences(ctx, row)
        split = ctx.split(claim)
        for index, (passage, _, _) in enumerate(evidences):  # check before adding anything of this row
            known = corpus.get(passage.passage_id)
            if known is not None and known.text != passage.text:
                raise row.error(f"evidence id {passage.passage_id!r} reused with another text",
                                field=f"evidences[{index}].evidence_id")
        for index, (passage, label, votes) in enumerate(evidences):
            pairs.append(ClaimExample(
                id=f"cf-{claim_id}-{index}", claim=claim, label=label, evidence_text=passage.text,
                source="climate_fever_evidence", split=split, origin=row.origin, group_id=claim_id,
                evidence=[passage], meta={"votes": votes},
            ))
            if passage.passage_id in corpus:
                ctx.drop("climate_fever_corpus", "duplicate_sentence")
            else:
                corpus[passage.passage_id] = CorpusDocument(
                    doc_id=passage.passage_id, title=passage.title, url=passage.url, text=passage.text,
                    source="climate_fever_corpus", origin=row.origin,
                )
        gold = [p.passage_id for p, label, _ in evidences if label != NOT_ENOUGH_INFO]
        if gold:
            queries.append(RetrievalQuery(
                query_id=f"cf-{claim_id}", text=claim, gold_ids=gold, source="climate_fever_queries", split=split,
                origin=row.origin, meta={"claim_label": raw_label},
            ))
        else:
            ctx.drop("climate_fever_queries", "no_relevant_evidence")
        if raw_label == "DISPUTED":
            ctx.drop("climate_fever_claims", "excluded_label_DISPUTED")
            return None
        claims.append(ClaimExample(
            id=f"cf-{claim_id}", claim=claim, label=ctx.ternary(row, "claim_label"),
            evidence_text=" ".join(p.text for p, _, _ in evidences), source="climate_fever_claims", split=split,
            origin=row.origin, group_id=claim_id, evidence=[p for p, _, _ in evidences],
        ))
        return None

    ctx.convert(rows, convert)
    return {
        "climate_fever_claims": claims,
        "climate_fever_evidence": pairs,
        "climate_fever_corpus": list(corpus.values()),
        "climate_fever_queries": queries,
    }
