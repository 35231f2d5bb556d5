"""Structured output parsing: a JSON object out of free LLM text, or a clear failure — never a guess.

Handles a ``<think>…</think>`` block before the answer, Markdown code fences, and prose or trailing text around
the object. Validation checks required fields and their types; anything else is a ``ParseResult`` with an error.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.S)


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


def _objects(text: str) -> list[dict[str, Any]]:
    """Every top-level JSON object that decodes, scanning left to right."""
    decoder = json.JSONDecoder()
    found, pos = [], text.find("{")
    while pos != -1:
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            pos = text.find("{", pos + 1)
            continue
        if isinstance(value, dict):
            found.append(value)
        pos = text.find("{", end)
    return found


def extract_json_object(text: str) -> ParseResult:
    """The first JSON object in ``text``: inside a code fence if there is one, else anywhere in the text."""
    body, unterminated = strip_thinking(text)
    for fenced in _FENCE.findall(body):
        objects = _objects(fenced)
        if objects:
            return ParseResult(objects[0], None, text)
    objects = _objects(body)
    if objects:
        return ParseResult(objects[0], None, text)
    if unterminated:
        return ParseResult(None, "unterminated_think: the answer never left its <think> block", text)
    if "{" in body:
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
