"""FEVER family: paper_dev (evidence pointers), FEVER-Symmetric, SufficientFacts, live-Wikipedia paragraphs.

FEVER raw files carry only evidence *pointers* ``[annotation_id, evidence_id, page, sentence]``. They are
resolved against a FEVER ``wiki-pages`` dump when one is given; otherwise the evidence text comes from the
shipped RTE view of FEVER dev (``nli/fever_dev_rte``), which holds the gold evidence text per paper_dev claim.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from veracity.data_prep.benchmarks import evidence_retrieval_benchmark
from veracity.data_prep.context import LoadContext
from veracity.data_prep.errors import DataError
from veracity.data_prep.rows import RawRow
from veracity.data_prep.schema import NOT_ENOUGH_INFO, ClaimExample, CorpusDocument, EvidencePassage, Record

PAPER_DEV = "fever/paper_dev.shared.jsonl"
RTE_DEV = ("nli/fever_dev_rte/rte_fever_dev.part0.jsonl", "nli/fever_dev_rte/rte_fever_dev.part1.jsonl")
SYMMETRIC = {
    "dev": "fever_symmetric/fever_symmetric_dev.shared.jsonl",
    "test": "fever_symmetric/fever_symmetric_test.shared.jsonl",
}
SUFFICIENT_FACTS_FEVER = "fever/sufficient_facts_fever.shared.jsonl"
# Id space of FEVER claim ids: paper_dev, the hub's FEVER and FEVER-Symmetric cases all use them.
FEVER_IDS = "fever"
REACT = "fever/react_wikipedia_observations.shared.jsonl"


def load_fever(ctx: LoadContext, wiki_pages: Path | None = None) -> dict[str, list[Record]]:
    """All FEVER-derived outputs, keyed by output name."""
    symmetric = load_symmetric(ctx)
    sufficient = load_sufficient_facts(ctx, "sufficient_facts_fever", SUFFICIENT_FACTS_FEVER)
    originals = [e for e in sufficient if e.meta.get("variant") == "original"]
    corpus, queries = evidence_retrieval_benchmark(symmetric + originals, "fever_evidence")
    for name in ("fever_evidence_corpus", "fever_evidence_queries"):
        ctx.inputs[name] = ctx.inputs["fever_symmetric"] + ctx.inputs["sufficient_facts_fever"]
    return {
        "fever_paper_dev": load_paper_dev(ctx, wiki_pages),
        "fever_symmetric": symmetric,
        "sufficient_facts_fever": sufficient,
        "fever_wiki_paragraphs": load_react_paragraphs(ctx),
        "fever_evidence_corpus": corpus,
        "fever_evidence_queries": queries,
    }


# --- paper_dev ---------------------------------------------------------------------------------------------


def _pointer_sets(row: RawRow) -> list[list[tuple[str, int]]]:
    """FEVER evidence sets as lists of (page, sentence); NEI sets (null pointers) become empty and are dropped."""
    sets = []
    for set_index, evidence_set in enumerate(row.list("evidence")):
        if not isinstance(evidence_set, list):
            raise row.error(f"evidence set {set_index} is not a list", field="evidence")
        pointers = []
        for pointer in evidence_set:
            if not isinstance(pointer, list) or len(pointer) != 4:
                raise row.error(f"evidence set {set_index}: expected [ann, ev, page, sentence]", field="evidence")
            page, sentence = pointer[2], pointer[3]
            if page is None:
                continue
            if not isinstance(page, str) or isinstance(sentence, bool) or not isinstance(sentence, int):
                raise row.error(f"evidence set {set_index}: bad pointer {pointer!r}", field="evidence")
            pointers.append((page, sentence))
        if pointers:
            sets.append(pointers)
    return sets


def read_wiki_pages(ctx: LoadContext, folder: Path, wanted: set[str]) -> dict[tuple[str, int], str]:
    """Sentences of the wanted pages from a FEVER ``wiki-pages`` folder (``wiki-*.jsonl``; ``lines`` field).

    Only the pages some claim points at are kept, so memory grows with the claims, not with the dump.
    """
    if not folder.is_dir():
        raise DataError(folder, None, "FEVER wiki-pages folder not found (expected wiki-*.jsonl files)")
    sentences: dict[tuple[str, int], str] = {}
    for path in sorted(folder.glob("*.jsonl")):
        for row in ctx.rows("fever_paper_dev", path):
            page = row.data.get("id")
            if page not in wanted:
                continue
            for raw_line in row.str("lines").split("\n"):
                parts = raw_line.split("\t")
                if len(parts) >= 2 and parts[0].isdigit() and parts[1]:
                    sentences[(page, int(parts[0]))] = parts[1]
    return sentences


def _rte_premises(ctx: LoadContext) -> dict[str, str]:
    premises: dict[str, str] = {}
    for relative in RTE_DEV:
        if not (ctx.data_root / relative).exists():
            return {}
        for row in ctx.rows("fever_paper_dev", ctx.path(relative)):
            for fever_id in row.list("paper_dev_shared_ids", required=False):
                premises.setdefault(str(fever_id), row.str("premise"))
    return premises


def load_paper_dev(ctx: LoadContext, wiki_pages: Path | None = None) -> list[ClaimExample]:
    out = "fever_paper_dev"
    return convert_fever_rows(ctx, list(ctx.rows(out, ctx.path(PAPER_DEV))), out, "paper_dev", wiki_pages)


def convert_fever_rows(
    ctx: LoadContext, rows: list[RawRow], out: str, source_split: str, wiki_pages: Path | None = None
) -> list[ClaimExample]:
    """FEVER rows (``id, label, claim, evidence`` pointers) → examples, evidence text resolved where possible."""
    ctx.group_namespace(out, FEVER_IDS)
    sentences: dict[tuple[str, int], str] = {}
    premises: dict[str, str] = {}
    if wiki_pages is not None:
        wanted = {p for row in rows for s in _safe_sets(row) for p, _ in s}
        sentences = read_wiki_pages(ctx, wiki_pages, wanted)
    else:
        premises = _rte_premises(ctx)

    def convert(row: RawRow) -> ClaimExample | None:
        claim = row.str("claim").strip()
        if not claim:
            ctx.drop(out, "empty_claim")
            return None
        fever_id = row.id("id")
        if not ctx.first_of_id(out, f"fever-{fever_id}", row):
            return None
        label = ctx.ternary(row, "label")
        sets = _pointer_sets(row)
        passage_ids: list[str] = []
        for pointers in sets:
            for page, sentence in pointers:
                pid = f"{page}:{sentence}"
                if pid not in passage_ids:
                    passage_ids.append(pid)
        evidence = [
            EvidencePassage(text=sentences.get((pid.rsplit(":", 1)[0], int(pid.rsplit(":", 1)[1])), ""),
                            title=pid.rsplit(":", 1)[0], passage_id=pid)
            for pid in passage_ids
        ]
        if wiki_pages is not None:
            complete = [s for s in sets if all(p in sentences for p in s)]
            evidence_text = " ".join(sentences[p] for p in complete[0]) if complete else ""
            resolved_by = "wiki-pages" if complete else ""
        else:
            evidence_text = premises.get(fever_id, "")
            resolved_by = "nli/fever_dev_rte" if evidence_text else ""
        if label != NOT_ENOUGH_INFO and not evidence_text:
            ctx.note(out, "evidence_text_unresolved")
        return ClaimExample(
            id=f"fever-{fever_id}",
            claim=claim,
            label=label,
            evidence_text=evidence_text,
            source=out,
            split=ctx.split(claim),
            origin=row.origin,
            group_id=fever_id,
            source_split=source_split,
            evidence=evidence,
            evidence_sets=[[f"{p}:{s}" for p, s in pointers] for pointers in sets],
            meta={"evidence_resolved_by": resolved_by},
        )

    return ctx.convert(rows, convert)


def _safe_sets(row: RawRow) -> list[list[tuple[str, int]]]:
    try:
        return _pointer_sets(row)
    except Exception:  # reported when the row itself is converted
        return []


# --- FEVER-Symmetric ---------------------------------------------------------------------------------------


def symmetric_case_id(pair_id: str) -> str:
    """The contrastive case of a FEVER-Symmetric pair: the FEVER id of its original claim.

    The original pair carries the FEVER claim id (at most 6 digits); its synthetic contrasts carry that id
    followed by ``000000`` and the pair number (``54253`` → ``542530000002``, ``542530000003``, ...).
    """
    if len(pair_id) > 7 and pair_id.isdigit() and pair_id[-7:-1] == "000000":
        return pair_id[:-7]
    return pair_id


def load_symmetric(ctx: LoadContext) -> list[ClaimExample]:
    out = "fever_symmetric"
    ctx.group_namespace(out, FEVER_IDS)
    records: list[ClaimExample] = []
    for source_split, relative in SYMMETRIC.items():

        def convert(row: RawRow, source_split: str = source_split) -> ClaimExample | None:
            claim = row.str("claim").strip()
            if not claim:
                ctx.drop(out, "empty_claim")
                return None
            pair_id = row.id("id")
            # "-1": ids kept as they were when repeated pair ids were numbered; a repeat is now dropped (identical)
            # or an error (other content), as in every loader
            record_id = f"fs-{source_split}-{pair_id}-1"
            if not ctx.first_of_id(out, record_id, row):
                return None
            evidence = row.str("evidence")
            return ClaimExample(
                id=record_id,
                claim=claim,
                label=ctx.ternary(row, "label"),
                evidence_text=evidence,
                source=out,
                # Provisional: prepare() puts the whole case (original + synthetic contrasts, joined by
                # group_id) and every other record of its claims in one split.
                split=ctx.split(claim),
                origin=row.origin,
                group_id=symmetric_case_id(pair_id),
                source_split=source_split,
                evidence=[EvidencePassage(text=evidence)],
            )

        records += ctx.convert(ctx.rows(out, ctx.path(relative)), convert)
    return records


# --- SufficientFacts (FEVER and VitaminC parts share the format) -------------------------------------------

_SPAN = re.compile(r"<span[^>]*>(.*?)</span>", re.S)
_TITLE = re.compile(r"\[\[([^\]]*)\]\]\s*")


def original_passages(text_orig: str) -> list[EvidencePassage]:
    """SufficientFacts ``text_orig`` → the original evidence, one passage per ``[[Title]]`` marker, the removed
    span's text kept (so the original carries its article titles, as the reduced evidence does)."""
    parts = _TITLE.split(_SPAN.sub(r"\1", text_orig))  # [text before any title, title, text, title, text, ...]
    titled = [("", parts[0])] + list(zip(parts[1::2], parts[2::2], strict=True))
    passages = [(title.strip(), re.sub(r"\s+", " ", text).strip()) for title, text in titled]
    return [EvidencePassage(text=text, title=title) for title, text in passages if text]


