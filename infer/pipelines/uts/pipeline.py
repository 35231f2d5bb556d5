"""The UTS drafter over a batch of task items: stub → frames → (ShadowVal) → article.

``UTSPipeline(config, engine_config)`` builds the judge engine once (only with ShadowVal); calling it on a list of
task-item dicts returns one record per item (run by ``infer/batch.py``: resumable, errors isolated). The record
keeps the article and every intermediate: each evidence URL's frame, candidate anchors, what was skipped as
boilerplate, every judge answer and the outcome of the cite.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from veracity.data_prep.prepared import read_prepared
from veracity.data_prep.schema import ArticleItem
from veracity.data_prep.task3_items import TaskItem, from_article_item, read_items, schema_item
from veracity.infer.eval.citation_judge import Judge, NLIJudge
from veracity.infer.pipelines.contract import Pipeline
from veracity.infer.pipelines.uts.config import UTSConfig
from veracity.infer.pipelines.uts.drafter import (
    StubTemplates,
    anchor_candidates,
    assemble,
    conclusion,
    frame_for,
    lede,
)
from veracity.infer.pipelines.uts.report import FLAGS as REPORT_FLAGS
from veracity.infer.pipelines.uts.report import report_item
from veracity.infer.pipelines.uts.shadowval import CiteSlot, JudgeFn, shadow_validate
from veracity.io import write_jsonl
from veracity.models import engine_factory  # engine_factory.make_engine looked up at load time (tests replace it)
from veracity.models.engine import EngineConfig, record_decoding, unavailable_error
from veracity.models.nli import NLIVerifier

logger = logging.getLogger(__name__)


def cite_slots(item: TaskItem, config: UTSConfig) -> list[CiteSlot]:
    """One slot per distinct evidence URL, in order, with its frame and candidate cite sentences."""
    slots, seen = [], set()
    for evidence in item.evidence:
        if not evidence.url.strip() or evidence.url in seen:
            continue
        seen.add(evidence.url)
        frame = frame_for(evidence.url, config.frame, config.frame_by_host, item.reviewer)
        candidates, info = anchor_candidates(evidence.text, evidence.url, frame, config.min_anchor_words)
        slots.append(CiteSlot(evidence.url, evidence.text, frame, candidates, info))
    return slots


def draft_record(item: TaskItem, slots: Sequence[CiteSlot], config: UTSConfig) -> dict[str, Any]:
    """The output record of one item once its slots are settled (no model calls)."""
    templates = StubTemplates(config.lede, config.lede_no_claimant, config.conclusion)
    sentences = [lede(item.claim, item.claimant, templates)]
    sentences += [s.sentence for s in slots if s.sentence]
    sentences.append(conclusion(item.verdict, templates))
    return {"id": item.id, "factchecking_article": assemble(sentences),
            "cites": [s.to_dict() for s in slots],
            "outcomes": {o: sum(s.outcome == o for s in slots) for o in sorted({s.outcome for s in slots})}}


class UTSPipeline:
    """Drafts articles; with ShadowVal, holds the judge (engine layer, response cache) for the whole run."""

    def __init__(self, config: UTSConfig, engine_config: EngineConfig, judge: JudgeFn | None = None):
        self.config, self.judge, self.engine = config, judge, None
        if config.shadowval and judge is None and config.judge == "nli":
            self.judge = NLIJudge(NLIVerifier(config.judge_nli_model, device=engine_config.device),
                                  config.judge_nli_threshold,
                                  config.judge_max_evidence_chars)
        elif config.shadowval and judge is None:
            self.engine = engine_factory.make_engine(engine_config)
            self.judge = Judge(self.engine, config.judge_prompt, config.judge_max_new_tokens,
                               config.judge_max_evidence_chars, constrained=config.constrained)

    def __call__(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any] | Exception]:
        """One article record per row, with the decoding facts of its LLM judgements (``decoding``; None without an
        LLM judge); a row whose judge engine made no answer is its error (an error record, retried on request)."""
        items = [schema_item(row, "items", k) for k, row in enumerate(rows, start=1)]
        slots = [cite_slots(item, self.config) for item in items]
        if self.config.shadowval:
            assert self.judge is not None
            shadow_validate([s for group in slots for s in group], self.judge, self.config.max_tries,
                            self.config.selective_emission)
        kinds = ["choice"] if self.config.constrained else []
        out: list[dict[str, Any] | Exception] = []
        for item, group in zip(items, slots, strict=True):
            verdicts = [v for slot in group for v in slot.verdicts]
            failed = unavailable_error(verdicts)
            decoding = record_decoding(self.engine, kinds, verdicts) if self.engine is not None and verdicts else None
            out.append(failed or {**draft_record(item, group, self.config), "decoding": decoding})
        return out

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()


def load_task_items(config: UTSConfig) -> list[TaskItem]:
    """The items to draft: ``--items``, or the prepared source (of ``--split`` when given), first N in order."""
    if config.items:
        items = read_items(config.items, config.articles_dir, config.review_dir)
    else:
        records = read_prepared(config.prepared_dir, config.source, [config.split] if config.split else None)
        items = [from_article_item(r) for r in records if isinstance(r, ArticleItem)]
    return items[: config.max_examples] if config.max_examples else items


class UTS(Pipeline):
    """The contract (``contract.py``) of ``veracity infer uts``: task items in, one drafted article record per item
    out; ``items.jsonl`` and ``articles.jsonl`` (the task's submission) made from them. Its scorer, ``veracity eval
    m4``, needs an LLM judge of its own, so a run does not call it."""

    name = "uts"
    config_types = (UTSConfig, EngineConfig)
    report_flags = REPORT_FLAGS
    report_item = staticmethod(report_item)

    def __init__(self, config: UTSConfig, engine_config: EngineConfig, judge: JudgeFn | None = None):
        super().__init__(config, engine_config)
        self.engine_config, self.judge = engine_config, judge
        self.models: UTSPipeline | None = None
        self.task_items: list[dict[str, Any]] = []

    @property
    def batch_size(self) -> int:
        return self.config.items_per_call

    def items(self) -> list[dict[str, Any]]:
        self.task_items = [item.to_dict() for item in load_task_items(self.config)]
        return self.task_items

    def row_item(self, row: dict[str, Any], source: str, line: int) -> dict[str, Any]:
        return schema_item(row, Path(source), line).to_dict()

    def load(self, run_dir: Path) -> None:
        self.models = UTSPipeline(self.config, self.engine_config, self.judge)

    def model_ids(self) -> dict[str, str]:
        judge = self.models.judge if self.models else None
        return {"judge": judge.name} if getattr(judge, "name", None) else {}

    def decoding(self) -> dict[str, Any] | None:
        """How the LLM judge decodes (ShadowVal with ``judge: llm``; None without one): for the run record."""
        engine = self.models.engine if self.models else None
        return engine.decoding(["choice"] if self.config.constrained else []) if engine is not None else None

    def __call__(self, items: Sequence[dict[str, Any]]) -> list[dict[str, Any] | Exception]:
        assert self.models is not None, "load() first"
        start = time.perf_counter()
        records = self.models(items)
        self.seconds["shadowval" if self.config.shadowval else "draft"] += time.perf_counter() - start
        return records

    def close(self) -> None:
        if self.models is not None:
            self.models.close()

    def finish(self, records: Sequence[dict[str, Any]], run_dir: Path) -> dict[str, Any]:
        """``items.jsonl`` (the items drafted, in the task-item schema) and ``articles.jsonl``."""
        items = [r["result"] for r in records if r["status"] == "ok"]
        write_jsonl(run_dir / "items.jsonl", self.task_items)
        write_jsonl(run_dir / "articles.jsonl", [{"id": r["id"], "factchecking_article": r["factchecking_article"]}
                                                 for r in items])
        outcomes: dict[str, int] = {}
        for record in items:
            for outcome, count in record["outcomes"].items():
                outcomes[outcome] = outcomes.get(outcome, 0) + count
        logger.info("%d articles → %s; cites: %s", len(items), run_dir / "articles.jsonl", outcomes)
        return {"items": len(self.task_items), "articles": len(items), "cite_outcomes": outcomes}

    def stats(self) -> dict[str, Any]:
        judge = self.models.judge if self.models else None
        return {"judge": judge.stats.to_dict() if hasattr(judge, "stats") else None}

