"""The yes/no citation judge: is a cite sentence supported by the evidence it cites?

ShadowVal (the drafter) and the M4 scorer ask the same question through the same code: one chat request per
(statement, evidence) pair, greedy, a few new tokens, the answer read by :func:`parse_verdict`. The prompt is a
config value (a template with ``{statement}`` and ``{evidence}``); the engine is any engine of the engine layer
(``make_engine``), whose response cache (``EngineConfig.cache``) replays a judgement asked before — so a cite
ShadowVal validated is not judged twice when the scorer runs with the same judge and prompt.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from veracity.infer.pipelines.uts.text import normalize_space
from veracity.models.engine import Engine, GenerationRequest

DEFAULT_JUDGE_PROMPT = (
    "Evidence: {evidence}\n\n"
    "Statement: {statement}\n\n"
    "Is the statement supported by the evidence? Answer yes or no."
)
_VERDICT = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


def check_prompt(prompt: str) -> None:
    """Raise ValueError unless ``prompt`` formats with exactly the fields ``statement`` and ``evidence``."""
    fields = set(re.findall(r"(?<!\{)\{(\w+)\}(?!\})", prompt))
    if fields != {"statement", "evidence"}:
        raise ValueError(f"the judge prompt must use {{statement}} and {{evidence}} (and no other field), "
                         f"found {sorted(fields)}")


def parse_verdict(text: str) -> bool | None:
    """True for an answer whose first ``yes``/``no`` word is yes, False for no, None when it has neither."""
    found = _VERDICT.search(text or "")
    return None if found is None else found.group(1).lower() == "yes"


@dataclass
class JudgeStats:
    asked: int = 0
    cached: int = 0
    yes: int = 0
    no: int = 0
    unparsed: int = 0  # answers with neither yes nor no: counted as no
    errors: int = 0  # engine errors (e.g. context_overflow): counted as no

    def to_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class Verdict:
    supported: bool
    answer: str
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"supported": self.supported, "answer": self.answer, **({"error": self.error} if self.error else {})}


@dataclass
class Judge:
    """Yes/no judgements from an engine. An answer without yes/no, or an engine error, is a no (counted)."""

    engine: Engine
    prompt: str = DEFAULT_JUDGE_PROMPT
    max_new_tokens: int = 4
    max_evidence_chars: int = 4000
    stats: JudgeStats = field(default_factory=JudgeStats)

    def __post_init__(self) -> None:
        check_prompt(self.prompt)

    @property
    def name(self) -> str:
        return f"{self.engine.kind}:{self.engine.model_id}"

    def request(self, statement: str, evidence: str) -> GenerationRequest:
        evidence = normalize_space(evidence)[: self.max_evidence_chars]
        content = self.prompt.format(statement=normalize_space(statement), evidence=evidence)
        return GenerationRequest.chat([{"role": "user", "content": content}], max_new_tokens=self.max_new_tokens,
                                      temperature=0.0, seed=0, logprobs=False)

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> list[Verdict]:
        """One verdict per (statement, evidence) pair; identical pairs are asked once."""
        distinct = list(dict.fromkeys(pairs))
        results = self.engine.generate([self.request(s, e) for s, e in distinct]) if distinct else []
        by_pair: dict[tuple[str, str], Verdict] = {}
        for pair, result in zip(distinct, results, strict=True):
            self.stats.asked += 1
            self.stats.cached += bool(result.cached)
            if not result.ok or not result.candidates:
                self.stats.errors += 1
                by_pair[pair] = Verdict(False, "", result.error or "no_candidate")
                continue
            answer = result.candidates[0].text
            supported = parse_verdict(answer)
            if supported is None:
                self.stats.unparsed += 1
            elif supported:
                self.stats.yes += 1
            else:
                self.stats.no += 1
            by_pair[pair] = Verdict(bool(supported), answer.strip())
        return [by_pair[pair] for pair in pairs]