def load_sufficient_facts(ctx: LoadContext, out: str, relative: str) -> list[ClaimExample]:
    """Two examples per row: the original evidence (``label_before``) and the reduced one.

    The reduced evidence is NOT ENOUGH INFO when the crowd said so (``label_after == NOT ENOUGH``); otherwise
    it keeps the original label. These are real, human-judged NEI contrasts for the same claim.
    """

    def convert(row: RawRow) -> list[ClaimExample] | None:
        claim = row.str("claim").strip()
        if not claim:
            ctx.drop(out, "empty_claim")
            return None
        label_before = ctx.ternary(row, "label_before")
        after = row.str("label_after")
        if after.upper().startswith("ENOUGH"):
            label_after = label_before
        elif after.upper() == "NOT ENOUGH":
            label_after = NOT_ENOUGH_INFO
        else:
            raise row.error(f"unknown value {after!r} (expected NOT ENOUGH or ENOUGH -- ...)", field="label_after")
        reduced = []
        for item in row.list("evidence"):
            if not (isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item)):
                raise row.error(f"expected [title, text] pairs, got {item!r:.80}", field="evidence")
            reduced.append(EvidencePassage(text=item[1], title=item[0]))
        original = original_passages(row.str("text_orig"))
        key = hashlib.sha1(f"{claim}\x00{row.str('text_orig')}".encode()).hexdigest()[:12]
        if not ctx.first_of_id(out, f"{out}-{key}", row):
            return None
        split = ctx.split(claim)
        common = dict(claim=claim, source=out, split=split, origin=row.origin, group_id=key)
        meta = {"removal_type": row.opt_str("type"), "agreement": row.opt_str("agreement"), "label_after": after}
        return [
            ClaimExample(id=f"{out}-{key}-orig", label=label_before,
                         evidence_text=" ".join(p.text for p in original), evidence=original,
                         meta={**meta, "variant": "original"}, **common),
            ClaimExample(id=f"{out}-{key}-reduced", label=label_after,
                         evidence_text=" ".join(p.text for p in reduced), evidence=reduced,
                         meta={**meta, "variant": "reduced"}, **common),
        ]

    return ctx.convert(ctx.rows(out, ctx.path(relative)), convert)


