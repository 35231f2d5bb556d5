"""Knowledge stores in the AVeriTeC format, chunking, and the proxy stores built from AVeriTeC QA evidence.

A store is a folder with one file per claim, ``<claim_id>.json``, holding JSON lines ``{"url": ...,
"url2text": [sentence, ...]}`` (the official AVeriTeC / FEVER-8 knowledge store layout; other fields are kept
but not needed), or a single JSONL file whose lines also carry ``claim_id``. Files are read line by line, one
claim at a time, so a store of any size streams.

Chunking (docs/pipelines/aic.md#knowledge-stores): whole sentences are packed in order into chunks of at most
``max_chars`` characters (joined by one space); a sentence longer than that is cut at word boundaries (a word longer
than the limit is cut where it stands) so the bound always holds. Each chunk carries its URL and the full text of the
chunk before and after it in the same document.

**Proxy stores.** The official knowledge stores are not available here (PROVENANCE.md). A proxy store gives each
claim its own QA answers as documents under their source URLs (answers split into sentences with NLTK's
English Punkt), mixed with the documents of other claims as distractors, so that retrieval has something to
reject. Such a store hands the gold answers to the system: ``own_documents=False`` builds the distractors-only
floor. Every line of a proxy store carries ``proxy_role`` (``own`` or ``distractor``).
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from veracity.data_prep.errors import DataError
from veracity.infer.retrieval.sparse import BM25Index
from veracity.io import atomic_writer

logger = logging.getLogger(__name__)
DEFAULT_CHUNK_CHARS = 2048  # mxbai's 512 tokens at ~4 characters per token (the paper's choice)


@dataclass(frozen=True)
class StoreDocument:
    url: str
    sentences: tuple[str, ...]
    role: str = ""  # proxy stores: "own" or "distractor"; real stores: ""


@dataclass(frozen=True)
class Chunk:
    chunk_id: int  # position in the claim's chunk list
    url: str
    text: str
    context_before: str
    context_after: str
    role: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"chunk_id": self.chunk_id, "url": self.url, "text": self.text, "context_before": self.context_before,
                "context_after": self.context_after, "role": self.role}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Chunk:
        return cls(int(data["chunk_id"]), data["url"], data["text"], data["context_before"], data["context_after"],
                   data.get("role", ""))


# --- chunking (pure) ------------------------------------------------------------------------------------------


def split_long(sentence: str, max_chars: int) -> list[str]:
    """Pieces of at most ``max_chars`` characters, cut at spaces where possible."""
    pieces, rest = [], sentence.strip()
    while len(rest) > max_chars:
        cut = rest.rfind(" ", 0, max_chars + 1)
        if cut <= 0:
            cut = max_chars  # one word longer than the limit: cut inside it
        pieces.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    if rest:
        pieces.append(rest)
    return pieces


def pack_sentences(sentences: Iterable[str], max_chars: int = DEFAULT_CHUNK_CHARS) -> list[str]:
    """Whole sentences packed in order into texts of at most ``max_chars`` characters (joined by one space)."""
    if max_chars < 1:
        raise ValueError(f"max_chars must be >= 1, got {max_chars}")
    chunks: list[str] = []
    buffer = ""
    for sentence in sentences:
        for piece in split_long(sentence, max_chars) if len(sentence.strip()) > max_chars else [sentence.strip()]:
            if not piece:
                continue
            if buffer and len(buffer) + 1 + len(piece) > max_chars:
                chunks.append(buffer)
                buffer = ""
            buffer = f"{buffer} {piece}" if buffer else piece
    if buffer:
        chunks.append(buffer)
    return chunks


def chunk_documents(documents: Iterable[StoreDocument], max_chars: int = DEFAULT_CHUNK_CHARS) -> list[Chunk]:
    """Every document's chunks with URL and the full text of its neighbours in the same document."""
    chunks: list[Chunk] = []
    for document in documents:
        texts = pack_sentences(document.sentences, max_chars)
        for k, text in enumerate(texts):
            chunks.append(Chunk(len(chunks), document.url, text, texts[k - 1] if k else "",
                                texts[k + 1] if k + 1 < len(texts) else "", document.role))
    return chunks


