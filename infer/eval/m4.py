"""M4, the CheckThat 2026 Task 3 score of generated fact-checking articles, as the UTS paper describes it.

Usage: veracity eval m4 --articles O/articles.jsonl --items O/items.jsonl --output_dir O/m4
       veracity eval m4 --items O/items.jsonl --reference_as_article true --output_dir O/m4_reference

The official scorer is not public: this is our implementation of the paper's description (seed 002, §3), with the
choices it leaves open made here and written down. Per item, with the article parsed by the one strict citation
parser (``data_prep/task3_citations.py``):

- **entailment** — the generated article (citations stripped) and the reference article are each split into
  sentences (English Punkt) and then into consecutive chunks of ``chunk_sentences`` = 3 sentences (the last may be
  shorter). With ``P(p ⇒ h)`` the NLI verifier's entailment probability of hypothesis ``h`` given premise ``p``:
  ``A = mean_g max_r P(r ⇒ g)`` over generated chunks ``g`` (generated side, precision-like: is each generated
  chunk entailed by some reference chunk) and ``B = mean_r max_g P(g ⇒ r)`` over reference chunks ``r``
  (reference side, recall-like); ``entailment = (A + B) / 2``. An empty article scores 0; an item without a
  reference has no entailment and no M4 (left out of those means).
- **citation recall** — each cite sentence ``s`` (a sentence with strict citations; its URLs ``U`` the union of
  them) is judged once: is ``s`` without its citations supported by the concatenated evidence texts of ``U``?
  (The LLM judge of ``infer/eval/citation_judge.py``, held to answering ``yes`` or ``no`` unless ``--constrained
  false``.)
  ``recall = (# supported cite sentences) / (# cite sentences + # malformed citations)``.
- **citation precision** — a citation ``(s, u)`` is precise when ``s`` is supported and, if ``s`` cites more than one
  URL, ``u`` is needed: ``u``'s text alone supports ``s``, or the other URLs' texts without ``u`` do not (ALCE's
  rule). ``precision = (# precise citations) / (# citations + # malformed citations)``; with one URL per cite
  sentence precision equals recall, as the paper notes. A cited URL that is not among the item's evidence has no
  text: it supports nothing. An article without citations scores 0 on both.
- **coverage** — ``|cited URLs ∩ evidence URLs| / |evidence URLs|`` (both through ``citable_url``; 1 for an item
  without evidence).
- **M4** — the unweighted mean of the four.

Malformed citations (text that opens like a citation but does not parse strictly) are counted and penalised: each
is one more failed cite sentence and one more imprecise citation. Corpus figures are means over items (entailment
over items with a reference); ``m4`` is the mean of the four corpus means. Writes ``metrics.json`` (exactly ``m4,
entailment, citation_recall, citation_precision, coverage, n``), ``per_item.jsonl`` (every sub-metric, the cite
sentences with their verdicts, malformed citations), ``details.json`` (counts, which judge and verifier scored)
and ``run_config.yaml``. An item without an article is scored as an empty article (counted).

Errors follow the project's one rule (an error is a wrong answer, and its count is shown): ``veracity infer uts``
writes no article for an item whose drafting raised, so that item is scored as an empty article — 0 entailment,
citation recall and precision (coverage is 1 only for an item without evidence URLs) — and counted in ``n``; the
count is ``missing_articles`` in ``details.json`` (``metrics.json`` keeps exactly the six keys above).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from veracity.config import make_parser as parser_for
from veracity.config import parse_config
from veracity.data_prep.errors import DataError
from veracity.data_prep.readers import read_jsonl
from veracity.data_prep.task3_citations import ParsedArticle, citable_url, parse_article, strip_citations
from veracity.data_prep.task3_items import read_items
from veracity.data_prep.text import split_sentences
from veracity.infer.eval.citation_judge import DEFAULT_JUDGE_PROMPT, Judge, NLIJudge, check_prompt
from veracity.io import write_json, write_jsonl
from veracity.models.device import resolve_device
from veracity.models.engine import DecodingTally, EngineConfig
from veracity.models.engine_factory import make_engine
from veracity.models.nli import NLIVerifier
from veracity.rundir import record_facts, summarise_facts, write_run_config

logger = logging.getLogger(__name__)
METRIC_KEYS = ("m4", "entailment", "citation_recall", "citation_precision", "coverage", "n")
Predict = Callable[[Sequence[str], Sequence[str]], np.ndarray]
Pair = tuple[str, str]


@dataclass
class M4Config:
    articles: str | None = field(default=None, metadata={
        "help": "JSONL (or JSON list) of {id, factchecking_article}; not needed with --reference_as_article."})
    items: str = field(default="", metadata={"help": "The task items (items.jsonl of `veracity infer uts`, the "
                                                     "task-item schema or WatClaimCheck records)."})
    output_dir: str = field(default="runs/uts/m4", metadata={"help": "Where metrics.json and per_item.jsonl go."})
    reference_as_article: bool = field(default=False, metadata={
        "help": "Score each item's own reference article (the human upper reference)."})
    articles_dir: str | None = field(default=None, metadata={
        "help": "WatClaimCheck premise article files (items that are WatClaimCheck records)."})
    review_dir: str | None = field(default=None, metadata={
        "help": "WatClaimCheck review article files (items that are WatClaimCheck records)."})
    chunk_sentences: int = field(default=3, metadata={"help": "Sentences per entailment chunk."})
    nli_model: str = field(default="embedded", metadata={"help": "NLI verifier: 'embedded', 'real', path, hub id."})
    nli_batch_size: int = field(default=32, metadata={"help": "(chunk, statement) pairs per verifier batch."})
    judge_prompt: str = field(default=DEFAULT_JUDGE_PROMPT, metadata={
        "help": "Judge prompt template with {statement} and {evidence}."})
    judge: str = field(default="llm", metadata={
        "help": "llm: the engine answers yes/no (the paper's judge); nli: the NLI verifier's P(entailment) >= "
                "judge_nli_threshold is a yes (a proxy, not the paper's scorer)."})
    judge_nli_threshold: float = field(default=0.5, metadata={
        "help": "judge nli: the P(entailment) from which the verifier says yes."})
    judge_max_new_tokens: int | None = field(default=None, metadata={
        "help": "New tokens of a judge answer; none: enough for yes/no when constrained (7), else 4."})
    judge_max_evidence_chars: int = field(default=4000, metadata={
        "help": "Characters of evidence the judge is shown (the rest is cut)."})
    constrained: bool = field(default=True, metadata={
        "help": "Constrain decoding to the answer's format where the engine can (the LLM judge: yes or no); the "
                "parser stays the final check. false: the model answers freely."})

    def __post_init__(self) -> None:
        if self.judge not in ("llm", "nli"):
            raise ValueError(f"judge must be llm or nli, got {self.judge!r}")
        if not self.items:
            raise ValueError("--items is required")
        if not self.articles and not self.reference_as_article:
            raise ValueError("give --articles, or --reference_as_article true")
        if self.chunk_sentences < 1:
            raise ValueError(f"chunk_sentences must be >= 1, got {self.chunk_sentences}")
        check_prompt(self.judge_prompt)


# --- pure metric functions ---------------------------------------------------------------------------------

def chunk(sentences: Sequence[str], size: int = 3) -> list[str]:
    """Consecutive groups of ``size`` sentences, each joined by a space (the last group may be shorter)."""
    return [" ".join(sentences[i : i + size]) for i in range(0, len(sentences), size)]


def entailment_pairs(generated: Sequence[str], reference: Sequence[str]) -> list[Pair]:
    """(premise, hypothesis) pairs the entailment score needs: every reference chunk ⇒ every generated chunk, and
    every generated chunk ⇒ every reference chunk."""
    return [(r, g) for g in generated for r in reference] + [(g, r) for r in reference for g in generated]


def entailment_score(generated: Sequence[str], reference: Sequence[str],
                     p_ent: Mapping[Pair, float]) -> dict[str, float]:
    """``A``, ``B`` and ``(A + B) / 2`` of the module docstring from chunk lists and entailment probabilities."""
    if not generated or not reference:
        return {"a_side": 0.0, "b_side": 0.0, "entailment": 0.0}
    a_side = float(np.mean([max(p_ent[(r, g)] for r in reference) for g in generated]))
    b_side = float(np.mean([max(p_ent[(g, r)] for g in generated) for r in reference]))
    return {"a_side": a_side, "b_side": b_side, "entailment": (a_side + b_side) / 2}


def cited_text(urls: Sequence[str], evidence: Mapping[str, str]) -> str:
    """The evidence texts of ``urls`` that are known, joined by newlines ('' when none is)."""
    return "\n".join(evidence[u] for u in urls if u in evidence and evidence[u].strip())


def judge_pairs(parsed: ParsedArticle, evidence: Mapping[str, str]) -> list[Pair]:
    """(statement, evidence) pairs the citation metrics need judged (pairs with no known evidence are not asked)."""
    pairs = []
    for cite in parsed.cites:
        pairs.append((cite.statement, cited_text(cite.urls, evidence)))
        if len(cite.urls) > 1:
            for url in cite.urls:
                pairs.append((cite.statement, cited_text([url], evidence)))
                pairs.append((cite.statement, cited_text([u for u in cite.urls if u != url], evidence)))
    return [p for p in dict.fromkeys(pairs) if p[1]]


def citation_scores(parsed: ParsedArticle, evidence: Mapping[str, str],
                    supported: Mapping[Pair, bool]) -> dict[str, Any]:
    """Citation recall, precision and their counts from judge verdicts (``supported[(statement, text)]``).

    Args:
        parsed: the article through :func:`parse_article`.
        evidence: citable URL → evidence text of the item.
        supported: verdicts for the pairs of :func:`judge_pairs`.
    """
    def ok(statement: str, urls: Sequence[str]) -> bool:
        text = cited_text(urls, evidence)
        return bool(text) and supported[(statement, text)]

    supported_cites, precise, citations, rows = 0, 0, 0, []
    for cite in parsed.cites:
        is_supported = ok(cite.statement, cite.urls)
        needed = [is_supported and (len(cite.urls) == 1 or ok(cite.statement, [u]) or
                                    not ok(cite.statement, [v for v in cite.urls if v != u])) and u in evidence
                  for u in cite.urls]
        supported_cites += is_supported
        precise += sum(needed)
        citations += len(cite.urls)
        rows.append({"sentence": cite.sentence, "urls": list(cite.urls), "supported": is_supported,
                     "precise": needed, "unknown_urls": [u for u in cite.urls if u not in evidence]})
    malformed = len(parsed.malformed)
    units, cited = len(parsed.cites) + malformed, citations + malformed
    return {"citation_recall": supported_cites / units if units else 0.0,
            "citation_precision": precise / cited if cited else 0.0,
            "cite_sentences": len(parsed.cites), "citations": citations, "malformed": malformed,
            "unknown_urls": sum(len(r["unknown_urls"]) for r in rows), "cites": rows,
            "malformed_text": [text for _, text in parsed.malformed]}


def coverage(parsed: ParsedArticle, evidence_urls: Sequence[str]) -> float:
    """Fraction of the item's evidence URLs the article cites (1.0 when the item has none)."""
    wanted = {citable_url(u) for u in evidence_urls if u.strip()}
    return len(wanted & set(parsed.cited_urls)) / len(wanted) if wanted else 1.0