# --- Live Wikipedia paragraphs (ReAct observations) → corpus ------------------------------------------------

_SEARCH = re.compile(r"^(Search|Lookup)\[(.*)\]$", re.S)


def load_react_paragraphs(ctx: LoadContext) -> list[CorpusDocument]:
    """Wikipedia paragraphs returned to a ReAct agent for paper_dev claims, deduplicated by text.

    API misses ("Could not find ...") are dropped and counted.
    """
    out = "fever_wiki_paragraphs"
    seen: set[str] = set()

    def convert(row: RawRow) -> list[CorpusDocument]:
        docs = []
        title = ""
        for index, obs in enumerate(row.list("observations")):
            if not isinstance(obs, dict) or not isinstance(obs.get("observation"), str):
                raise row.error(f"observation {index}: expected {{action, observation}}", field="observations")
            match = _SEARCH.match(str(obs.get("action", "")))
            if match and match.group(1) == "Search":
                title = match.group(2).strip()
            text = obs["observation"].strip()
            if not text or text.startswith("Could not find") or text.startswith("(Result"):
                ctx.drop(out, "api_miss_or_lookup")
                continue
            doc_id = "wiki-" + hashlib.sha1(text.encode()).hexdigest()[:16]
            if doc_id in seen:
                ctx.drop(out, "duplicate_paragraph")
                continue
            seen.add(doc_id)
            url = "https://en.wikipedia.org/wiki/" + title.replace(" ", "_") if title else ""
            docs.append(CorpusDocument(doc_id=doc_id, title=title, url=url, text=text, source=out, origin=row.origin))
        return docs

    return ctx.convert(ctx.rows(out, ctx.path(REACT)), convert)