# --- reading ---------------------------------------------------------------------------------------------------


def _document(row: Any, path: Path, line: int) -> StoreDocument:
    if not isinstance(row, dict):
        raise DataError(path, line, "expected a JSON object per line")
    url, sentences = row.get("url"), row.get("url2text")
    if not isinstance(url, str):
        raise DataError(path, line, "missing or non-string url", "url")
    if isinstance(sentences, str):
        sentences = [sentences]
    if not isinstance(sentences, list) or not all(isinstance(s, str) for s in sentences):
        raise DataError(path, line, "expected a list of sentence strings", "url2text")
    return StoreDocument(url, tuple(sentences), str(row.get("proxy_role", "")))


def read_store_file(path: str | Path) -> Iterator[StoreDocument]:
    """The documents of one claim file, streamed line by line (empty lines skipped)."""
    path = Path(path)
    with open(path, encoding="utf-8-sig") as handle:
        for line, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except json.JSONDecodeError as error:
                raise DataError(path, line, f"malformed JSON: {error.msg}") from None
            yield _document(row, path, line)


class KnowledgeStore:
    """A store folder (``<claim_id>.json`` per claim) or one JSONL file with a ``claim_id`` on every line."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.exists():
            raise DataError(self.path, None, "knowledge store not found (a folder of <claim_id>.json or a JSONL)")
        self._offsets: dict[str, list[int]] | None = None

    def _file_offsets(self) -> dict[str, list[int]]:
        # one pass over a single-file store, remembering where each claim's lines start (not the lines)
        if self._offsets is None:
            self._offsets = {}
            with open(self.path, "rb") as handle:
                line, offset = 0, 0
                for raw in handle:
                    line += 1
                    if raw.strip():
                        try:
                            claim_id = json.loads(raw).get("claim_id")
                        except (json.JSONDecodeError, AttributeError):
                            raise DataError(self.path, line, "malformed JSON line") from None
                        if claim_id is None:
                            raise DataError(self.path, line, "a single-file store needs claim_id on every line",
                                            "claim_id")
                        self._offsets.setdefault(str(claim_id), []).append(offset)
                    offset += len(raw)
        return self._offsets

    def fingerprint(self, claim_id: str) -> str:
        """What identifies this claim's documents for caching: file, size and modification time."""
        if self.path.is_dir():
            path = self._claim_file(claim_id)
            stat = path.stat() if path else None
            return f"{path}:{stat.st_size}:{stat.st_mtime_ns}" if stat else "missing"
        stat = self.path.stat()
        return f"{self.path}#{claim_id}:{stat.st_size}:{stat.st_mtime_ns}"

    def _claim_file(self, claim_id: str) -> Path | None:
        for name in (f"{claim_id}.json", f"{claim_id}.jsonl"):
            if (self.path / name).is_file():
                return self.path / name
        return None

    def documents(self, claim_id: str) -> Iterator[StoreDocument]:
        """The claim's documents, streamed; a claim without a file has none."""
        if self.path.is_dir():
            path = self._claim_file(claim_id)
            if path is not None:
                yield from read_store_file(path)
            return
        with open(self.path, "rb") as handle:
            for offset in self._file_offsets().get(str(claim_id), []):
                handle.seek(offset)
                yield _document(json.loads(handle.readline()), self.path, 0)


# --- proxy stores from AVeriTeC records ------------------------------------------------------------------------


def answer_text(answer: Any) -> str:
    """What an annotator's answer says (Boolean answers with their explanation); '' for unanswerable ones."""
    if answer.answer_type == "Unanswerable" or not answer.answer.strip():
        return ""
    text = answer.answer.strip()
    if answer.answer_type == "Boolean" and answer.boolean_explanation.strip():
        text += ". " + answer.boolean_explanation.strip()
    return text


