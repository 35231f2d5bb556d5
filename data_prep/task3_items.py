"""Task items of CheckThat 2026 Task 3 — claim, claimant, verdict, evidence ``[{url, text}]``, optional reference
article — from prepared AVeriTeC records or from a user's files in WatClaimCheck format, through one schema.

The schema (what ``veracity infer uts`` writes to ``items.jsonl`` and ``veracity eval m4 --items`` reads)::

    {"id": "dev-3", "claim": "...", "claimant": "...", "verdict": "Refuted",
     "evidence": [{"url": "https://...", "text": "..."}], "reference_article": "...", "reviewer": "..."}

``reference_article`` and ``reviewer`` may be empty. WatClaimCheck records (one JSON object each, in a JSON list or a
JSONL file) are ``{"metadata": {"id", "claimant", "claim", "premise_articles"}, "label": {"rating",
"review_article", "reviewer_name"}}``; ``premise_articles`` maps each URL to its text — an article file name (a JSON
list of paragraphs, a JSON string, or plain text) looked up in ``articles_dir`` — or is a list of ``{url, text}``;
``review_article`` is inline text, a list of paragraphs, or a file name looked up in ``review_dir`` then
``articles_dir``. ``label`` is optional (test files have none).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veracity.data_prep.errors import DataError
from veracity.data_prep.readers import read_jsonl


@dataclass
class Evidence:
    url: str
    text: str


@dataclass
class TaskItem:
    id: str
    claim: str
    claimant: str = ""
    verdict: str = ""
    evidence: list[Evidence] = field(default_factory=list)
    reference_article: str = ""
    reviewer: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "claim": self.claim, "claimant": self.claimant, "verdict": self.verdict,
                "evidence": [{"url": e.url, "text": e.text} for e in self.evidence],
                "reference_article": self.reference_article, "reviewer": self.reviewer}


def from_article_item(record: Any) -> TaskItem:
    """A prepared ``ArticleItem`` (``averitec_task3_*``: QA answers grouped by source URL, the justification as
    the reference) as a task item."""
    return TaskItem(id=record.id, claim=record.claim, claimant=record.claimant, verdict=record.label,
                    evidence=[Evidence(p.url, p.text) for p in record.evidence if p.url],
                    reference_article=record.reference_article)


def _text_field(value: Any, path: Path, line: int, name: str) -> str:
    if value is None:
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise DataError(path, line, f"expected a string, got {type(value).__name__}", field=name)
    return value


def _read_text_file(candidates: list[Path]) -> str | None:
    for path in candidates:
        if path.is_file():
            raw = path.read_text(encoding="utf-8-sig")
            try:
                data = json.loads(raw)
            except json.JSONDecodeError:
                return raw
            if isinstance(data, list):
                return "\n".join(str(p) for p in data if isinstance(p, str) and p.strip())
            return data if isinstance(data, str) else raw
    return None


def _document(value: Any, dirs: list[Path], path: Path, line: int, name: str) -> str:
    """Inline text, a list of paragraphs, or a file name (no whitespace) found in one of ``dirs``."""
    if isinstance(value, list):
        if not all(isinstance(p, str) for p in value):
            raise DataError(path, line, "expected a list of paragraph strings", field=name)
        return "\n".join(p for p in value if p.strip())
    text = _text_field(value, path, line, name)
    if not text or any(ch.isspace() for ch in text.strip()):
        return text
    found = _read_text_file([d / text for d in dirs])
    if found is None:
        raise DataError(path, line, f"file {text!r} not found in {', '.join(map(str, dirs))}", field=name)
    return found


def watclaimcheck_item(row: dict[str, Any], path: Path, line: int, articles_dir: Path,
                       review_dir: Path) -> TaskItem:
    """One WatClaimCheck-format record as a task item (see the module docstring)."""
    meta, label = row.get("metadata"), row.get("label") or {}
    if not isinstance(meta, dict):
        raise DataError(path, line, "expected an object", field="metadata")
    if not isinstance(label, dict):
        raise DataError(path, line, "expected an object", field="label")
    item_id = meta.get("id", label.get("id", row.get("id")))
    if item_id in (None, ""):
        raise DataError(path, line, "missing id", field="metadata.id")
    claim = _text_field(meta.get("claim"), path, line, "metadata.claim").strip()
    if not claim:
        raise DataError(path, line, "missing or empty claim", field="metadata.claim")
    premises = meta.get("premise_articles") or {}
    if isinstance(premises, dict):
        pairs = list(premises.items())
    elif isinstance(premises, list) and all(isinstance(p, dict) and isinstance(p.get("url"), str) for p in premises):
        pairs = [(p["url"], p.get("text", p.get("paragraphs", ""))) for p in premises]
    else:
        raise DataError(path, line, "expected {url: article} or a list of {url, text}",
                        field="metadata.premise_articles")
    evidence = [Evidence(str(url), _document(value, [articles_dir], path, line, f"metadata.premise_articles[{url}]"))
                for url, value in pairs]
    reference = _document(label.get("review_article"), [review_dir, articles_dir], path, line, "label.review_article")
    return TaskItem(id=str(item_id), claim=claim, claimant=_text_field(meta.get("claimant"), path, line,
                                                                        "metadata.claimant"),
                    verdict=_text_field(label.get("rating", label.get("original_rating")), path, line, "label.rating"),
                    evidence=evidence, reference_article=reference,
                    reviewer=_text_field(label.get("reviewer_name") or label.get("reviewer_site"), path, line,
                                         "label.reviewer_name"))


def schema_item(row: dict[str, Any], path: Path, line: int) -> TaskItem:
    """One record of the task-item schema (``items.jsonl``)."""
    if row.get("id") in (None, ""):
        raise DataError(path, line, "missing id", field="id")
    claim = _text_field(row.get("claim"), path, line, "claim")
    evidence = row.get("evidence") or []
    if not isinstance(evidence, list) or not all(
            isinstance(e, dict) and isinstance(e.get("url"), str) and isinstance(e.get("text", ""), str)
            for e in evidence):
        raise DataError(path, line, "expected a list of {url, text}", field="evidence")
    return TaskItem(id=str(row["id"]), claim=claim, claimant=_text_field(row.get("claimant"), path, line, "claimant"),
                    verdict=_text_field(row.get("verdict"), path, line, "verdict"),
                    evidence=[Evidence(e["url"], e.get("text", "")) for e in evidence],
                    reference_article=_text_field(row.get("reference_article"), path, line, "reference_article"),
                    reviewer=_text_field(row.get("reviewer"), path, line, "reviewer"))


def read_items(path: str | Path, articles_dir: str | Path | None = None,
               review_dir: str | Path | None = None) -> list[TaskItem]:
    """Task items from a JSONL or JSON (list) file of schema or WatClaimCheck records (told apart per record by
    ``metadata``). ``articles_dir`` / ``review_dir`` default to ``articles/`` and ``review/`` beside the file.

    Raises:
        DataError: a bad record, naming the file, line (or record number in a JSON list) and field.
    """
    path = Path(path)
    articles = Path(articles_dir) if articles_dir else path.parent / "articles"
    reviews = Path(review_dir) if review_dir else path.parent / "review"
    if not path.is_file():
        raise DataError(path, None, "no such file")
    head = path.read_text(encoding="utf-8-sig").lstrip()[:1]
    if head == "[":
        try:
            data = json.loads(path.read_text(encoding="utf-8-sig"))
        except json.JSONDecodeError as error:
            raise DataError(path, error.lineno, f"malformed JSON ({error.msg})") from None
        rows = list(enumerate(data, start=1))
    else:
        rows = list(read_jsonl(path))
    items, seen = [], set()
    for line, row in rows:
        if not isinstance(row, dict):
            raise DataError(path, line, "expected a JSON object")
        item = (watclaimcheck_item(row, path, line, articles, reviews) if "metadata" in row
                else schema_item(row, path, line))
        if item.id in seen:
            raise DataError(path, line, f"duplicate id {item.id!r}", field="id")
        seen.add(item.id)
        items.append(item)
    return items
