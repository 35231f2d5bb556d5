"""The yes/no citation judge: is a cite sentence supported by the evidence it cites?

ShadowVal (the drafter) and the M4 scorer ask the same question through the same code: one chat request per
(statement, evidence) pair, greedy, the answer read by :func:`parse_verdict`. With ``constrained`` (the default) the
engine is held to :data:`VERDICT_CHOICES` — exactly ``yes`` or ``no``, the words the prompt asks for — and given
:func:`~veracity.infer.structured.choice_budget` new tokens, so the answer ends by itself; the parser stays the final
check (an engine that cannot enforce the choice still answers freely). The prompt is a
config value (a template with ``{statement}`` and ``{evidence}``); the engine is any engine of the engine layer
(``make_engine``), whose response cache (``EngineConfig.cache``) replays a judgement asked before — so a cite
ShadowVal validated is not judged twice when the scorer runs with the same judge and prompt.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from veracity.data_prep.text import normalize_space
from veracity.infer.structured import choice_budget
from veracity.models.engine import Answered, Engine, GenerationRequest, answer_budget

DEFAULT_JUDGE_PROMPT = (
    "Evidence: {evidence}\n\n"
    "Statement: {statement}\n\n"
    "Is the statement supported by the evidence? Answer yes or no."
)
# What a constrained judge may answer: the prompt's own words, lower case, which parse_verdict reads as they are.
VERDICT_CHOICES = ("yes", "no")
UNCONSTRAINED_MAX_NEW_TOKENS = 4  # a free answer: room for "Yes." and a little markup before it

# The answer must open with the verdict: a small model often echoes the statement ('The statement "Yes …'), and
# a yes/no word inside an echo is not an answer.
_VERDICT = re.compile(r"^[\s\"'*`(\[]*(yes|no)\b", re.IGNORECASE)


def check_prompt(prompt: str) -> None:
    """Raise ValueError unless ``prompt`` formats with exactly the fields ``statement`` and ``evidence``."""
    fields = set(re.findall(r"(?<!\{)\{(\w+)\}(?!\})", prompt))
    if fields != {"statement", "evidence"}:
        raise ValueError(f"the judge prompt must use {{statement}} and {{evidence}} (and no other field), "
                         f"found {sorted(fields)}")


def parse_verdict(text: str) -> bool | None:
    """True for an answer that opens with ``yes``, False for ``no`` (case, leading quotes and markup ignored),
    None for anything else (``The statement is …``: counted as no by the judge)."""
    found = _VERDICT.match(text or "")
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
class Verdict(Answered):
    supported: bool
    answer: str
    error: str | None = None
    constrained: bool | None = None  # whether the engine held the answer to the choice (its result's ``constrained``)

    def to_dict(self) -> dict[str, Any]:
        return {"supported": self.supported, "answer": self.answer, **({"error": self.error} if self.error else {})}


@dataclass
class Judge:
    """Yes/no judgements from an engine. An answer without yes/no, or an engine error, is a no (counted).

    Budget: :func:`choice_budget` of :data:`VERDICT_CHOICES` when ``constrained`` and the engine enforces the choice,
    else ``max_new_tokens`` (None: :data:`UNCONSTRAINED_MAX_NEW_TOKENS`)."""

    engine: Engine
    prompt: str = DEFAULT_JUDGE_PROMPT
    max_new_tokens: int | None = None
    max_evidence_chars: int = 4000
    constrained: bool = True
    stats: JudgeStats = field(default_factory=JudgeStats)

    def __post_init__(self) -> None:
        check_prompt(self.prompt)

    @property
    def name(self) -> str:
        return self.engine.identity

    @property
    def constraint(self) -> dict[str, Any] | None:
        """What the requests ask the engine to enforce (None: nothing); whether it did is the engine's to say."""
        return {"choice": list(VERDICT_CHOICES)} if self.constrained else None

    @property
    def new_tokens(self) -> int:
        """The ``max_new_tokens`` each request asks for, by the engines' one rule (``models.engine.answer_budget``):
        enough for ``yes``/``no`` when the engine enforces the choice, else ``max_new_tokens`` (none: 4)."""
        free = self.max_new_tokens if self.max_new_tokens is not None else UNCONSTRAINED_MAX_NEW_TOKENS
        return answer_budget(self.engine, "choice" if self.constrained else None, choice_budget(VERDICT_CHOICES), free)

    def request(self, statement: str, evidence: str) -> GenerationRequest:
        evidence = normalize_space(evidence)[: self.max_evidence_chars]
        content = self.prompt.format(statement=normalize_space(statement), evidence=evidence)
        choice = {"choice": VERDICT_CHOICES} if self.constrained else {}
        return GenerationRequest.chat([{"role": "user", "content": content}], max_new_tokens=self.new_tokens,
                                      temperature=0.0, seed=0, logprobs=False, **choice)

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
                by_pair[pair] = Verdict(False, "", result.error or "no_candidate", result.constrained)
                continue
            answer = result.candidates[0].text
            supported = parse_verdict(answer)
            if supported is None:
                self.stats.unparsed += 1
            elif supported:
                self.stats.yes += 1
            else:
                self.stats.no += 1
            by_pair[pair] = Verdict(bool(supported), answer.strip(), constrained=result.constrained)
        return [by_pair[pair] for pair in pairs]


@dataclass
class NLIJudge:
    """The same question answered by the NLI verifier instead of an LLM: yes when P(evidence ⇒ statement) ≥
    ``threshold``. Not the paper's judge — a CPU proxy for one that can tell supported from unsupported, where the
    embedded 135M chat model cannot (it answers no to nearly everything)."""

    verifier: Any  # anything with NLIVerifier's predict(premises, hypotheses) -> (n, 3), entailment first
    threshold: float = 0.5
    max_evidence_chars: int = 4000
    stats: JudgeStats = field(default_factory=JudgeStats)

    @property
    def name(self) -> str:
        named = getattr(self.verifier, "model_id", None) or getattr(self.verifier, "folder", None)
        return f"nli:{named or type(self.verifier).__name__}@{self.threshold}"

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> list[Verdict]:
        if not pairs:
            return []
        premises = [normalize_space(e)[: self.max_evidence_chars] for _, e in pairs]
        probabilities = self.verifier.predict(premises, [normalize_space(s) for s, _ in pairs])
        out = []
        for row in probabilities:
            supported = float(row[0]) >= self.threshold
            self.stats.asked += 1
            self.stats.yes += supported
            self.stats.no += not supported
            out.append(Verdict(supported, f"p_ent={float(row[0]):.3f}"))
        return out
