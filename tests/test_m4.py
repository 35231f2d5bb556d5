"""The M4 scorer: each sub-metric on hand-made articles with hand-computed values, malformed citations penalised,
metrics.json's keys, bad input through the command line."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from veracity.data_prep.task3_citations import parse_article
from veracity.data_prep.task3_items import Evidence, TaskItem
from veracity.infer.eval.citation_judge import Verdict
from veracity.infer.eval.m4 import (
    METRIC_KEYS,
    chunk,
    citation_scores,
    corpus_metrics,
    coverage,
    entailment_score,
    score_items,
)


class StubVerifier:
    """``predict`` like NLIVerifier: P(entailment) looked up by (premise, hypothesis), default 0."""

    def __init__(self, p_ent: dict[tuple[str, str], float]):
        self.p_ent, self.calls = p_ent, 0

    def predict(self, premises: Sequence[str], hypotheses: Sequence[str]) -> np.ndarray:
        self.calls += 1
        rows = [self.p_ent.get((p, h), 0.0) for p, h in zip(premises, hypotheses, strict=True)]
        return np.array([[e, 1 - e, 0.0] for e in rows])


def scripted_judge(yes: set[tuple[str, str]]):
    asked: list[tuple[str, str]] = []

    def judge(pairs: Sequence[tuple[str, str]]) -> list[Verdict]:
        asked.extend(pairs)
        return [Verdict(pair in yes, "yes" if pair in yes else "no") for pair in pairs]

    return judge, asked


G1 = "It was claimed that the dam burst. According to a.com, the dam held. The river rose."
G2 = "Therefore, the claim is refuted."
REF = "The dam did not burst. So the claim is refuted."


def test_chunks_of_three_sentences() -> None:
    assert chunk(["a", "b", "c", "d"], 3) == ["a b c", "d"]
    assert chunk([], 3) == []


def test_entailment_is_the_mean_of_the_generated_and_reference_sides() -> None:
    generated, reference = ["g1", "g2"], ["r1", "r2"]
    p = {("r1", "g1"): 0.8, ("r2", "g1"): 0.4, ("r1", "g2"): 0.1, ("r2", "g2"): 0.3,  # reference ⇒ generated
         ("g1", "r1"): 0.6, ("g2", "r1"): 0.2, ("g1", "r2"): 0.0, ("g2", "r2"): 0.5}  # generated ⇒ reference
    scores = entailment_score(generated, reference, p)
    assert scores["a_side"] == pytest.approx((0.8 + 0.3) / 2)  # max over reference chunks, mean over generated
    assert scores["b_side"] == pytest.approx((0.6 + 0.5) / 2)
    assert scores["entailment"] == pytest.approx((0.55 + 0.55) / 2)
    assert entailment_score([], reference, p)["entailment"] == 0.0


def test_citation_recall_precision_and_malformed_penalty() -> None:
    evidence = {"https://a.com": "A text.", "https://b.com": "B text."}
    article = ("Lede. S one (source: https://a.com). S two (source: https://b.com). "
               "S three (source: https://a.com; https://b.com). S four (Source: https://a.com). "
               "S five (source: https://x.com). End.")
    parsed = parse_article(article)
    yes = {("S one.", "A text."), ("S three.", "A text.\nB text."), ("S three.", "A text.")}
    supported = {pair: pair in yes for pair in [
        ("S one.", "A text."), ("S two.", "B text."), ("S three.", "A text.\nB text."),
        ("S three.", "A text."), ("S three.", "B text.")]}
    scores = citation_scores(parsed, evidence, supported)
    # cite sentences: one (yes), two (no), three (joint yes), five (unknown URL: no); + 1 malformed
    assert scores["citation_recall"] == pytest.approx(2 / 5)
    # citations: one ✓, two ✗, three/a ✓ (alone yes), three/b ✗ (alone no, and a without b still yes), five ✗;
    # + 1 malformed → 2 / 6
    assert scores["citation_precision"] == pytest.approx(2 / 6)
    assert (scores["cite_sentences"], scores["citations"], scores["malformed"], scores["unknown_urls"]) == (4, 5, 1, 1)
    assert coverage(parsed, ["https://a.com", "https://b.com", "https://c.com"]) == pytest.approx(2 / 3)


def test_no_citations_score_zero_and_no_evidence_covers_all() -> None:
    parsed = parse_article("Just prose. Nothing cited.")
    scores = citation_scores(parsed, {}, {})
    assert (scores["citation_recall"], scores["citation_precision"]) == (0.0, 0.0)
    assert coverage(parsed, []) == 1.0 and coverage(parsed, ["https://a.com"]) == 0.0


def test_score_items_end_to_end_on_a_hand_made_article() -> None:
    article = f"{G1} {G2}".replace("the dam held.", "the dam held (source: https://a.com).")
    item = TaskItem("i1", "The dam burst.", "", "Refuted",
                    [Evidence("https://a.com", "The dam held."), Evidence("https://b.com", "Rain fell.")], REF)
    g1 = "It was claimed that the dam burst. According to a.com, the dam held. The river rose."
    p = {(REF, g1): 0.9, (REF, G2): 0.5, (g1, REF): 0.2, (G2, REF): 0.6}
    verifier = StubVerifier(p)
    judge, asked = scripted_judge({("According to a.com, the dam held.", "The dam held.")})
    (row,) = score_items([item], {"i1": article}, judge, verifier.predict, chunk_sentences=3)
    assert (row["generated_chunks"], row["reference_chunks"]) == (2, 1)  # 4 sentences → 3 + 1; reference 2 → 1
    assert row["a_side"] == pytest.approx((0.9 + 0.5) / 2) and row["b_side"] == pytest.approx(0.6)
    assert row["entailment"] == pytest.approx(0.65)
    assert (row["citation_recall"], row["citation_precision"], row["coverage"]) == (1.0, 1.0, 0.5)
    assert row["m4"] == pytest.approx((0.65 + 1.0 + 1.0 + 0.5) / 4)
    assert asked == [("According to a.com, the dam held.", "The dam held.")] and verifier.calls == 1
    missing = TaskItem("i2", "c", "", "", [Evidence("https://a.com", "x")], "")
    (row2,) = score_items([missing], {}, judge, verifier.predict)
    assert (row2["has_article"], row2["entailment"], row2["m4"], row2["coverage"]) == (False, None, None, 0.0)


def test_corpus_metrics_has_exactly_the_six_keys() -> None:
    rows = [{"entailment": 0.5, "citation_recall": 1.0, "citation_precision": 0.5, "coverage": 1.0},
            {"entailment": None, "citation_recall": 0.0, "citation_precision": 0.5, "coverage": 0.5}]
    metrics = corpus_metrics(rows)
    assert tuple(metrics) == METRIC_KEYS
    assert metrics == {"m4": pytest.approx((0.5 + 0.5 + 0.5 + 0.75) / 4), "entailment": 0.5,
                       "citation_recall": 0.5, "citation_precision": 0.5, "coverage": 0.75, "n": 2}


def test_bad_articles_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from veracity import cli

    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"id": "i1", "claim": "c", "evidence": []}) + "\n")
    articles = tmp_path / "articles.jsonl"
    articles.write_text(json.dumps({"id": "i1", "factchecking_article": 3}) + "\n")
    with pytest.raises(SystemExit) as stop:
        cli.main(["eval", "m4", "--articles", str(articles), "--items", str(items), "--output_dir", str(tmp_path)])
    assert stop.value.code == 2
    assert f"{articles}:1: field 'factchecking_article'" in capsys.readouterr().err
