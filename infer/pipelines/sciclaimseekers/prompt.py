"""The pointwise rerank prompt of the paper's Table 1 and the parser of its 0–10 answer (the one place that knows
the format).

The prompt text is the paper's, verbatim (``../shared/seeds/004_7d757acd85e59c2e.txt``, Table 1): a system message
and a user message with ``{post}``, ``{title}`` and ``{abstract}``. The seed text gives the user message on one line,
so it is kept on one line here.

The answer's format, declared beside its parser: :data:`SCORE_REGEX` admits exactly the integers 0–10 written as the
prompt asks ("Output ONLY a single integer score from 0 to 10"), which :func:`parse_score` reads as they are; a
constrained rerank asks for :data:`SCORE_MAX_NEW_TOKENS` new tokens (the longest answer, "10", and the end tokens).
"""

from __future__ import annotations

import re

from veracity.infer.structured import choice_budget
from veracity.models.engine import Message

SYSTEM_PROMPT = (
    "You are an expert scientific source identifier. You will be given a social media post that paraphrases a "
    "scientific finding, and a candidate scientific paper. Your job is to judge how likely the post is referring to "
    "this specific paper. Output ONLY a single integer score from 0 to 10 (no explanation, no other text). 10 = the "
    "post is almost certainly about this paper. 0 = the paper is unrelated."
)
USER_TEMPLATE = "Social media post: {post} Candidate paper: Title: {title} Abstract: {abstract} Score (0-10):"
MAX_SCORE = 10
SCORE_REGEX = r"(10|[0-9])"  # an integer 0–10, no sign, no leading zero, nothing around it
SCORE_MAX_NEW_TOKENS = choice_budget([str(s) for s in range(MAX_SCORE + 1)])  # what SCORE_REGEX admits


def rerank_messages(post: str, title: str, abstract: str, abstract_max_words: int | None = None) -> list[Message]:
    """Chat messages scoring one (post, paper) pair; ``abstract_max_words`` optionally shortens long abstracts."""
    if abstract_max_words is not None:
        words = abstract.split()
        if len(words) > abstract_max_words:
            abstract = " ".join(words[:abstract_max_words]) + " …"
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": USER_TEMPLATE.format(post=post, title=title, abstract=abstract)}]


_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
# Echoes of the scale itself ("0-10", "0 to 10", "(0–10)") must not be read as a score of 0.
_SCALE = re.compile(r"\(?\b0\s*(?:-|–|—|to)\s*10\b\)?", re.IGNORECASE)
_NUMBER = r"(-?\d+(?:[.,]\d+)?)"
_OUT_OF = re.compile(_NUMBER + r"\s*(?:/|out\s+of)\s*10\b", re.IGNORECASE)
_KEYWORD = re.compile(r"\b(?:score|rating|relevance)\b[^0-9\-]{0,12}" + _NUMBER, re.IGNORECASE)
_ANY = re.compile(r"(?<![\w.])" + _NUMBER + r"(?![\w]|[.,]\d)")
_WORDS = {w: i for i, w in enumerate(
    ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"))}
_WORD = re.compile(r"\b(" + "|".join(_WORDS) + r")\b", re.IGNORECASE)


def _to_score(token: str) -> tuple[int | None, str | None]:
    value = float(token.replace(",", "."))
    if not 0 <= value <= MAX_SCORE:
        return None, f"out_of_range: {token}"
    return int(value + 0.5), None  # a decimal answer ("7.5") rounds half up: the model meant "between 7 and 8"


def parse_score(text: str) -> tuple[int | None, str | None]:
    """The integer 0–10 in a model's answer, or ``(None, reason)``.

    Read in this order: ``<think>`` blocks dropped and echoes of the scale ("0-10") ignored; then ``N/10`` or
    ``N out of 10``; then a number after "score"/"rating"; then the first number in 0–10; then a number word.
    A number outside 0–10 is ``out_of_range`` (not clipped: "15" is no evidence for 10); decimals round half up.

    Examples: ``"7"`` → 7, ``" **8**."`` → 8, ``"Score: 9/10"`` → 9, ``"I'd say six."`` → 6, ``"12"`` → None.
    """
    if not isinstance(text, str) or not text.strip():
        return None, "empty_answer"
    if re.search(r"<think>", text, re.IGNORECASE) and not re.search(r"</think>", text, re.IGNORECASE):
        return None, "unterminated_think"
    body = _SCALE.sub(" ", _THINK.sub(" ", text))
    for pattern in (_OUT_OF, _KEYWORD):
        match = pattern.search(body)
        if match:
            return _to_score(match.group(1))
    numbers = [_to_score(m.group(1)) for m in _ANY.finditer(body)]
    if numbers:  # the first number in range ("a 2020 study: 3" → 3), else why the first one is not a score
        return next((n for n in numbers if n[0] is not None), numbers[0])
    word = _WORD.search(body)
    if word:
        return _WORDS[word.group(1).lower()], None
    return None, "no_number"
