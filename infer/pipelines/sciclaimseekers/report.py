"""A SciClaimSeekers post in ``report.html``: the top-k papers with the gold ones marked and each paper's rank at
every stage (BM25, dense, RRF, the reranker's score), the gold papers the top-k missed below them; an ablation
record shows each configuration's top-k."""

from __future__ import annotations

from typing import Any

from veracity.infer.report_html import Html, ReportItem, esc, kv, section, table, text

FLAGS = {"wrong": "no gold paper at rank 1 (the column 'gold rank' says where the first one is)",
         "abstained": "never: every post gets a ranking",
         "error": "the post failed (error record; it scores 0)"}


def rank_of(doc: str, ids: list[str]) -> int | str:
    """1-based rank of ``doc`` in ``ids``, or "–" when the stage did not list it (BM25 and dense keep their top 10,
    RRF its fusion depth)."""
    return ids.index(doc) + 1 if doc in ids else "–"


def gold_rank(ranking: list[str], gold: list[str]) -> int | None:
    return next((k + 1 for k, doc in enumerate(ranking) if doc in gold), None)


def stages_html(record: dict[str, Any]) -> Html:
    """One row per paper of the final top-k (then each gold paper it missed): its rank at every stage."""
    gold = list(record.get("gold") or [])
    final = [doc for doc, _ in record.get("ranking") or []]
    scores = dict((doc, score) for doc, score in record.get("ranking") or [])
    rrf = [doc for doc, _ in record.get("rrf") or []]
    llm = {a["doc_id"]: a for a in record.get("llm_answers") or []}
    cross = record.get("cross_encoder_scores") or {}
    header = ["final", "paper", "BM25", "dense", "RRF"]
    header += ["LLM score", "LLM answer"] if llm else []
    header += ["cross-encoder"] if cross else []
    header.append("final score")
    rows, classes = [], []
    for doc in final + [g for g in gold if g not in final]:
        is_gold = doc in gold
        row = [rank_of(doc, final), Html(f"{esc(doc)}{' ✓ gold' if is_gold else ''}"),
               rank_of(doc, list(record.get("bm25") or [])), rank_of(doc, list(record.get("dense") or [])),
               rank_of(doc, rrf)]
        if llm:
            answer = llm.get(doc, {})
            error = f'<span class="bad">{esc(answer["error"])}</span> ' if answer.get("error") else ""
            row += [answer.get("score"), Html(error + text(answer.get("answer"), 80))]
        if cross:
            row.append(cross.get(doc))
        row.append(scores.get(doc))
        rows.append(row)
        classes.append("gold" if is_gold else "")
    return table(header, rows, classes)


def ablation_html(record: dict[str, Any]) -> Html:
    """Each configuration's top-k, gold papers marked."""
    gold = set(record.get("gold") or [])
    rankings = record.get("rankings") or {}
    width = max((len(ids) for ids in rankings.values()), default=0)
    rows = [[name, gold_rank(ids, list(gold)) or "–",
             *(Html(f'<span class="gold">{esc(d)} ✓</span>') if d in gold else d for d in ids),
             *([""] * (width - len(ids)))] for name, ids in rankings.items()]
    return table(["configuration", "gold rank", *(f"#{k + 1}" for k in range(width))], rows)


def report_item(record: dict[str, Any]) -> ReportItem:
    """The post's row (post, gold, gold rank, top 1) and its opened view."""
    gold = list(record.get("gold") or [])
    if "rankings" in record:  # --ablation: every configuration's top ids
        body = section("gold", kv({"gold papers": ", ".join(gold) or "–"})) + section("rankings",
                                                                                      ablation_html(record))
        return ReportItem({"gold": ", ".join(gold), "configurations": len(record["rankings"])}, body)
    final = [doc for doc, _ in record.get("ranking") or []]
    rank = gold_rank(final, gold)
    flags = {"wrong"} if gold and rank != 1 else set()
    body = "".join([section("post", f"<p>{text(record.get('text'), 2000)}</p>"),
                    section("gold", kv({"gold papers": ", ".join(gold) or "–",
                                        "first gold at final rank": rank or f"not in the top {len(final)}"})),
                    section("ranking and each stage's rank", stages_html(record))])
    cells = {"post": record.get("text"), "gold": ", ".join(gold), "gold rank": rank,
             "top 1": final[0] if final else None}
    return ReportItem(cells, body, frozenset(flags))
