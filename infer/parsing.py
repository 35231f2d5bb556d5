"""Structured output parsing: a JSON object out of free LLM text, or a clear failure — never a guess.

Handles a ``<think>…</think>`` block before the answer, Markdown code fences, and prose or trailing text around
the object. JSON is read first: reasoning blocks and fences are looked for only between objects, never inside a
JSON string, which may quote either (a rationale citing a passage). Validation checks required fields and their
types; anything else is a ``ParseResult`` with an error.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
# Outside JSON, the three things the scan stops at: an object, a reasoning block, a fence
_MARK = re.compile(r"\{|<think>|```", re.I)


@dataclass(frozen=True)
class ParseResult:
    value: dict[str, Any] | None
    error: str | None
    raw: str

    @property
    def ok(self) -> bool:
        return self.error is None


def strip_thinking(text: str) -> tuple[str, bool]:
    """Text without reasoning blocks; the flag says an opened ``<think>`` was never closed."""
    text = _THINK.sub("", text)
    lower = text.lower()
    if "<think>" in lower:
        return text[: lower.index("<think>")], True
    return text, False


def _scan(text: str) -> tuple[list[tuple[dict[str, Any], bool]], bool, bool]:
    """Left to right: every top-level JSON object (with whether it sits inside a code fence), whether a reasoning
    block was left open, and whether an object started but did not parse. An object is decoded whole where it
    starts, so a ``<think>`` or a fence inside its strings is text; a reasoning block is skipped, objects in it too."""
    decoder = json.JSONDecoder()
    found: list[tuple[dict[str, Any], bool]] = []
    fenced, broken, pos = False, False, 0
    while match := _MARK.search(text, pos):
        mark = match.group().lower()
        if mark == "<think>":
            close = text.lower().find("</think>", match.end())
            if close == -1:
                return found, True, broken
            pos = close + len("</think>")
        elif mark == "```":
            fenced, pos = not fenced, match.end()
        else:
            try:
                value, pos = decoder.raw_decode(text, match.start())
                found.append((value, fenced))  # at a "{": always an object
            except json.JSONDecodeError:
                broken, pos = True, match.end()
    return found, False, broken


def extract_json_object(text: str) -> ParseResult:
    """The first JSON object in ``text``: inside a code fence if there is one, else anywhere in the text (reasoning
    blocks aside)."""
    found, unterminated, broken = _scan(text)
    for value, fenced in found:
        if fenced:
            return ParseResult(value, None, text)
    if found:
        return ParseResult(found[0][0], None, text)
    if unterminated:
        return ParseResult(None, "unterminated_think: the answer never left its <think> block", text)
    if broken:
        return ParseResult(None, "invalid_json: an object starts but does not parse", text)
    return ParseResult(None, "no_json_object", text)


def parse_json_answer(text: str, required: dict[str, type | tuple[type, ...]]) -> ParseResult:
    """:func:`extract_json_object` plus a check that each required field exists with the expected type."""
    result = extract_json_object(text)
    if not result.ok or result.value is None:
        return result
    for name, expected in required.items():
        if name not in result.value:
            return ParseResult(None, f"schema: missing field '{name}'", text)
        if not isinstance(result.value[name], expected):
            got = type(result.value[name]).__name__
            return ParseResult(None, f"schema: field '{name}' is {got}, expected {_names(expected)}", text)
    return result


def _names(expected: type | tuple[type, ...]) -> str:
    types = expected if isinstance(expected, tuple) else (expected,)
    return " or ".join(t.__name__ for t in types)


def name_cut_off(error: str | None, finish_reason: str | None) -> str | None:
    """A parse error, prefixed ``length: `` when the answer was cut by ``max_new_tokens`` (a budget too small, not a
    malformed answer: the failures a constrained run can still have)."""
    return f"length: {error}" if error and finish_reason == "length" else error
