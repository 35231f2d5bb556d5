"""Retrieval benchmarks built from claim/evidence examples: pool the evidence, ask each claim for its own.

Used for FEVER-Symmetric + SufficientFacts-FEVER (original evidence): the corpus is every distinct evidence
text, and a claim's gold documents are all the evidence texts it is paired with.

A query's text is its claim, so ``prepare`` puts it in the split of that claim's group, the split of every example
it was built from.
"""

from __future__ import annotations

import hashlib
import re

from veracity.data_prep.schema import ClaimExample, CorpusDocument, RetrievalQuery
from veracity.data_prep.splits import claim_group_text


def _text_key(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def evidence_retrieval_benchmark(
    examples: list[ClaimExample], name: str
) -> tuple[list[CorpusDocument], list[RetrievalQuery]]:
    """(corpus, queries) from examples with non-empty ``evidence_text``; order follows the examples."""
    corpus: dict[str, CorpusDocument] = {}
    gold: dict[str, list[str]] = {}
    first: dict[str, ClaimExample] = {}
    for example in examples:
        text = _text_key(example.evidence_text)
        if not text:
            continue
        doc_id = "ev-" + hashlib.sha1(text.encode()).hexdigest()[:16]
        if doc_id not in corpus:
            corpus[doc_id] = CorpusDocument(doc_id=doc_id, title="", url="", text=text, source=f"{name}_corpus",
                                            origin=example.origin)
        key = claim_group_text(example.claim)
        first.setdefault(key, example)
        if doc_id not in gold.setdefault(key, []):
            gold[key].append(doc_id)
    queries = [
        RetrievalQuery(query_id="q-" + hashlib.sha1(key.encode()).hexdigest()[:12], text=first[key].claim,
                       gold_ids=ids, source=f"{name}_queries", split=first[key].split, origin=first[key].origin)
        for key, ids in gold.items()
    ]
    return list(corpus.values()), queries
