"""An AIC claim in ``report.html``: the sources it retrieved, the question–answer pairs the model wrote on them, the
Likert scores and the rule that chose the label, and every generation attempt."""

from __future__ import annotations

from typing import Any

from veracity.infer.report_html import Html, ReportItem, esc, judged, kv, link, section, table, text

FLAGS = {"wrong": "the verdict differs from the gold label (a failed claim counts wrong, as in the scorer)",
         "abstained": "never: AIC always gives a verdict (Not Enough Evidence is a verdict)",
         "error": "no answer parsed after every retry (failed), or the claim failed (error record)"}


def sources_html(sources: list[dict[str, Any]]) -> Html:
    """Each retrieved source: its URL, whether it is one of the claim's own documents, its scores and text."""
    rows = []
    for k, s in enumerate(sources):
        context = [f"… {s['context_before']}" if s.get("context_before") else "", s.get("text", ""),
                   f"{s['context_after']} …" if s.get("context_after") else ""]
        rows.append([k + 1, Html(f"{link(s.get('url'))}<br>{text(' '.join(c for c in context if c), 500)}"),
                     s.get("role", ""), s.get("similarity"), s.get("mmr_score")])
    if not rows:
        return Html('<p class="note">no source</p>')
    return table(["#", "source", "role", "similarity", "MMR"], rows)


def qa_html(answer: dict[str, Any]) -> Html:
    rows = [[k + 1, text(q.get("question"), 400), text(q.get("answer"), 600), q.get("answer_type"),
             q.get("source") or "–"] for k, q in enumerate(answer.get("questions") or [])]
    if not rows:
        return Html('<p class="note">no question–answer pair</p>')
    return table(["#", "question", "answer", "type", "source #"], rows)


def likert_html(answer: dict[str, Any], label: str | None) -> Html:
    """The model's 1–5 score of each verdict; the chosen label marked."""
    likert = answer.get("likert") or {}
    rows = [[name, score] for name, score in likert.items()]
    return table(["verdict", "Likert"], rows, ["chosen" if name == label else "" for name in likert])


def attempts_html(attempts: list[dict[str, Any]]) -> Html:
    rows = [[k + 1, a.get("seed"), a.get("temperature"), a.get("finish_reason"), a.get("new_tokens"),
             Html(f'<span class="bad">{esc(a["error"])}</span>') if a.get("error") else "parsed",
             text(a.get("text"), 300)] for k, a in enumerate(attempts)]
    return table(["#", "seed", "temperature", "finish", "new tokens", "parse", "raw answer"], rows)


def report_item(record: dict[str, Any]) -> ReportItem:
    """The claim's row (claim, gold, verdict, the rule that chose it, pairs) and its opened view."""
    gold, label = record.get("gold"), record.get("label")
    answer = record.get("answer") or {}
    flags = set()
    if gold and label != gold:
        flags.add("wrong")
    if record.get("status") == "failed":
        flags.add("error")
    decision = kv((k, v) for k, v in [
        ("verdict", judged(label, gold)), ("gold", gold), ("label from", answer.get("label_from")),
        ("stated verdict", answer.get("stated_verdict")), ("failure", record.get("failure")),
        ("repaired JSON", answer.get("repaired")), ("questions dropped", answer.get("dropped_questions")),
        ("notes", "; ".join(answer.get("notes") or []) or None), ("few-shot examples", record.get("few_shot_ids")),
        ("chunks in the claim's store", record.get("n_chunks")), ("record id", record.get("record_id"))]
        if v is not None)
    likert = f'<div>{section("Likert scores", likert_html(answer, label))}</div>' if answer else ""
    body = "".join([
        section("claim", f"<p>{text(record.get('claim'), 2000)}</p>"),
        f'<div class="row"><div>{section("decision", decision)}</div>{likert}</div>',
        section("question–answer pairs", qa_html(answer)),
        section("sources", sources_html(record.get("sources") or [])),
        section("generation attempts", attempts_html(record.get("attempts") or []))])
    cells = {"claim": record.get("claim"), "gold": gold, "verdict": label, "label from": answer.get("label_from"),
             "QA pairs": len(answer.get("questions") or [])}
    return ReportItem(cells, body, frozenset(flags))
