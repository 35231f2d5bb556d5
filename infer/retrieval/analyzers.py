"""Text analyzers for BM25: text → tokens. Pure and picklable-free: configured by name and flags.

- ``default``: lower-case, word tokens of 2+ characters, English stopwords dropped, optional Snowball stemming.
- ``social``: the SciClaimSeekers preprocessing for social-media posts: drop @mentions and URLs, turn #hashtags
  into words (``#LongCovid`` → ``long covid``), drop punctuation and stopwords, lower-case (docs/retrieval.md#sparse).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from bm25s.stopwords import STOPWORDS_EN

_WORD = re.compile(r"(?u)\b\w\w+\b")
_URL = re.compile(r"https?://\S+|www\.\S+")
_MENTION = re.compile(r"(?<!\w)@\w+")
_HASHTAG = re.compile(r"#(\w+)")
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_STOPWORDS = frozenset(STOPWORDS_EN)


def _hashtag_words(match: re.Match[str]) -> str:
    return " " + _CAMEL.sub(" ", match.group(1)).replace("_", " ") + " "


@dataclass(frozen=True)
class Analyzer:
    """A named tokenizer configuration (stored in index metadata, so an index re-creates its analyzer)."""

    name: str = "default"
    stem: bool = False
    stopwords: bool = True

    def __post_init__(self) -> None:
        if self.name not in ANALYZERS:
            raise ValueError(f"unknown analyzer {self.name!r}; choose from {sorted(ANALYZERS)}")

    @cached_property
    def _stemmer(self) -> Callable[[list[str]], list[str]] | None:
        if not self.stem:
            return None
        import Stemmer  # PyStemmer: Snowball stemmers in C

        return Stemmer.Stemmer("english").stemWords

    def __call__(self, text: str) -> list[str]:
        tokens = ANALYZERS[self.name](text)
        if self.stopwords:
            tokens = [t for t in tokens if t not in _STOPWORDS]
        return self._stemmer(tokens) if self._stemmer else tokens

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "stem": self.stem, "stopwords": self.stopwords}


def default_tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def social_tokens(text: str) -> list[str]:
    text = _URL.sub(" ", text)
    text = _MENTION.sub(" ", text)
    text = _HASHTAG.sub(_hashtag_words, text)
    text = text.replace("&amp;", " and ")
    return _WORD.findall(text.lower())


ANALYZERS: dict[str, Callable[[str], list[str]]] = {"default": default_tokens, "social": social_tokens}
