"""UTS drafter: the strict citation parser, boilerplate, frames, ShadowVal with a scripted judge, selective
emission, task items and the command line."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from veracity.data_prep.task3_citations import (
    citable_url,
    format_citation,
    parse_article,
    parse_citations,
    strip_citations,
)
from veracity.infer.eval.citation_judge import Judge, parse_verdict
from veracity.infer.pipelines.uts.config import UTSConfig
from veracity.infer.pipelines.uts.drafter import anchor_candidates, frame_for, render_cite
from veracity.infer.pipelines.uts.pipeline import UTSPipeline
from veracity.infer.pipelines.uts.text import boilerplate_reason, content_sentences, host_of
from veracity.models.engine import Candidate, Engine, EngineConfig, GenerationRequest, GenerationResult

# --- citation parser ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, urls", [
    ("X (source: https://a.com/x).", [("https://a.com/x",)]),
    ("X (source: http://a.com/x?y=1&z=2; https://b.org/p#frag).", [("http://a.com/x?y=1&z=2", "https://b.org/p#frag")]),
    ("X (source: https://a.com; https://b.com; https://c.com).", [("https://a.com", "https://b.com", "https://c.com")]),
    ("X (source: https://en.wikipedia.org/wiki/Mercury_(planet)).", [("https://en.wikipedia.org/wiki/Mercury_(planet)",)]),
    ("X (source: https://e.org/a_(b); https://e.org/c_(d)_e).", [("https://e.org/a_(b)", "https://e.org/c_(d)_e")]),
    ("A (source: https://a.com) and B (source: https://b.com).", [("https://a.com",), ("https://b.com",)]),
])
def test_strict_citations_parse(text: str, urls: list[tuple[str, ...]]) -> None:
    assert parse_citations(text) == (urls, [])


@pytest.mark.parametrize("text", [
    "X (Source: https://a.com).",  # capital S
    "X (source:https://a.com).",  # no space
    "X (source:  https://a.com).",  # two spaces
    "X (source: https://a.com, https://b.com).",  # comma separator
    "X (source: https://a.com;https://b.com).",  # no space after ;
    "X (source: a.com/page).",  # not a URL
    "X (source: https://).",  # no host
    "X (sources: https://a.com).",
    "X [source: https://a.com].",
    "X (source: https://a.com",  # unclosed
    "X (source: https://e.org/a_((b))).",  # nested parentheses
])
def test_malformed_citations_are_counted_not_parsed(text: str) -> None:
    strict, malformed = parse_citations(text)
    assert strict == [] and len(malformed) == 1


def test_parse_article_cite_sentences_url_union_and_malformed() -> None:
    text = ("Lede sentence without a source. It rained (source: https://a.com/x). Also this (source: https://b.com) "
            "and that (source: https://c.com; https://b.com). Bad one (Source: https://d.com). The end.")
    parsed = parse_article(text)
    assert len(parsed.sentences) == 5
    assert [(c.index, c.urls) for c in parsed.cites] == [(1, ("https://a.com/x",)),
                                                         (2, ("https://b.com", "https://c.com"))]
    assert parsed.cites[0].statement == "It rained." and parsed.cites[1].statement == "Also this and that."
    assert parsed.malformed == [(3, "(Source: https://d.com)")]
    assert parsed.cited_urls == ["https://a.com/x", "https://b.com", "https://c.com"]


def test_citable_url_makes_any_url_parse_and_leaves_good_ones_alone() -> None:
    assert citable_url("https://en.wikipedia.org/wiki/A_(b)") == "https://en.wikipedia.org/wiki/A_(b)"
    assert citable_url("https://a.com/x;y z") == "https://a.com/x%3By%20z"
    assert citable_url("https://a.com/open(only") == "https://a.com/open%28only"
    assert citable_url("https://a.com/bloc.") == "https://a.com/bloc%2E"  # Punkt would split at ".)"
    assert citable_url("www.a.com/x") == "http://www.a.com/x"
    for url in ("https://a.com/x;y z", "https://a.com/open(only", "https://a.com/bloc.", "https://w.org/a_(b)_c"):
        sentence = f"It did {format_citation([url, 'https://b.com'])}."
        assert parse_article(sentence).cites[0].urls == (citable_url(url), "https://b.com")
    assert strip_citations("It did (source: https://a.com) .") == "It did."


# --- boilerplate, hosts, frames ---------------------------------------------------------------------------


@pytest.mark.parametrize("sentence, reason", [
    ("Yes", "too_short"), ("New Zealand", "too_short"), ("“Mr.", "too_short"),
    ("Posted 12:45 PM, 03/10/2020, 1,204 views, 36 shares", "few_letters"),
    ("What are the five major challenges Buhari is facing?", "question"),
    ("BREAKING NEWS FROM THE CAPITAL TODAY", "no_lowercase"),
    ("We use cookies to improve your experience on our site.", "page_furniture"),
    ("Sign up for our daily newsletter to get the news.", "page_furniture"),
    ("Share this story on Facebook and Twitter now.", "page_furniture"),
    ("© 2020 Example Media Group, all rights reserved.", "page_furniture"),
    ("Updated at 10:42 on 3 October 2020", "page_furniture"),
    ("Read the full report at www.example.org for details.", "url"),
    ("The bridge opened to traffic in 1990 after six years of work.", None),
])
def test_boilerplate_reasons(sentence: str, reason: str | None) -> None:
    assert boilerplate_reason(sentence) == reason


def test_content_sentences_keep_order_and_drop_boilerplate() -> None:
    text = "No. We use cookies on this site. The mayor signed the bill on Monday. Is it law? It takes effect in May."
    assert content_sentences(text) == ["The mayor signed the bill on Monday.", "It takes effect in May."]


def test_host_of() -> None:
    assert host_of("https://www.Reuters.com/article/x") == "reuters.com"
    assert host_of("https://web.archive.org/web/20201101145631/https://nypost.com/2020/x/") == "nypost.com"
    assert host_of("https://web.archive.org/web/2020*/example.org/a") == "example.org"
    assert host_of("not a url") == ""


def test_frames_render_one_sentence_each() -> None:
    url = "https://www.reuters.com/a"
    anchor = "The bridge opened in 1990."
    assert render_cite(anchor, url, "plain") == "The bridge opened in 1990 (source: https://www.reuters.com/a)."
    assert render_cite(anchor, url, "host_cite") == \
        "According to reuters.com, the bridge opened in 1990 (source: https://www.reuters.com/a)."
    assert render_cite(anchor, url, "states_that") == \
        "reuters.com states that the bridge opened in 1990 (source: https://www.reuters.com/a)."
    # names keep their capitals; a closing quote after the full stop stays, the stop goes
    assert render_cite("Biden said “no.”", url, "host_cite") == \
        "According to reuters.com, Biden said “no” (source: https://www.reuters.com/a)."
    assert render_cite("It fell.", "no-host", "host_cite") == "It fell (source: http://no-host)."  # plain fallback
    with pytest.raises(ValueError, match="unknown frame"):
        render_cite(anchor, url, "shouting")


def test_frame_per_host_and_reviewer() -> None:
    rules = {"afp.com": "states_that"}
    assert frame_for("https://factcheck.afp.com/x", "host_cite", rules) == "states_that"
    assert frame_for("https://notafp.com/x", "host_cite", rules) == "host_cite"
    assert frame_for("https://reuters.com/x", "host_cite", {"afp": "states_that"}, reviewer="AFP") == "states_that"


def test_anchor_candidates_skip_boilerplate_and_fall_back() -> None:
    candidates, info = anchor_candidates("Yes. We use cookies here. The dam holds 3 million litres.",
                                         "https://a.com", "plain")
    assert [c.anchor for c in candidates] == ["The dam holds 3 million litres."]
    assert candidates[0].index == 2 and info["skipped"] == {"too_short": 1, "page_furniture": 1}
    candidates, info = anchor_candidates("Yes.", "https://a.com", "plain")
    assert [c.sentence for c in candidates] == ["Yes (source: https://a.com)."]
    assert info["fallback"] == "all_boilerplate"
    assert anchor_candidates("", "https://a.com", "plain") == ([], {"sentences": 0, "skipped": {},
                                                                    "fallback": "no_text"})


# --- ShadowVal with a scripted judge --------------------------------------------------------------------------


class ScriptedJudgeEngine(Engine):
    """Says yes when the statement in the prompt contains one of ``approve``; records every statement asked."""

    kind = "scripted"

    def __init__(self, approve: Sequence[str]):
        self.approve, self.asked = tuple(approve), []

    @property
    def model_id(self) -> str:
        return "scripted"

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        out = []
        for request in requests:
            statement = request.messages[-1]["content"].split("Statement: ", 1)[1].split("\n", 1)[0]
            self.asked.append(statement)
            answer = "Yes." if any(a in statement for a in self.approve) else "No, it is not."
            out.append(GenerationResult([Candidate(answer, "stop")]))
        return out


EVIDENCE = ("No. The first anchor says one thing. We use cookies on this site. The second anchor says more. "
            "The third anchor says the GOOD part. The fourth anchor is never reached.")


def _item(evidence: str = EVIDENCE) -> dict:
    return {"id": "i1", "claim": "The council closed the bridge.", "claimant": "A blog", "verdict": "Refuted",
            "evidence": [{"url": "https://news.example.org/a", "text": evidence},
                         {"url": "https://b.example.org/b", "text": "The other source says the bridge is open."}]}


def _run(approve: Sequence[str], **config: object) -> tuple[dict, ScriptedJudgeEngine]:
    engine = ScriptedJudgeEngine(approve)
    pipeline = UTSPipeline(UTSConfig(frame="plain", shadowval=True, **config), EngineConfig(), judge=Judge(engine))
    return pipeline([_item()])[0], engine


def test_shadowval_escalates_through_non_boilerplate_sentences_in_order() -> None:
    record, engine = _run(["GOOD", "other source"])
    first_url_asks = [s for s in engine.asked if "bridge" not in s]
    assert first_url_asks == ["The first anchor says one thing.", "The second anchor says more.",
                              "The third anchor says the GOOD part."]  # boilerplate skipped, stops at the yes
    cite = record["cites"][0]
    assert (cite["outcome"], cite["chosen"]) == ("accepted", 2)
    assert [t["supported"] for t in cite["tries"]] == [False, False, True]
    assert record["cites"][1]["outcome"] == "accepted" and len(record["cites"][1]["tries"]) == 1
    assert record["factchecking_article"] == (
        "A blog claimed that the council closed the bridge. "
        "The third anchor says the GOOD part (source: https://news.example.org/a). "
        "The other source says the bridge is open (source: https://b.example.org/b). Therefore, the claim is refuted.")


def test_shadowval_is_bounded_and_falls_back_to_the_first_anchor() -> None:
    record, engine = _run(["GOOD"], max_tries=2)
    assert [s for s in engine.asked if "bridge" not in s] == ["The first anchor says one thing.",
                                                               "The second anchor says more."]
    assert (record["cites"][0]["outcome"], record["cites"][0]["chosen"]) == ("fallback", 0)
    assert "The first anchor says one thing (source: https://news.example.org/a)." in record["factchecking_article"]


def test_selective_emission_drops_rejected_cites() -> None:
    record, _ = _run(["GOOD"], max_tries=2, selective_emission=True)
    assert [c["outcome"] for c in record["cites"]] == ["dropped", "dropped"]
    assert record["factchecking_article"] == ("A blog claimed that the council closed the bridge. "
                                              "Therefore, the claim is refuted.")
    kept, _ = _run(["GOOD"], selective_emission=True)
    assert [c["outcome"] for c in kept["cites"]] == ["accepted", "dropped"]
    assert "(source: https://b.example.org/b)" not in kept["factchecking_article"]


def test_nli_judge_says_yes_at_the_threshold() -> None:
    import numpy as np

    from veracity.infer.eval.citation_judge import NLIJudge

    class Verifier:
        def predict(self, premises, hypotheses):
            return np.array([[0.5 if "held" in h else 0.49, 0.3, 0.2] for h in hypotheses])

    judge = NLIJudge(Verifier(), threshold=0.5)
    assert [v.supported for v in judge([("The dam held.", "e"), ("The dam burst.", "e")])] == [True, False]
    assert (judge.stats.yes, judge.stats.no) == (1, 1)


def test_parse_verdict_and_selective_needs_shadowval() -> None:
    assert parse_verdict("Yes, it is.") is True and parse_verdict(" no") is False and parse_verdict("Maybe") is None
    assert parse_verdict("**No**, because") is False and parse_verdict('"Yes"') is True
    assert parse_verdict('The statement "Yes') is None  # an echo of the statement is not a verdict
    assert parse_verdict("Nobody knows") is None
    with pytest.raises(ValueError, match="needs shadowval"):
        UTSConfig(selective_emission=True)
    with pytest.raises(ValueError, match="statement"):
        UTSConfig(judge_prompt="Is {claim} true?")


# --- task items and the command line ----------------------------------------------------------------------------


def test_watclaimcheck_records_load_through_the_task_schema(tmp_path: Path) -> None:
    from veracity.data_prep.task3_items import read_items

    (tmp_path / "articles").mkdir()
    (tmp_path / "articles" / "p1.json").write_text(json.dumps(["First paragraph.", "Second paragraph."]))
    (tmp_path / "review").mkdir()
    (tmp_path / "review" / "r1.json").write_text(json.dumps(["The review says false."]))
    rows = [{"metadata": {"id": 30349, "claimant": "Jane Doe", "claim": "Cats can fly.",
                          "premise_articles": {"https://a.com/1": "p1.json"}},
             "label": {"rating": 0, "review_article": "r1.json", "reviewer_name": "AFP"}},
            {"metadata": {"id": 30350, "claim": "Dogs can swim.", "premise_articles": {}}}]
    (tmp_path / "test.json").write_text(json.dumps(rows))
    items = read_items(tmp_path / "test.json")
    assert items[0].to_dict() == {
        "id": "30349", "claim": "Cats can fly.", "claimant": "Jane Doe", "verdict": "0",
        "evidence": [{"url": "https://a.com/1", "text": "First paragraph.\nSecond paragraph."}],
        "reference_article": "The review says false.", "reviewer": "AFP"}
    assert (items[1].verdict, items[1].evidence, items[1].reference_article) == ("", [], "")


def test_infer_uts_command_writes_articles_and_items(tmp_path: Path) -> None:
    from veracity import cli

    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps(_item()) + "\n")
    out = tmp_path / "out"
    assert cli.main(["infer", "uts", "--items", str(items), "--frame", "host_cite", "--output_dir", str(out),
                     "--progress", "false"]) == 0
    articles = [json.loads(line) for line in (out / "articles.jsonl").read_text().splitlines()]
    assert list(articles[0]) == ["factchecking_article", "id"] and articles[0]["id"] == "i1"
    assert "According to news.example.org, the first anchor says one thing (source: https://news.example.org/a)." \
        in articles[0]["factchecking_article"]
    written = json.loads((out / "items.jsonl").read_text())
    assert written["evidence"] == _item()["evidence"] and written["verdict"] == "Refuted"
    assert (out / "run_config.yaml").is_file() and (out / "records.jsonl").is_file()


def test_bad_items_exit_2_naming_file_line_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from veracity import cli

    items = tmp_path / "bad.jsonl"
    items.write_text(json.dumps(_item()) + "\n" + json.dumps({"id": "x", "claim": "c", "evidence": "text"}) + "\n")
    with pytest.raises(SystemExit) as stop:
        cli.main(["infer", "uts", "--items", str(items), "--output_dir", str(tmp_path / "o")])
    assert stop.value.code == 2
    assert f"{items}:2: field 'evidence'" in capsys.readouterr().err


def test_infer_uts_resume_refuses_records_made_under_other_settings(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from veracity import cli

    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps(_item()) + "\n")
    out = tmp_path / "out"
    argv = ["infer", "uts", "--items", str(items), "--frame", "host_cite", "--output_dir", str(out),
            "--progress", "false"]
    assert cli.main(argv) == 0
    assert cli.main([*argv, "--max_examples", "5"]) == 0  # how much, not what: resumes
    written = {p.name: p.read_bytes() for p in out.iterdir()}
    items.write_text(json.dumps(_item()) + "\n" + json.dumps({**_item(), "id": "i2"}) + "\n")
    capsys.readouterr()
    for changed, shown in ((["--frame", "plain"], "frame: 'host_cite' → 'plain'"),
                           (["--min_anchor_words", "3"], "min_anchor_words:"),
                           (["--conclusion", "So: {verdict}."], "conclusion:")):
        with pytest.raises(SystemExit) as stop:
            cli.main([*argv, *changed])
        assert stop.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "made under another run config" in err and shown in err, err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == written, "a refused run changes no file"
