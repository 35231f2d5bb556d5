"""An R2VC claim in ``report.html``: the claim, each evidence passage with its NLI scores, each candidate with its
label, rationale, signals, confidence and parse error, the prompt the generator got, and the decision with its
abstention reason and the label it would have given without abstention.

The prompt is not stored in the record (it would repeat every passage): it is rebuilt from the record's claim and
passages by ``prompt.prompt_messages``, the function the pipeline called (the passages as the generator saw them,
an ``--inject`` probe included), and shown on demand, once per claim (every candidate of a claim shares it)."""

from __future__ import annotations

from typing import Any

from veracity.infer.pipelines.r2vc.prompt import prompt_messages
from veracity.infer.report_html import Html, ReportItem, esc, fmt, judged, kv, section, table, text

FLAGS = {"wrong": "the prediction (an abstention counts as NOT ENOUGH INFO, as in accuracy) differs from gold",
         "abstained": "the decision abstained (no evidence, no parsable candidate, or below τ_ver / τ_cal)",
         "error": "the claim failed (error record) or the generator returned an error",
         "abstained-right": "the decision abstained, but the label it would have given without abstention (the "
                            "chosen candidate's) equals gold",
         "answered-wrong": "the decision answered, and its label differs from gold"}
SIGNALS = ("s_ver", "s_ent", "s_contr", "s_cov", "s_cit", "s_cons", "s_align", "y_nli")


def passages_html(record: dict[str, Any]) -> Html:
    """Each passage verbatim, with the verifier's entailment / neutral / contradiction for the claim."""
    nli = record.get("nli") or []
    rows = []
    for k, passage in enumerate(record.get("passages") or []):
        scores = nli[k] if k < len(nli) and len(nli[k]) == 3 else [None] * 3
        title = passage.get("title")
        body = Html((f"<b>{text(title, 200)}</b>: " if title else "") + text(passage.get("text")))
        rows.append([k + 1, body, *scores, passage.get("doc_id", "")])
    if not rows:
        return Html('<p class="note">no evidence</p>')
    if not any(row[-1] != "" for row in rows):  # a claims file's own evidence: no index document ids
        return table(["#", "passage", "entail", "neutral", "contradict"], [row[:-1] for row in rows])
    return table(["#", "passage", "entail", "neutral", "contradict", "doc"], rows)


def candidates_html(record: dict[str, Any]) -> Html:
    """Every candidate (generator and NLI), the chosen one marked; an unparsed one shows its raw answer."""
    chosen = record.get("chosen")
    rows, classes = [], []
    for k, c in enumerate(record.get("candidates") or []):
        signals = c.get("signals") or {}
        signal_text = " · ".join(f"{s} {fmt(signals[s], 3)}" for s in SIGNALS if s in signals)
        error = c.get("parse_error")
        if error:
            answer = Html(f'<span class="bad">{esc(error)}</span><br>{text(c.get("text"), 300)}')
        elif c.get("from") == "nli" and not c.get("rationale"):
            answer = Html('<span class="note">the verifier\'s own label (y_NLI)</span>')
        else:
            answer = text(c.get("rationale"), 400)
        rows.append([f"{k + 1}{' ★' if k == chosen else ''}", c.get("from"), c.get("label") or "–", answer,
                     c.get("evidence_ids"), signal_text, c.get("confidence"), c.get("confidence_uncalibrated"),
                     c.get("mean_logprob")])
        classes.append("chosen" if k == chosen else "")
    if not rows:
        return Html('<p class="note">no candidate</p>')
    return table(["#", "from", "label", "rationale / parse error", "cites", "signals", "confidence",
                  "uncalibrated", "mean log-prob"], rows, classes)


def prompt_html(record: dict[str, Any]) -> Html:
    """The messages the generator got for this claim, folded (rebuilt from the record: module docstring)."""
    if not any(c.get("from") == "generator" for c in record.get("candidates") or []):
        return Html("")
    passages = [p.get("text") or "" for p in record.get("passages") or []]
    messages = prompt_messages(record.get("claim") or "", passages)
    body = "".join(f'<div class="role">{text(m["role"], 40)}</div><pre>{text(m["content"], 20000, literal=True)}</pre>'
                   for m in messages)
    return Html(f'<details class="prompt"><summary>prompt of the generator candidates ({len(messages)} messages, '
                "shared by every generator candidate of this claim; rebuilt from the record's claim and passages, "
                f"FEVER's tokens as the model read them)</summary>{body}</details>")


def would_be_label(record: dict[str, Any]) -> str | None:
    """The label the claim would have been given without abstention: the chosen candidate's (None when no
    candidate was chosen: no evidence, or none parsed)."""
    return record.get("label") if record.get("chosen") is not None else None


def report_item(record: dict[str, Any]) -> ReportItem:
    """The claim's row (claim, gold, prediction, confidence, outcome) and its opened view."""
    gold, prediction = record.get("gold"), record.get("prediction")
    flags = set()
    if gold and prediction != gold:
        flags.add("wrong")
    without_abstention = would_be_label(record)
    if record.get("abstained"):
        flags.add("abstained")
        if gold and without_abstention == gold:
            flags.add("abstained-right")
    elif gold and prediction != gold:
        flags.add("answered-wrong")
    if record.get("generation_error"):
        flags.add("error")
    decision = kv((k, v) for k, v in [
        ("prediction", judged(prediction, gold)), ("gold", gold), ("outcome", record.get("outcome")),
        ("abstain reason", record.get("abstain_reason")),
        ("label without abstention", judged(without_abstention, gold) if without_abstention else "– (no candidate)"),
        ("confidence", record.get("confidence")), ("confidence (uncalibrated)", record.get("confidence_uncalibrated")),
        ("generation error", record.get("generation_error")), ("source", record.get("source"))] if v is not None)
    claim_signals = record.get("claim_signals") or {}
    body = "".join([section("claim", f"<p>{text(record.get('claim'), 2000)}</p>"),
                    f'<div class="row"><div>{section("decision", decision)}</div>',
                    f'<div>{section("claim signals", kv({k: fmt(v, 4) for k, v in claim_signals.items()}))}</div>'
                    "</div>", section("evidence", passages_html(record)),
                    section("candidates", candidates_html(record) + prompt_html(record))])
    cells = {"claim": record.get("claim"), "gold": gold, "prediction": prediction,
             "without abstention": without_abstention or "–", "confidence": record.get("confidence"),
             "outcome": record.get("outcome")}
    return ReportItem(cells, body, frozenset(flags))
