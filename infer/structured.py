"""Answer formats that every pipeline declares beside its parser, and the token budget they need.

A pipeline's LLM answer is constrained to a JSON schema (or a regex, or a choice) by the engine; its strict parser
stays the final check. An answer cut by ``max_new_tokens`` is still a failure, so every schema bounds its strings and
arrays (``maxLength``, ``maxItems``) and the pipelines ask for :func:`token_budget` new tokens: the longest answer
the schema allows, in bytes (a token is at least one byte), written compactly (``", "`` and ``": "`` separators, as
the engines' grammars write it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from veracity.io import without_lone_surrogates

# A token is at least one byte, so the UTF-8 length of the longest answer bounds its tokens: 4 bytes per character
# of free text (a schema bounds characters), 1 per character of the JSON around it (ASCII). The budget is only a
# cap: a constrained answer ends when its grammar does, so a generous bound costs nothing.
BYTES_PER_TEXT_CHAR = 4
END_TOKENS = 4  # the end-of-turn token and what a chat template may add after the answer


# What a bounded string of a constrained answer can hold: xgrammar (the transformers engine's and vLLM's alike)
# writes a JSON-schema string with maxLength as characters other than a quote, a backslash or a control character —
# no escape sequence at all (models/decoding.py). Text we want a constrained model to write in such a field (a
# training target) must be made of these characters, or the model is pushed off it at the first quote.
_NOT_IN_BOUNDED_STRING = re.compile(r'[\x00-\x1f"\\]')
_BOUNDED_REPLACEMENTS = {'"': "'", "\\": "/"}


def bounded_string(text: str) -> str:
    """``text`` in the characters a bounded schema string admits, so it serialises without escapes: a double quote
    becomes ``'``, a backslash ``/``, a control character (newline, tab …) a space, a lone surrogate U+FFFD."""
    text = without_lone_surrogates(text)  # no UTF-8 for them: a grammar over bytes never writes one
    return _NOT_IN_BOUNDED_STRING.sub(lambda m: _BOUNDED_REPLACEMENTS.get(m.group(), " "), text)


def max_answer_bytes(schema: dict[str, Any]) -> int:
    """UTF-8 bytes of the longest compact JSON text ``schema`` admits.

    Supports what the pipelines' schemas use: objects with listed properties, arrays with ``maxItems``, strings
    with ``maxLength`` (or an ``enum``/``const``), integers with ``minimum``/``maximum``, booleans, null.

    Raises:
        ValueError: the schema leaves a length unbounded (a string without maxLength, an array without maxItems,
            an integer without both bounds, a number).
    """
    if "enum" in schema:
        return max(len(json.dumps(v, ensure_ascii=False).encode()) for v in schema["enum"])
    if "const" in schema:
        return len(json.dumps(schema["const"], ensure_ascii=False).encode())
    kind = schema.get("type")
    if kind == "object":
        properties = schema.get("properties", {})
        if schema.get("additionalProperties", True) is not False:
            raise ValueError("an object schema must set additionalProperties: false to be bounded")
        parts = [len(json.dumps(name)) + 2 + max_answer_bytes(sub) for name, sub in properties.items()]
        return 2 + sum(parts) + 2 * max(0, len(parts) - 1)
    if kind == "array":
        if "maxItems" not in schema:
            raise ValueError("an array schema needs maxItems to be bounded")
        items = schema["maxItems"]
        return 2 + items * max_answer_bytes(schema["items"]) + 2 * max(0, items - 1)
    if kind == "string":
        if "maxLength" not in schema:
            raise ValueError("a string schema needs maxLength to be bounded")
        return 2 + BYTES_PER_TEXT_CHAR * schema["maxLength"]
    if kind == "integer":
        if "minimum" not in schema or "maximum" not in schema:
            raise ValueError("an integer schema needs minimum and maximum to be bounded")
        return max(len(str(schema["minimum"])), len(str(schema["maximum"])))
    if kind == "boolean":
        return 5
    if kind == "null":
        return 4
    raise ValueError(f"unsupported schema for a bounded answer: {schema!r}")


def token_budget(schema: dict[str, Any]) -> int:
    """``max_new_tokens`` that lets the longest answer ``schema`` admits end by itself."""
    return max_answer_bytes(schema) + END_TOKENS


def choice_budget(choices: Sequence[str]) -> int:
    """``max_new_tokens`` for a choice among strings."""
    return max(len(c.encode()) for c in choices) + END_TOKENS


def schema_text(schema: dict[str, Any]) -> str:
    """The schema as the engines take it (``SamplingParams.json_schema``): JSON text with the properties in their
    declared order, which is the order the constrained answer writes them in (never sort the keys)."""
    return json.dumps(schema)
