"""The pieces every view of ``report.html`` is built from (``infer/report_html.py`` and each pipeline's
``report.py``): :class:`Html` (text already safe), :func:`esc` and the helpers that escape what they are given.

Every text shown goes through :func:`text` or :func:`esc`. :func:`shown` turns FEVER's bracket tokens
(``-LRB-`` …) back into the characters they stand for: for display only, the records keep them.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

TEXT_LIMIT = 600  # characters of a text shown before "show more"

# FEVER's (Penn Treebank) tokens for brackets and the colon, with the space the tokenisation put around them.
FEVER_TOKENS = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}",
                "-COLON-": ":"}
_OPENING = re.compile(r"(-LRB-|-LSB-|-LCB-)\s?")
_CLOSING = re.compile(r"(?:(?<=\S)\s)?(-RRB-|-RSB-|-RCB-|-COLON-)")


def shown(value: str) -> str:
    """``value`` as a reader should see it: FEVER's ``-LRB-``, ``-RRB-``, ``-LSB-``, ``-RSB-``, ``-LCB-``,
    ``-RCB-`` and ``-COLON-`` as ``( ) [ ] { } :``, without the space the tokeniser put inside the brackets and
    before the colon ("Star Wars -COLON- Episode -LRB- film -RRB-" → "Star Wars: Episode (film)")."""
    if "-" not in value:
        return value
    value = _OPENING.sub(lambda m: FEVER_TOKENS[m.group(1)], value)
    return _CLOSING.sub(lambda m: FEVER_TOKENS[m.group(1)], value)


class Html(str):
    """A string that is already HTML (made by this module's helpers): :func:`esc` passes it through."""


def esc(value: Any) -> Html:
    """``value`` as HTML text: escaped (quotes too, so it is safe in attributes); None is empty; Html as is."""
    if isinstance(value, Html):
        return value
    return Html("" if value is None else html.escape(value if isinstance(value, str) else fmt(value), quote=True))


def fmt(value: Any, digits: int = 4) -> str:
    """A value for a table cell: floats to ``digits`` decimals, lists and dicts as compact JSON, None as "–"."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.1f}" if abs(value) >= 1000 else f"{value:.{digits}f}"
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def text(value: Any, limit: int = TEXT_LIMIT, literal: bool = False) -> Html:
    """A long text escaped (FEVER tokens :func:`shown` as text unless ``literal``: a prompt as the model read it),
    its first ``limit`` characters shown and the rest behind "show more" (not repeated)."""
    value = "" if value is None else str(value) if literal else shown(str(value))
    if len(value) <= limit:
        return Html(f'<span class="t">{esc(value)}</span>')
    return Html(f'<span class="t">{esc(value[:limit])}</span><details class="more"><summary>show more '
                f'({len(value) - limit:,} characters)</summary><span class="t">{esc(value[limit:])}</span></details>')


def table(header: Sequence[Any], rows: Iterable[Sequence[Any]], row_classes: Sequence[str] | None = None) -> Html:
    """A table; cells are escaped unless Html, numbers right-aligned."""
    parts = ["<table><tr>", *(f"<th>{esc(h)}</th>" for h in header), "</tr>"]
    for k, row in enumerate(rows):
        css = row_classes[k] if row_classes and row_classes[k] else ""
        parts.append(f'<tr class="{esc(css)}">' if css else "<tr>")
        parts += [f'<td class="n">{esc(c)}</td>' if isinstance(c, (int, float)) and not isinstance(c, bool)
                  else f"<td>{esc(c)}</td>" for c in row]
        parts.append("</tr>")
    return Html("".join(parts) + "</table>")


def kv(pairs: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> Html:
    """A two-column table of names and values (values escaped unless Html)."""
    items = pairs.items() if isinstance(pairs, Mapping) else pairs
    return Html('<table class="kv">' + "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in items)
                + "</table>")


def section(title: str, body: str) -> Html:
    return Html(f"<h4>{esc(title)}</h4>{body}")


def link(url: Any) -> Html:
    """A URL as a link when it is http(s), else as text (a record's URL is untrusted)."""
    url = "" if url is None else str(url)
    if url.startswith(("http://", "https://")):
        return Html(f'<a href="{esc(url)}" rel="noreferrer noopener">{esc(url)}</a>')
    return esc(url)


def judged(prediction: Any, gold: Any) -> Html:
    """A prediction followed by "right" or "wrong" against ``gold`` (nothing without gold)."""
    mark = "" if not gold else (' <span class="ok">right</span>' if prediction == gold else
                                ' <span class="bad">wrong</span>')
    return Html(f"{esc(prediction)}{mark}")


def json_view(value: Any, limit: int = 4000) -> Html:
    return Html(f"<pre>{text(json.dumps(value, indent=1, ensure_ascii=False, default=str), limit)}</pre>")
