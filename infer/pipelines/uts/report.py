"""A UTS item in ``report.html``: the drafted article, and for each evidence URL the cite it got, every candidate
sentence and what the judge said of each one it was asked about."""

from __future__ import annotations

from typing import Any

from veracity.infer.report_html import Html, ReportItem, esc, kv, link, section, table, text

FLAGS = {"wrong": "a cite the judge rejected is in the article anyway (outcome fallback)",
         "abstained": "a cite was left out: the judge rejected every candidate (selective emission: dropped)",
         "error": "the item failed (error record)"}


def cite_html(number: int, cite: dict[str, Any]) -> Html:
    """One evidence URL: its cite and outcome, each candidate with the judge's verdict on it (if asked)."""
    verdicts = {t["candidate"]: t for t in cite.get("tries") or []}
    rows, classes = [], []
    for c in cite.get("candidates") or []:
        k = c.get("index", len(rows))
        verdict = verdicts.get(k)
        said = "not asked" if verdict is None else Html(
            f'<span class="{"ok" if verdict.get("supported") else "bad"}">'
            f'{"supported" if verdict.get("supported") else "not supported"}</span> '
            f'({esc(verdict.get("answer"))}{"; " + esc(verdict["error"]) if verdict.get("error") else ""})')
        chosen = k == cite.get("chosen")
        rows.append([f"{k + 1}{' ★' if chosen else ''}", text(c.get("sentence"), 400), said])
        classes.append("chosen" if chosen and cite.get("outcome") == "accepted" else "")
    outcome = cite.get("outcome")
    mark = "ok" if outcome == "accepted" else "bad" if outcome in ("fallback", "dropped") else ""
    skipped = (cite.get("anchor_info") or {}).get("skipped")
    facts = kv([("evidence", link(cite.get("url"))), ("frame", cite.get("frame")),
                ("outcome", Html(f'<span class="{mark}">{esc(outcome)}</span>')),
                ("cite in the article", text(cite.get("sentence"), 600) if cite.get("sentence") else "none"),
                *([("skipped sentences", skipped)] if skipped else [])])
    candidates = table(["candidate (★ cited)", "sentence", "judge"], rows, classes) if rows else \
        Html('<p class="note">no candidate sentence</p>')
    return section(f"cite {number}", facts + candidates)


def report_item(record: dict[str, Any]) -> ReportItem:
    """The item's row (article, cites, outcomes) and its opened view."""
    cites = record.get("cites") or []
    outcomes = record.get("outcomes") or {}
    flags = set()
    if outcomes.get("fallback"):
        flags.add("wrong")
    if outcomes.get("dropped"):
        flags.add("abstained")
    body = "".join([section("article", f"<p>{text(record.get('factchecking_article'), 3000)}</p>"),
                    *(cite_html(k + 1, c) for k, c in enumerate(cites))])
    cells = {"article": record.get("factchecking_article"), "cites": len(cites),
             **{o: outcomes.get(o, 0) for o in ("accepted", "fallback", "dropped", "stub")}}
    return ReportItem(cells, body, frozenset(flags))
