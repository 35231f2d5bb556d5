"""SciClaimSeekers' pointwise LLM rerank under constrained decoding: its format (an integer 0–10, as Table 1's
prompt asks and the parser reads), its token budget, the ``constrained`` switch, and the rerank end to end through
the command line on a tiny random model, which then scores every candidate."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from veracity import cli
from veracity.data_prep.checkthat_files import read_submission
from veracity.infer.pipelines.sciclaimseekers.config import UNCONSTRAINED_MAX_NEW_TOKENS, SciClaimConfig
from veracity.infer.pipelines.sciclaimseekers.prompt import (
    SCORE_MAX_NEW_TOKENS,
    SCORE_REGEX,
    SYSTEM_PROMPT,
    USER_TEMPLATE,
    parse_score,
)
from veracity.models.decoding import grammar_accepts

# --- the format -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("score", range(11))
def test_the_regex_admits_each_score_and_the_parser_reads_it(score: int) -> None:
    assert grammar_accepts("regex", SCORE_REGEX, str(score))
    assert parse_score(str(score)) == (score, None)


@pytest.mark.parametrize("answer", ["11", "07", "-1", "7.5", " 7", "7 ", "Score: 7", "7/10", "seven", "100", ""])
def test_the_regex_rejects_anything_else(answer: str) -> None:
    assert not grammar_accepts("regex", SCORE_REGEX, answer)


def test_the_prompt_asks_for_what_the_regex_allows_and_the_budget_fits_it() -> None:
    assert "Output ONLY a single integer score from 0 to 10" in SYSTEM_PROMPT
    assert USER_TEMPLATE.endswith("Score (0-10):")
    assert SCORE_MAX_NEW_TOKENS == len("10") + 4  # the longest answer, one token per character, and the end tokens
    # the engines' one rule: an answer the engine holds to the format gets its longest, any other max_new_tokens
    assert SciClaimConfig().rerank_new_tokens(enforced=True) == SCORE_MAX_NEW_TOKENS
    assert SciClaimConfig(max_new_tokens=3).rerank_new_tokens(enforced=True) == SCORE_MAX_NEW_TOKENS
    assert SciClaimConfig().rerank_new_tokens(enforced=False) == UNCONSTRAINED_MAX_NEW_TOKENS == 8
    assert SciClaimConfig(max_new_tokens=3).rerank_new_tokens(enforced=False) == 3
    with pytest.raises(ValueError, match="max_new_tokens"):
        SciClaimConfig(max_new_tokens=0)


# --- end to end on tiny models ----------------------------------------------------------------------------------

PAPERS = [
    ("Face masks and transmission", "Surgical masks reduce influenza transmission in households."),
    ("Vitamin D in ICU patients", "Vitamin D deficiency is common among intensive care patients."),
    ("Long COVID in adults", "One in eight adults reports lasting symptoms after infection."),
    ("Sea ice and polar bears", "Polar bears lose hunting habitat as Arctic sea ice declines."),
    ("Coral bleaching", "Marine heatwaves bleach reef-building corals across the Pacific."),
    ("Glacier retreat in the Alps", "Alpine glaciers lost a tenth of their volume in two summers."),
    ("Sleep and memory", "Adolescents who sleep less remember fewer words the next day."),
    ("Urban heat islands", "City centres are several degrees warmer than nearby farmland at night."),
]
POSTS = [("1", "Do masks work? #masks https://t.co/x masks reduce influenza transmission", "p0"),
         ("2", "@doc Vitamin D deficiency in ICU patients 😷", "p1"),
         ("3", "long covid: one in eight adults have lasting symptoms #LongCovid", "p2"),
         ("4", "the reefs are bleaching again after the heatwave", "p4"),
         ("5", "downtown feels like an oven after dark", "p7"),  # no word in common with its paper
         ("6", "white giants go hungry as floes vanish", "p3")]  # nor this one


def _task(tmp_path: Path) -> list[str]:
    (tmp_path / "posts.tsv").write_text("post_id\ttweet_text\tcord_uid\n" + "".join(
        f"{p}\t{text}\t{gold}\n" for p, text, gold in POSTS))
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"cord_uid": f"p{i}", "title": t, "abstract": a}) + "\n"
                                              for i, (t, a) in enumerate(PAPERS)))
    return ["--posts", str(tmp_path / "posts.tsv"), "--collection", str(tmp_path / "c.jsonl"), "--max_length", "64",
            "--progress", "false", "--fusion_depth", "8", "--candidates", "8"]


def _mrr_hits(ranked: list[str], gold: set[str]) -> tuple[float, float, float]:
    rank = next((i for i, d in enumerate(ranked[:5], start=1) if d in gold), None)
    return (1 / rank if rank else 0.0, float(rank == 1), float(rank is not None))


def test_constrained_llm_rerank_scores_every_candidate_through_the_cli(tmp_path: Path, tiny_encoder_dir: Path,
                                                                       tiny_lm_dir: Path) -> None:
    out = tmp_path / "run"
    assert cli.main(["infer", "sciclaim", *_task(tmp_path), "--embedder", str(tiny_encoder_dir),
                     "--model", str(tiny_lm_dir), "--reranker", "llm", "--output_dir", str(out)]) == 0
    records = [json.loads(line)["result"] for line in (out / "records.jsonl").read_text().splitlines()]
    assert [r["post_id"] for r in records] == [p for p, _, _ in POSTS]
    per_post = []
    for record in records:
        answers = record["llm_answers"]
        assert [a["doc_id"] for a in answers] == [d for d, _ in record["rrf"]] and len(answers) == 8
        for answer in answers:  # every candidate got a number the regex allows, read as written
            assert re.fullmatch(SCORE_REGEX, answer["answer"]), answer
            assert answer["error"] is None and answer["score"] == int(answer["answer"])
        # the order: by score, ties by RRF (the RRF list is best first), the top 5 submitted. (A random tiny model
        # greedily writes the same score for every pair — Table 1's prompt ends alike — so here ties decide.)
        by_score = sorted(range(len(answers)), key=lambda i: (-answers[i]["score"], i))
        ranked = [answers[i]["doc_id"] for i in by_score][:5]
        assert [d for d, _ in record["ranking"]] == ranked
        assert [s for _, s in record["ranking"]] == [answers[i]["score"] for i in by_score][:5]
        per_post.append(_mrr_hits(ranked, set(record["gold"])))
    assert read_submission(out / "submission.tsv") == {r["post_id"]: [d for d, _ in r["ranking"]] for r in records}

    summary = json.loads((out / "summary.json").read_text())
    stats = summary["llm_rerank"]
    assert (stats["pairs"], stats["posts"], stats["unparsable"]) == (8 * len(POSTS), len(POSTS), 0)
    assert stats["constraint"] == {"regex": SCORE_REGEX}
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["n"] == len(POSTS)
    for k, key in enumerate(("mrr@5", "hit@1", "hit@5")):
        assert metrics[key] == pytest.approx(sum(p[k] for p in per_post) / len(POSTS))
    assert len(set(per_post)) > 1  # posts found first, fifth and not at all: the means are not a trivial 1 or 0


def test_unconstrained_llm_rerank_asks_as_before(tmp_path: Path, tiny_encoder_dir: Path, tiny_lm_dir: Path) -> None:
    from veracity.infer.pipelines.sciclaimseekers.run import main

    summary = main([*_task(tmp_path), "--embedder", str(tiny_encoder_dir), "--model", str(tiny_lm_dir),
                    "--reranker", "llm", "--constrained", "false", "--max_examples", "1",
                    "--output_dir", str(tmp_path / "run")])
    assert "constraint" not in summary["llm_rerank"] and summary["llm_rerank"]["pairs"] == 8
    record = json.loads((tmp_path / "run" / "records.jsonl").read_text().splitlines()[0])["result"]
    unparsed = sum(a["score"] is None for a in record["llm_answers"])
    assert summary["llm_rerank"]["unparsable"] == unparsed  # a random model's free answers: counted, not hidden