def own_documents(claim: Any, split_sentences: Any) -> list[StoreDocument]:
    """A claim's QA answers grouped under their source URLs (first-seen order), split into sentences."""
    by_url: dict[str, list[str]] = {}
    for pair in claim.questions:
        for answer in pair.answers:
            text = answer_text(answer)
            if text and answer.source_url:
                by_url.setdefault(answer.source_url, []).extend(split_sentences(text))
    return [StoreDocument(url, tuple(sentences), "own") for url, sentences in by_url.items()]


def distractor_claims(claims: Sequence[Any], index: int, count: int, mode: str, seed: int,
                      bm25: Any | None = None) -> list[int]:
    """Positions of the other claims whose documents become claim ``index``'s distractors.

    ``bm25``: the most similar claims by BM25 over claim texts (hard distractors, same topic); ``random``: a
    seeded sample. A claim with the same text as claim ``index`` is never a distractor.
    """
    if count <= 0:
        return []
    same = claims[index].claim.strip().lower()
    allowed = [k for k in range(len(claims)) if k != index and claims[k].claim.strip().lower() != same]
    if mode == "random":
        return sorted(random.Random(f"{seed}:{claims[index].id}").sample(allowed, min(count, len(allowed))))
    if mode != "bm25" or bm25 is None:
        raise ValueError(f"distractor mode must be 'bm25' (with an index) or 'random', got {mode!r}")
    allowed_set = set(allowed)
    hits = bm25.search([claims[index].claim], k=min(len(claims), count + 5))[0]
    chosen = [int(doc) for doc, _ in hits if int(doc) in allowed_set][:count]
    rest = [k for k in random.Random(f"{seed}:{claims[index].id}").sample(allowed, len(allowed)) if k not in chosen]
    return chosen + rest[: count - len(chosen)]  # few BM25 matches: top up with random claims


def build_proxy_store(claims: Sequence[Any], target_ids: Iterable[str], output: str | Path, *,
                      own: bool = True, distractors: int = 10, mode: str = "bm25", seed: int = 13,
                      store_id: Any = None) -> dict[str, Any]:
    """Write ``<output>/<claim_id>.json`` for each claim in ``target_ids``; returns counts for the summary.

    Args:
        claims: every AveritecClaim of the pool (distractors come from all of them).
        target_ids: ids (``AveritecClaim.id``) of the claims to write a store for.
        own: include the claim's own answer documents (False: the distractors-only floor).
        distractors: how many other claims lend their documents.
        store_id: maps an AveritecClaim id to the store's claim id (default: the id itself).
    """
    import punkt  # lazy: only a proxy store's sentences need it

    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    position = {c.id: k for k, c in enumerate(claims)}
    bm25 = BM25Index.build([str(k) for k in range(len(claims))], [c.claim for c in claims]) if mode == "bm25" \
        else None
    store_id = store_id or (lambda claim_id: claim_id)
    counts = {"claims": 0, "own_documents": 0, "distractor_documents": 0}
    for claim_id in target_ids:
        index = position[claim_id]
        mine = own_documents(claims[index], punkt.sent_tokenize)
        own_urls = {d.url for d in mine}
        others = [d for k in distractor_claims(claims, index, distractors, mode, seed, bm25)
                  for d in own_documents(claims[k], punkt.sent_tokenize) if d.url not in own_urls]
        others = [StoreDocument(d.url, d.sentences, "distractor") for d in others]
        documents = (mine if own else []) + others
        random.Random(f"{seed}:order:{claim_id}").shuffle(documents)  # own documents are not simply first
        with atomic_writer(output / f"{store_id(claim_id)}.json") as handle:
            for d in documents:
                handle.write(json.dumps({"claim_id": store_id(claim_id), "url": d.url, "url2text": list(d.sentences),
                                         "proxy_role": d.role}, ensure_ascii=False) + "\n")
        counts["claims"] += 1
        counts["own_documents"] += len(mine) if own else 0
        counts["distractor_documents"] += len(others)
    return counts
