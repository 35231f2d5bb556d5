"""The UTS drafter over a batch of task items: stub → frames → (ShadowVal) → article.

``UTSPipeline(config, engine_config)`` builds the judge engine once (only with ShadowVal); calling it on a list of
task-item dicts returns one record per item (run by ``infer/batch.py``: resumable, errors isolated). The record
keeps the article and every intermediate: each evidence URL's frame, candidate anchors, what was skipped as
boilerplate, every judge answer and the outcome of the cite.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from veracity.data_prep.task3_items import TaskItem, schema_item
from veracity.infer.pipelines.uts.config import UTSConfig
from veracity.infer.pipelines.uts.drafter import (
    StubTemplates,
    anchor_candidates,
    assemble,
    conclusion,
    frame_for,
    lede,
)
from veracity.infer.pipelines.uts.shadowval import CiteSlot, JudgeFn, shadow_validate
from veracity.models.engine import EngineConfig

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
            from veracity.infer.eval.citation_judge import NLIJudge
            from veracity.models.nli import NLIVerifier

            self.judge = NLIJudge(NLIVerifier(config.judge_nli_model), config.judge_nli_threshold,
                                  config.judge_max_evidence_chars)
        elif config.shadowval and judge is None:
            from veracity.infer.eval.citation_judge import Judge
            from veracity.models.engine import make_engine

            self.engine = make_engine(engine_config)
            self.judge = Judge(self.engine, config.judge_prompt, config.judge_max_new_tokens,
                               config.judge_max_evidence_chars, constrained=config.constrained)

    def __call__(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        items = [schema_item(row, "items", k) for k, row in enumerate(rows, start=1)]
        slots = [cite_slots(item, self.config) for item in items]
        if self.config.shadowval:
            assert self.judge is not None
            shadow_validate([s for group in slots for s in group], self.judge, self.config.max_tries,
                            self.config.selective_emission)
        return [draft_record(item, group, self.config) for item, group in zip(items, slots, strict=True)]

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
