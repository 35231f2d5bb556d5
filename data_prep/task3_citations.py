"""The one citation format of CheckThat 2026 Task 3 and its strict parser, shared by the drafter and the M4 scorer.

A citation is ``(source: URL)`` or ``(source: URL; URL; …)``: an opening parenthesis, ``source:`` in lower case,
one space, URLs separated by ``;`` and one space, a closing parenthesis. A URL is ``http://`` or ``https://``, a
host, then any characters but whitespace, ``;`` and parentheses — except balanced pairs of parentheses with no
parenthesis inside (``https://en.wikipedia.org/wiki/Mercury_(planet)``). :data:`CITATION` is that regular
expression; nothing else in veracity reads citations.

Anything that opens like a citation — ``(`` or ``[``, optional spaces, ``source`` or ``sources`` in any case, optional
spaces, a colon — but is not a strict citation at that position is **malformed** (``(Source: …)``, ``(source:URL)``,
``(source: URL, URL)``, ``(source: URL;URL)``, ``(source: example.com)``, an unclosed one): the scorer counts it and
scores it as a citation that fails.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import quote

from veracity.data_prep.text import normalize_space, split_sentences

URL_PATTERN = r"https?://[^\s;()/?#]+(?:[^\s;()]|\([^\s;()]*\))*"
CITATION = re.compile(rf"\(source: ({URL_PATTERN}(?:; {URL_PATTERN})*)\)")
URL = re.compile(URL_PATTERN)
CITATION_ATTEMPT = re.compile(r"[(\[]\s*sources?\s*[:：]", re.IGNORECASE)
SEPARATOR = "; "


def citable_url(url: str) -> str:
    """``url`` in a form :data:`CITATION` accepts, unchanged when it already is one: no scheme → ``http://`` in front;
    whitespace, ``;``, end punctuation (``.``, ``?``, ``!`` as the last characters) and (when the URL does not parse
    as it is) parentheses percent-encoded. The drafter cites
    and the scorer matches evidence URLs through this same function."""
    url = url.strip()
    if not re.match(r"https?://", url, re.IGNORECASE):
        url = "http://" + url
    elif not url.startswith(("http://", "https://")):
        url = url[: url.index("://")].lower() + url[url.index("://"):]
    url = re.sub(r"[\s;]", lambda m: quote(m.group(0)), url)
    if not URL.fullmatch(url):
        url = url.replace("(", "%28").replace(")", "%29")
    # Punkt ends a sentence at "." "?" "!" before ")": a URL ending so would cut its own cite sentence in two.
    return re.sub(r"[.?!]+$", lambda m: "".join(f"%{ord(ch):02X}" for ch in m.group(0)), url)


def format_citation(urls: list[str] | tuple[str, ...]) -> str:
    """``(source: URL; URL)`` for the given URLs (each through :func:`citable_url`)."""
    if not urls:
        raise ValueError("a citation needs at least one URL")
    return f"(source: {SEPARATOR.join(citable_url(u) for u in urls)})"


def parse_citations(sentence: str) -> tuple[list[tuple[str, ...]], list[str]]:
    """The strict citations of one sentence (each a tuple of URLs) and its malformed attempts (their text, up to
    the next closing parenthesis or 80 characters)."""
    strict = list(CITATION.finditer(sentence))
    starts = {m.start() for m in strict}
    malformed = []
    for attempt in CITATION_ATTEMPT.finditer(sentence):
        if attempt.start() not in starts:
            end = sentence.find(")", attempt.start())
            end = attempt.start() + 80 if end < 0 else end + 1
            malformed.append(sentence[attempt.start():end])
    return [tuple(m.group(1).split(SEPARATOR)) for m in strict], malformed


def strip_citations(text: str) -> str:
    """``text`` without its strict citations (and the space left before punctuation), on one line."""
    return normalize_space(re.sub(r"\s+([.,;:!?])", r"\1", CITATION.sub("", text)))


@dataclass
class CiteSentence:
    """A sentence with at least one strict citation: its position, text, text without citations, cited URLs."""

    index: int
    sentence: str
    statement: str
    urls: tuple[str, ...]


@dataclass
class ParsedArticle:
    sentences: list[str]
    cites: list[CiteSentence] = field(default_factory=list)
    malformed: list[tuple[int, str]] = field(default_factory=list)  # (sentence index, the malformed text)

    @property
    def cited_urls(self) -> list[str]:
        """Every URL cited, once each, in first-cited order."""
        return list(dict.fromkeys(u for c in self.cites for u in c.urls))


def parse_article(text: str) -> ParsedArticle:
    """Sentences of an article (English Punkt), its cite sentences and its malformed citations.

    A sentence's cited URLs are the union, in order, of all its strict citations.
    """
    parsed = ParsedArticle(split_sentences(text))
    for index, sentence in enumerate(parsed.sentences):
        citations, malformed = parse_citations(sentence)
        parsed.malformed += [(index, m) for m in malformed]
        urls = tuple(dict.fromkeys(u for c in citations for u in c))
        if urls:
            parsed.cites.append(CiteSentence(index, sentence, strip_citations(sentence), urls))
    return parsed
