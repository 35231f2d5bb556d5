"""Boilerplate and hosts: how the UTS drafter reads evidence sentences (split by the project's one splitter,
:func:`veracity.data_prep.text.split_sentences`, English Punkt).

**Boilerplate.** A sentence of evidence is boilerplate — never an anchor — when :func:`boilerplate_reason` gives a
reason, checked in this order:

- ``too_short``: fewer than ``min_words`` words with a letter in them (``Yes``, ``No No``, ``New Zealand``, ``“Mr.``:
  bare answers and split-off fragments, not statements a reader can check);
- ``few_letters``: letters are under half of the non-space characters (dates, prices, scores, timestamps);
- ``question``: it ends with ``?`` (a question asserts nothing);
- ``no_lowercase``: it has no lower-case letter (an ALL-CAPS headline or banner);
- ``page_furniture``: it matches :data:`PAGE_FURNITURE` — cookie and browser notices, subscribe / sign-up / log-in
  prompts, share and follow buttons, copyright lines, bylines and "updated at" stamps, image credits, "read more"
  and "related articles" links, advertisements (what a web crawl of a page keeps besides the article);
- ``url``: it holds a URL or an e-mail address (link lists and footers; a cite sentence must not carry one either).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import urlsplit

from veracity.data_prep.text import normalize_space, split_sentences

MIN_WORDS = 4
_WORD = re.compile(r"\S*[^\W\d_]\S*")  # a token with at least one letter
_LETTER = re.compile(r"[^\W\d_]")
PAGE_FURNITURE = re.compile(
    r"\bcookies?\b|\byour browser\b|\bjavascript\b|\bsubscribe\b|\bnewsletter\b|\bsign (?:up|in)\b|\blog ?in\b"
    r"|\bcreate an account\b|\b(?:share|follow us)\b.{0,40}\b(?:facebook|twitter|whatsapp|instagram|linkedin|email)\b"
    r"|\ball rights reserved\b|©|\bcopyright\b|\bprivacy policy\b|\bterms of (?:use|service)\b"
    r"|\bclick here\b|\bread more\b|\bskip to (?:main )?content\b|\brelated (?:articles|stories|posts)\b"
    r"|\badvertisement\b|\b(?:image|photo) (?:source|caption|credit)s?\b|\bgetty images\b"
    r"|^(?:by|posted by|written by)\s+\S+(?:\s+\S+){0,3}$|^(?:published|updated|posted|last updated)\b.{0,40}\d",
    re.IGNORECASE,
)
_URL_OR_EMAIL = re.compile(r"https?://|www\.\S|\b[\w.+-]+@[\w-]+\.[\w.]+\b", re.IGNORECASE)


def boilerplate_reason(sentence: str, min_words: int = MIN_WORDS) -> str | None:
    """Why ``sentence`` is boilerplate (see the module docstring), or None for a sentence fit to be an anchor."""
    sentence = normalize_space(sentence)
    if len(_WORD.findall(sentence)) < min_words:
        return "too_short"
    visible = sentence.replace(" ", "")
    if len(_LETTER.findall(visible)) < 0.5 * len(visible):
        return "few_letters"
    if sentence.rstrip("\"'”’)]").endswith("?"):
        return "question"
    if not any(ch.islower() for ch in sentence):
        return "no_lowercase"
    if PAGE_FURNITURE.search(sentence):
        return "page_furniture"
    if _URL_OR_EMAIL.search(sentence):
        return "url"
    return None


def is_boilerplate(sentence: str, min_words: int = MIN_WORDS) -> bool:
    return boilerplate_reason(sentence, min_words) is not None


def content_sentences(text: str, min_words: int = MIN_WORDS) -> list[str]:
    """The non-boilerplate sentences of ``text``, in order: the anchors a drafter may use."""
    return [s for s in split_sentences(text) if boilerplate_reason(s, min_words) is None]


# Archive services that wrap the original URL: the host a reader knows is the archived page's.
_ARCHIVE_WRAPPED = re.compile(r"^/web/[^/]*/(.+)$")
_ARCHIVE_HOSTS = ("web.archive.org", "archive.org", "wayback.archive.org")


def host_of(url: str) -> str:
    """The site of ``url`` as a reader names it: lower-case host without ``www.``; for a Wayback Machine URL
    (``web.archive.org/web/<time>/<url>``) the archived page's host. '' when ``url`` has no host."""
    try:
        parts = urlsplit(url.strip())
        host = (parts.hostname or "").lower()
    except ValueError:
        return ""
    if host in _ARCHIVE_HOSTS:
        wrapped = _ARCHIVE_WRAPPED.match(parts.path)
        if wrapped:
            inner = wrapped.group(1)
            inner = inner if re.match(r"https?://", inner) else f"http://{inner}"
            return host_of(inner) or host
    return host.removeprefix("www.")


def host_matches(host: str, keys: Sequence[str]) -> str | None:
    """The first key ``host`` equals or is a sub-domain of (``factcheck.afp.com`` matches ``afp.com``)."""
    for key in keys:
        key = key.lower().removeprefix("www.")
        if host == key or host.endswith("." + key):
            return key
    return None