def item_m4(scores: Mapping[str, Any]) -> float | None:
    parts = [scores["entailment"], scores["citation_recall"], scores["citation_precision"], scores["coverage"]]
    return None if any(p is None for p in parts) else float(np.mean(parts))


def corpus_metrics(per_item: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Means over items (entailment over items that have one) and ``m4`` = the mean of the four means."""
    def mean(key: str) -> float | None:
        values = [r[key] for r in per_item if r[key] is not None]
        return float(np.mean(values)) if values else None

    metrics: dict[str, Any] = {k: mean(k) for k in ("entailment", "citation_recall", "citation_precision",
                                                    "coverage")}
    parts = list(metrics.values())
    metrics["m4"] = None if any(p is None for p in parts) else float(np.mean(parts))
    metrics["n"] = len(per_item)
    return {k: metrics[k] for k in METRIC_KEYS}


# --- scoring a set of items ----------------------------------------------------------------------------------

def score_items(items: Sequence[Any], articles: Mapping[str, str], judge: Callable[[Sequence[Pair]], list[Any]],
                predict: Predict, chunk_sentences: int = 3) -> list[dict[str, Any]]:
    """Per-item sub-metrics. ``judge`` maps (statement, evidence) pairs to verdicts with ``.supported``;
    ``predict(premises, hypotheses)`` gives NLI probabilities (entailment first). One call of each for all items."""
    prepared = []
    for item in items:
        text = articles.get(item.id, "")
        parsed = parse_article(text)
        evidence = {}
        for e in item.evidence:
            if e.url.strip():
                key = citable_url(e.url)
                evidence[key] = "\n".join(t for t in (evidence.get(key, ""), e.text) if t.strip())
        generated = chunk(split_sentences(strip_citations(text)), chunk_sentences)
        reference = chunk(split_sentences(item.reference_article), chunk_sentences)
        prepared.append((item, text, parsed, evidence, generated, reference))
    pairs = list(dict.fromkeys(p for _, _, parsed, evidence, _, _ in prepared for p in judge_pairs(parsed, evidence)))
    verdicts = dict(zip(pairs, (v.supported for v in judge(pairs)), strict=True)) if pairs else {}
    nli_pairs = list(dict.fromkeys(p for *_, g, r in prepared for p in entailment_pairs(g, r)))
    probabilities = predict([p for p, _ in nli_pairs], [h for _, h in nli_pairs]) if nli_pairs else np.zeros((0, 3))
    p_ent = {pair: float(row[0]) for pair, row in zip(nli_pairs, probabilities, strict=True)}
    rows = []
    for item, _text, parsed, evidence, generated, reference in prepared:
        entailment = entailment_score(generated, reference, p_ent) if reference else \
            {"a_side": None, "b_side": None, "entailment": None}
        row = {"id": item.id, "has_article": item.id in articles, **entailment,
               **citation_scores(parsed, evidence, verdicts),
               "coverage": coverage(parsed, [e.url for e in item.evidence]),
               "generated_chunks": len(generated), "reference_chunks": len(reference)}
        row["m4"] = item_m4(row)
        rows.append(row)
    return rows


def read_articles(path: str | Path) -> dict[str, str]:
    """``{"id", "factchecking_article"}`` records (JSONL or a JSON list) → id → text; bad records are DataErrors."""
    path = Path(path)
    if not path.is_file():
        raise DataError(path, None, "no such file")
    text = path.read_text(encoding="utf-8-sig")
    if text.lstrip()[:1] == "[":
        try:
            rows = list(enumerate(json.loads(text), start=1))
        except json.JSONDecodeError as error:
            raise DataError(path, error.lineno, f"malformed JSON ({error.msg})") from None
    else:
        rows = list(read_jsonl(path))
    articles: dict[str, str] = {}
    for line, row in rows:
        if not isinstance(row, dict) or row.get("id") in (None, ""):
            raise DataError(path, line, "missing id", field="id")
        if not isinstance(row.get("factchecking_article"), str):
            raise DataError(path, line, "expected a string", field="factchecking_article")
        if str(row["id"]) in articles:
            raise DataError(path, line, f"duplicate id {row['id']!r}", field="id")
        articles[str(row["id"])] = row["factchecking_article"]
    return articles


def make_parser() -> Any:
    return parser_for((M4Config, EngineConfig), prog="veracity eval m4")


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    config, engine_config = parse_config(make_parser(), argv)
    # a bad item or article is a DataError naming file, line and field; veracity.cli prints it (exit status 2)
    items = read_items(config.items, config.articles_dir, config.review_dir)
    articles = ({i.id: i.reference_article for i in items} if config.reference_as_article
                else read_articles(config.articles))
    out = Path(config.output_dir)
    write_run_config(out, config, engine_config, job="eval m4", device=resolve_device(engine_config.device))
    verifier = NLIVerifier(config.nli_model, config.nli_batch_size, device=engine_config.device)
    kinds = ["choice"] if config.constrained else []
    # the judge's answers counted by what they were made under (a replayed answer: what it was made under then)
    engine = DecodingTally(make_engine(engine_config), kinds) if config.judge == "llm" else None
    judge: Any = (Judge(engine, config.judge_prompt, config.judge_max_new_tokens, config.judge_max_evidence_chars,
                        constrained=config.constrained)
                  if engine is not None else NLIJudge(verifier, config.judge_nli_threshold,
                                                      config.judge_max_evidence_chars))
    if engine is not None:
        record_facts(out, decoding=engine.decoding(kinds))  # what the judge expects, before work
    try:
        rows = score_items(items, articles, judge, verifier.predict, config.chunk_sentences)
    finally:
        if engine is not None:  # then what its answers were made under
            record_facts(out, decoding=summarise_facts(engine.facts) or engine.decoding(kinds))
            engine.close()
    metrics = corpus_metrics(rows)
    known = {i.id for i in items}
    details = {
        "judge": judge.name, "judge_answers": judge.stats.to_dict(),
        "judge_constraint": getattr(judge, "constraint", None), "nli_verifier": verifier.model_id,
        "missing_articles": sum(not r["has_article"] for r in rows),
        "articles_without_item": sum(a not in known for a in articles),
        "items_with_reference": sum(r["entailment"] is not None for r in rows),
        **{k: sum(r[k] for r in rows) for k in ("cite_sentences", "citations", "malformed", "unknown_urls")},
        "a_side": corpus_mean(rows, "a_side"), "b_side": corpus_mean(rows, "b_side"),
        "definition": "our implementation of the UTS paper's M4 description (the official scorer is not public)",
    }
    write_jsonl(out / "per_item.jsonl", rows)
    write_json(out / "metrics.json", metrics)
    write_json(out / "details.json", details)
    print(" ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()))
    print(f"judge {judge.name}: {judge.stats.to_dict()}; wrote metrics.json, per_item.jsonl, details.json to {out}")
    return metrics


def corpus_mean(rows: Sequence[Mapping[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return float(np.mean(values)) if values else None
