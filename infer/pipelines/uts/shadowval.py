"""ShadowVal: judge-validated anchors, and selective emission (docs/pipelines/uts.md#shadowval).

For every evidence URL the drafter has a list of candidate cite sentences (its non-boilerplate sentences in order,
each in its frame). ShadowVal asks the judge whether candidate 1 is supported by the URL's evidence; on a no it
asks about candidate 2, and so on, at most ``max_tries`` candidates. The first yes is the cite. When every
candidate tried is rejected, the cite falls back to candidate 1 (what the stub would have emitted), or — with
**selective emission**, the paper's proposed next step — is dropped. All slots of a batch are asked together, one
judge call per round.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from veracity.data_prep.task3_citations import strip_citations
from veracity.infer.eval.citation_judge import Verdict
from veracity.infer.pipelines.uts.drafter import AnchorCandidate

JudgeFn = Callable[[Sequence[tuple[str, str]]], list[Verdict]]


@dataclass
class CiteSlot:
    """One evidence URL of one item: its candidates, what the judge said, and the outcome."""

    url: str
    evidence: str
    frame: str
    candidates: list[AnchorCandidate]
    info: dict[str, Any] = field(default_factory=dict)
    tries: list[dict[str, Any]] = field(default_factory=list)
    verdicts: list[Any] = field(default_factory=list, repr=False)  # the judge's Verdicts behind ``tries``
    chosen: int | None = 0  # index into candidates; None: no cite for this URL
    outcome: str = "stub"  # stub | accepted | fallback | dropped | no_candidate

    def __post_init__(self) -> None:
        if not self.candidates:
            self.chosen, self.outcome = None, "no_candidate"

    @property
    def sentence(self) -> str | None:
        return None if self.chosen is None else self.candidates[self.chosen].sentence

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "frame": self.frame, "outcome": self.outcome, "chosen": self.chosen,
                "sentence": self.sentence, "anchor_info": self.info, "tries": self.tries,
                "candidates": [c.to_dict() for c in self.candidates]}


def shadow_validate(slots: Sequence[CiteSlot], judge: JudgeFn, max_tries: int, selective: bool) -> None:
    """Run ShadowVal over ``slots`` in place: escalate through candidates in order until a yes or ``max_tries``."""
    pending = [s for s in slots if s.candidates]
    for round_index in range(max_tries):
        asking = [s for s in pending if round_index < len(s.candidates)]
        if not asking:
            break
        verdicts = judge([(strip_citations(s.candidates[round_index].sentence), s.evidence) for s in asking])
        pending = []
        for slot, verdict in zip(asking, verdicts, strict=True):
            slot.tries.append({"candidate": round_index, **verdict.to_dict()})
            slot.verdicts.append(verdict)
            if verdict.supported:
                slot.chosen, slot.outcome = round_index, "accepted"
            else:
                pending.append(slot)
    for slot in slots:
        if slot.candidates and slot.outcome != "accepted":
            slot.chosen, slot.outcome = (None, "dropped") if selective else (0, "fallback")
