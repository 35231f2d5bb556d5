"""Typed records every later stage reads, and the label spaces they use.

All records are plain dataclasses that serialise to one JSON object (``to_dict``) and back (``from_dict``).
Every record carries ``source`` (dataset name), ``split`` (our seeded hash split, see ``splits.py``) and
``origin`` (``relative/file:line`` of the raw record) so that any later error can point back at the input.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

# --- Ternary claim labels (docs/data.md#labels) ------------------------------------------------------------
SUPPORTS = "SUPPORTS"
REFUTES = "REFUTES"
NOT_ENOUGH_INFO = "NOT ENOUGH INFO"
TERNARY_LABELS: tuple[str, ...] = (SUPPORTS, REFUTES, NOT_ENOUGH_INFO)

# Keys are upper-cased with '_' and '-' read as spaces; see normalize_label_key.
_TERNARY_ALIASES: dict[str, str] = {
    "SUPPORTS": SUPPORTS,
    "SUPPORT": SUPPORTS,
    "SUPPORTED": SUPPORTS,
    "REFUTES": REFUTES,
    "REFUTE": REFUTES,
    "REFUTED": REFUTES,
    "NOT ENOUGH INFO": NOT_ENOUGH_INFO,
    "NOT ENOUGH INFORMATION": NOT_ENOUGH_INFO,
    "NOT ENOUGH EVIDENCE": NOT_ENOUGH_INFO,
    "NOT ENOUGH": NOT_ENOUGH_INFO,
    "NEI": NOT_ENOUGH_INFO,
    "NEE": NOT_ENOUGH_INFO,
}

# --- NLI labels (verifier) --------------------------------------------------------------------------------
ENTAILMENT = "entailment"
NEUTRAL = "neutral"
CONTRADICTION = "contradiction"
NLI_LABELS: tuple[str, ...] = (ENTAILMENT, NEUTRAL, CONTRADICTION)
TERNARY_TO_NLI = {SUPPORTS: ENTAILMENT, REFUTES: CONTRADICTION, NOT_ENOUGH_INFO: NEUTRAL}
NLI_TO_TERNARY = {v: k for k, v in TERNARY_TO_NLI.items()}

# --- AVeriTeC verdicts (AIC pipeline keeps all four) ------------------------------------------------------
AVERITEC_LABELS: tuple[str, ...] = (
    "Supported",
    "Refuted",
    "Not Enough Evidence",
    "Conflicting Evidence/Cherrypicking",
)
AVERITEC_TO_TERNARY = {"Supported": SUPPORTS, "Refuted": REFUTES, "Not Enough Evidence": NOT_ENOUGH_INFO}


def normalize_label_key(value: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[_\-]", " ", value)).strip().upper()


def to_ternary(value: object) -> str | None:
    """Map a label variant (``supports``, ``SUPPORTED``, ``NEI``, ``NOT_ENOUGH_INFO`` …) to the ternary space.

    Returns None for anything else; callers turn that into a DataError that names file, line and value.
    """
    if not isinstance(value, str):
        return None
    return _TERNARY_ALIASES.get(normalize_label_key(value))


def to_nli(value: object) -> str | None:
    """Map an NLI label variant (``ENTAILMENT``, ``neutral``, ``contradiction`` …) to :data:`NLI_LABELS`."""
    if not isinstance(value, str):
        return None
    key = value.strip().lower()
    return key if key in NLI_LABELS else None


# --- Records ----------------------------------------------------------------------------------------------
R = TypeVar("R", bound="Record")


@dataclass
class Record:
    """Base for every record: common provenance fields and (de)serialisation."""

    kind: ClassVar[str] = "record"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls: type[R], data: dict[str, Any]) -> R:
        values = {}
        for f in dataclasses.fields(cls):
            if f.name not in data:
                continue
            value = data[f.name]
            if f.name in _NESTED and isinstance(value, list):
                value = [_NESTED[f.name].from_dict(v) if isinstance(v, dict) else v for v in value]
            values[f.name] = value
        return cls(**values)


@dataclass
class EvidencePassage(Record):
    """One piece of evidence: a sentence or paragraph, with where it came from."""

    kind: ClassVar[str] = "evidence_passage"
    text: str
    title: str = ""
    url: str = ""
    passage_id: str = ""  # e.g. FEVER "Page_title:sentence_index", Climate-FEVER "Article:line"


@dataclass
class ClaimExample(Record):
    """A claim with its evidence and a ternary label (R2VC's unit; docs/data.md#records)."""

    kind: ClassVar[str] = "claim_example"
    id: str
    claim: str
    label: str
    evidence_text: str
    source: str
    split: str
    origin: str
    group_id: str = ""  # contrastive case / FEVER id: rows of a group always share a split
    source_split: str = ""
    evidence: list[EvidencePassage] = field(default_factory=list)
    evidence_sets: list[list[str]] = field(default_factory=list)  # FEVER: alternative sets of passage_ids
    meta: dict[str, Any] = field(default_factory=dict)

    def premise(self, titles: bool = False) -> str:
        """The evidence as a verifier reads it: plain, or each passage prefixed with its article title
        (``Title: sentence``, as FEVER systems feed Wikipedia evidence) when ``titles`` and any passage has one."""
        if not titles or not any(p.title for p in self.evidence):
            return self.evidence_text
        return " ".join(f"{readable_title(p.title)}: {p.text}" if p.title else p.text for p in self.evidence)


def readable_title(title: str) -> str:
    """FEVER page ids (``Alvin_and_the_Chipmunks_-LRB-film-RRB-``) → ``Alvin and the Chipmunks (film)``."""
    return title.replace("_", " ").replace("-LRB-", "(").replace("-RRB-", ")").replace("-COLON-", ":").strip()


@dataclass
class NLIPair(Record):
    """A premise/hypothesis pair for the NLI verifier (``entailment`` / ``neutral`` / ``contradiction``)."""

    kind: ClassVar[str] = "nli_pair"
    id: str
    premise: str
    hypothesis: str
    label: str
    source: str
    split: str
    origin: str
    group_id: str = ""
    source_split: str = ""


@dataclass
class CorpusDocument(Record):
    """A retrievable unit of an evidence corpus: ``{doc_id, title, url, text}`` (docs/data.md#records)."""

    kind: ClassVar[str] = "corpus_document"
    doc_id: str
    title: str
    url: str
    text: str
    source: str
    origin: str


@dataclass
class RetrievalQuery(Record):
    """A query with the ids of the corpus documents that answer it."""

    kind: ClassVar[str] = "retrieval_query"
    query_id: str
    text: str
    gold_ids: list[str]
    source: str
    split: str
    origin: str
    source_split: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class QAAnswer(Record):
    kind: ClassVar[str] = "qa_answer"
    answer: str
    answer_type: str = ""
    source_url: str = ""
    boolean_explanation: str = ""


@dataclass
class QAPair(Record):
    kind: ClassVar[str] = "qa_pair"
    question: str
    answers: list[QAAnswer] = field(default_factory=list)


@dataclass
class AveritecClaim(Record):
    """An AVeriTeC / FEVER-8 claim with its question–answer evidence and a four-way verdict (docs/data.md#records)."""

    kind: ClassVar[str] = "averitec_claim"
    id: str
    claim: str
    label: str  # one of AVERITEC_LABELS ("" for unlabelled predictions)
    source: str
    split: str
    origin: str
    source_split: str = ""
    speaker: str = ""
    claim_date: str = ""
    justification: str = ""
    questions: list[QAPair] = field(default_factory=list)


@dataclass
class ArticleItem(Record):
    """A CheckThat 2026 Task 3 input: claim, claimant, verdict and evidence; optional reference article."""

    kind: ClassVar[str] = "article_item"
    id: str
    claim: str
    claimant: str
    label: str
    evidence: list[EvidencePassage]
    source: str
    split: str
    origin: str
    reference_article: str = ""


@dataclass
class ReferenceArticle(Record):
    """A human-written fact-checking article (WatClaimCheck via FlawCheck), the target text of Task 3."""

    kind: ClassVar[str] = "reference_article"
    id: str
    label: str  # the outlet's native verdict (incorrect / correct / partly false / unproven)
    paragraphs: list[str]
    source: str
    split: str
    origin: str
    source_split: str = ""


# Field name → record type of its list elements, for from_dict.
_NESTED: dict[str, type[Record]] = {"evidence": EvidencePassage, "questions": QAPair, "answers": QAAnswer}

RECORD_TYPES: dict[str, type[Record]] = {
    cls.kind: cls
    for cls in (ClaimExample, NLIPair, CorpusDocument, RetrievalQuery, AveritecClaim, ArticleItem, ReferenceArticle)
}
