"""The deterministic stub drafter of UTS (docs/pipelines/uts.md#stub-drafter): a lede, one cite sentence per
evidence URL (K = 1), a conclusion — no model-written prose.

A cite sentence is an **anchor** (a sentence of the URL's evidence) in a **frame**:

- ``plain``       ``{anchor} (source: {url}).``                 (the stub alone)
- ``host_cite``   ``According to {host}, {anchor} (source: {url}).``  (HostCite)
- ``states_that`` ``{host} states that {anchor} (source: {url}).``    (StatesThat; the paper's AFP finding)

One sentence in, one out: the anchor loses its end punctuation, the frame adds none inside, and a candidate whose
rendered sentence Punkt would split (or whose anchor carries text that reads as a citation) is not used. In a
frame the anchor's first word is lower-cased only when it is a common function word (``The``, ``It``, ``In`` …),
so names keep their capitals. The host is the evidence URL's site (:func:`~veracity.infer.pipelines.uts.text.host_of`);
a URL without one falls back to the plain frame.

The anchor by default is the first non-boilerplate sentence of the evidence (ShadowVal may move to a later one);
when every sentence is boilerplate, the first sentence is used and the cite says so (``fallback``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from veracity.data_prep.task3_citations import CITATION_ATTEMPT, format_citation
from veracity.data_prep.text import normalize_space, split_sentences
from veracity.infer.pipelines.uts.text import MIN_WORDS, boilerplate_reason, host_matches, host_of

FRAMES: dict[str, str] = {
    "plain": "{anchor} {citation}.",
    "host_cite": "According to {host}, {anchor} {citation}.",
    "states_that": "{host} states that {anchor} {citation}.",
}
FUNCTION_WORDS = frozenset(
    "a an the it its this that these those there here he she they we you our his her their in on at as for from "
    "after before during while when since if no not some many most all one both each every such".split())
_END_PUNCTUATION = re.compile(r"[\s.!?;:,]+$")
_CLOSED_QUOTE = re.compile(r"[.!?]+([\"'”’)\]]+)$")  # 'said so.”' → 'said so”': Punkt would end the sentence there

# Verdict → the words of the conclusion: AVeriTeC's four verdicts, WatClaimCheck's ratings 0 / 1 / 2.
VERDICT_PHRASES: dict[str, str] = {
    "supported": "supported", "refuted": "refuted",
    "not enough evidence": "not supported by enough evidence",
    "conflicting evidence/cherrypicking": "based on conflicting or cherry-picked evidence",
    "0": "false", "1": "partly true", "2": "true",
}


def verdict_phrase(verdict: str) -> str:
    """The conclusion's words for ``verdict`` (a native rating not in :data:`VERDICT_PHRASES` is used as written)."""
    key = normalize_space(str(verdict)).lower()
    return VERDICT_PHRASES.get(key, key or "unrated")


def anchor_text(sentence: str, in_frame: bool) -> str:
    """A sentence ready to sit inside a frame: one line, no end punctuation, a leading function word lower-cased
    when it follows frame words."""
    text = _END_PUNCTUATION.sub("", _CLOSED_QUOTE.sub(r"\1", normalize_space(sentence)))
    if in_frame and text:
        text = lower_function_word(text)
    return text


def lower_function_word(text: str) -> str:
    """``text`` with its first word lower-cased when that word is a capitalised function word (``The`` → ``the``)."""
    first = text.split(" ", 1)[0]
    if first.lower() in FUNCTION_WORDS and first[0].isupper() and (len(first) == 1 or first[1:].islower()):
        return first[0].lower() + text[1:]
    return text


def render_cite(anchor: str, url: str, frame: str) -> str:
    """The cite sentence for ``anchor`` from ``url`` in ``frame`` (a frame needing a host falls back to plain)."""
    if frame not in FRAMES:
        raise ValueError(f"unknown frame {frame!r}; frames: {sorted(FRAMES)}")
    host = host_of(url)
    if not host:
        frame = "plain"
    return FRAMES[frame].format(anchor=anchor_text(anchor, frame != "plain"), host=host,
                                citation=format_citation([url]))


def frame_for(url: str, default: str, by_host: Mapping[str, str], reviewer: str = "") -> str:
    """The frame of a cite: the item's reviewer's rule when ``by_host`` names it (a reviewer name such as ``afp``
    or a site such as ``afp.com``), else the rule of the evidence URL's host, else ``default``."""
    if reviewer:
        name = normalize_space(reviewer).lower()
        key = name if name in by_host else host_matches(host_of(name) or name, list(by_host))
        if key is not None:
            return by_host[key]
    key = host_matches(host_of(url), list(by_host))
    return by_host[key] if key is not None else default


@dataclass
class AnchorCandidate:
    index: int  # position among the evidence's sentences
    anchor: str
    sentence: str  # the rendered cite sentence

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def anchor_candidates(evidence_text: str, url: str, frame: str,
                      min_words: int = MIN_WORDS) -> tuple[list[AnchorCandidate], dict[str, Any]]:
    """The cite sentences a drafter may emit for one evidence URL, best first, and what was skipped and why.

    Candidates are the non-boilerplate sentences in order; when there are none, the first sentence alone
    (``fallback: all_boilerplate``). A sentence that would not stay one sentence once framed, or that holds
    citation-like text, is skipped (``unrenderable``).
    """
    sentences = split_sentences(evidence_text)
    skipped: dict[str, int] = {}
    candidates = []
    for index, sentence in enumerate(sentences):
        reason = boilerplate_reason(sentence, min_words)
        if reason is None:
            candidate = _candidate(index, sentence, url, frame)
            reason = None if candidate else "unrenderable"
            if candidate:
                candidates.append(candidate)
        if reason:
            skipped[reason] = skipped.get(reason, 0) + 1
    info: dict[str, Any] = {"sentences": len(sentences), "skipped": skipped, "fallback": None}
    if not candidates and sentences:
        first = _candidate(0, sentences[0], url, frame)
        if first:
            candidates, info["fallback"] = [first], "all_boilerplate"
    if not candidates:
        info["fallback"] = "no_usable_sentence" if sentences else "no_text"
    return candidates, info


def _candidate(index: int, sentence: str, url: str, frame: str) -> AnchorCandidate | None:
    if CITATION_ATTEMPT.search(sentence) or not anchor_text(sentence, False):
        return None
    rendered = render_cite(sentence, url, frame)
    return AnchorCandidate(index, sentence, rendered) if split_sentences(rendered) == [rendered] else None


@dataclass
class StubTemplates:
    """The lede and conclusion templates (``{claim}``, ``{claimant}``, ``{verdict}`` = the verdict's words)."""

    lede: str = "{claimant} claimed that {claim}."
    lede_no_claimant: str = "It was claimed that {claim}."
    conclusion: str = "Therefore, the claim is {verdict}."


def lede(claim: str, claimant: str, templates: StubTemplates) -> str:
    claim_text = lower_function_word(_END_PUNCTUATION.sub("", normalize_space(claim)))
    claimant = normalize_space(claimant)
    template = templates.lede if claimant else templates.lede_no_claimant
    return template.format(claim=claim_text, claimant=claimant)


def conclusion(verdict: str, templates: StubTemplates) -> str:
    return templates.conclusion.format(verdict=verdict_phrase(verdict))


def assemble(sentences: Sequence[str]) -> str:
    """The article: its sentences in order, one space apart."""
    return " ".join(normalize_space(s) for s in sentences if s.strip())
