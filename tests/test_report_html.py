"""report.html of each pipeline's run: one row per record of ``records.jsonl`` (same ids, same order, the right
flags), the filters, the metrics, each pipeline's own view of an item, and every piece of record text escaped —
checked with the standard library's HTML parser on tiny runs made through each ``main(argv)``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from html.parser import HTMLParser
from pathlib import Path

import pytest
from pipeline_inputs import CLAIMS, ITEMS, AnswerAll, build_tiny_cross_encoder, write_jsonl, write_posts_and_collection

from veracity.infer.batch import latest_records
from veracity.infer.report_html import (
    ReportItem,
    flatten,
    generic_item,
    metrics_html,
    render_report,
)
from veracity.models.engine import Candidate, Engine, GenerationRequest, GenerationResult

REPO = Path(__file__).resolve().parents[1]
PAYLOAD = "<script>alert(1)</script>"
HOSTILE_ID = 'c7"><img src=x onerror=alert(2)>'
HOSTILE_URL = 'https://x.example/" onmouseover="alert(3)" x="'  # an http(s) URL: it becomes a link, quotes and all


class Page(HTMLParser):
    """What the tests read of a report: the item rows, the elements by tag and id, and the visible text."""

    def __init__(self, source: str):
        super().__init__()
        self.items: list[tuple[str, set[str]]] = []
        self.tags: dict[str, int] = {}
        self.ids: set[str] = set()
        self.radios: list[str] = []
        self.metric_names: list[str] = []
        self.attributes: list[tuple[str, str, str | None]] = []  # (tag, name, value) of every element
        self._texts: list[str] = []
        self._in: list[str] = []
        self.feed(source)
        self.close()
        self.text = "".join(self._texts)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self.attributes += [(tag, name, value) for name, value in attrs]
        classes = set((a.get("class") or "").split())
        if tag == "details" and "item" in classes:
            self.items.append((a["data-id"] or "", classes - {"item"}))
        if a.get("id"):
            self.ids.add(a["id"] or "")
        if tag == "input" and a.get("type") == "radio":
            self.radios.append(a["id"] or "")
        if tag in ("script", "style") or (tag == "div" and "metrics" in classes) or self._in:
            self._in.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if self._in and self._in[-1] == tag:
            self._in.pop()

    def handle_data(self, data: str) -> None:
        if not self._in or self._in[0] == "div":
            self._texts.append(data)
        if self._in and self._in[0] == "div" and self._in[-1] == "span":
            self.metric_names.append(data)

    def flagged(self, flag: str) -> set[str]:
        return {item_id for item_id, flags in self.items if flag in flags}


def report_of(run_dir: Path, pipeline: str) -> Page:
    """The report.html the driver wrote at the end of the run (``pipeline``: for the reader of a failure)."""
    page = run_dir / "report.html"
    assert page.exists(), f"the {pipeline} run wrote no report.html"
    return Page(page.read_text(encoding="utf-8"))


def results(run_dir: Path) -> list[dict]:
    return latest_records(run_dir / "records.jsonl")


def assert_page_shape(page: Page, run_dir: Path, extra_filters: Sequence[str] = ()) -> None:
    """One row per record, in order; the four filters (and the pipeline's own); the metrics, plots and run
    sections; one script, ours."""
    assert [item_id for item_id, _ in page.items] == [r["id"] for r in results(run_dir)]
    assert page.radios == ["f-all", "f-wrong", "f-abstained", "f-error", *(f"f-{f}" for f in extra_filters)]
    assert {"metrics", "plots", "run", "items", "search"} <= page.ids
    assert page.tags["script"] == 1


# --- each pipeline's run -----------------------------------------------------------------------------------------


class TwoAnswers(Engine):
    """R2VC's generator, scripted: a parsable answer whose rationale holds markup, then one that does not parse."""

    kind = "scripted"

    @property
    def model_id(self) -> str:
        return "two-answers"

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        good = json.dumps({"label": "SUPPORTS", "rationale": "<b>Passage 1</b> says so.", "evidence_ids": [1]})
        return [GenerationResult([Candidate(good, "stop", [-0.1]), Candidate("no JSON here", "length", [-2.0])])
                for _ in requests]


def test_r2vc_report_shows_each_claims_evidence_candidates_and_decision(
        tiny_verifier: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import veracity.infer.pipelines.r2vc.pipeline as r2vc
    from veracity.infer.pipelines.r2vc.run import main

    monkeypatch.setattr(r2vc, "make_engine", lambda config: TwoAnswers())
    hostile = {"id": HOSTILE_ID, "claim": "Owls <i>hunt</i> at night.", "label": "SUPPORTS",
               "evidence": [f"{PAYLOAD} Most owls hunt at night."]}
    claims = write_jsonl(tmp_path / "claims.jsonl", [*CLAIMS, hostile])
    out = tmp_path / "run"
    main(["--claims", str(claims), "--nli_model", str(tiny_verifier), "--n_candidates", "2", "--cache", "",
          "--output_dir", str(out), "--progress", "false"])
    page = report_of(out, "r2vc")
    assert_page_shape(page, out, ["abstained-right", "answered-wrong"])
    records = [r["result"] for r in results(out)]
    assert page.flagged("wrong") == {r["id"] for r in records if r["gold"] and r["prediction"] != r["gold"]}
    assert page.flagged("abstained") == {r["id"] for r in records if r["abstained"]}
    for r in records:  # every passage verbatim, every candidate, the decision
        assert all(p["text"] in page.text for p in r["passages"]) and r["claim"] in page.text
    assert "<b>Passage 1</b> says so." in page.text and "no JSON here" in page.text  # as text, not markup
    assert page.text.count("length: ") == len(records)  # each unparsed answer's parse error, named
    metrics = json.loads((out / "metrics.json").read_text())
    assert sorted(page.metric_names) == sorted(k for k, v in flatten(metrics) if not k.startswith("confusion."))
    assert PAYLOAD in page.text and page.tags["script"] == 1  # the passage's script is text; ours is the one
    assert "i" not in page.tags and "Owls <i>hunt</i> at night." in page.text  # the claim's markup is text
    assert (out / "reliability.png").exists() and page.tags["img"] == 2  # the two plots, inline, and no other


@pytest.fixture(scope="module")
def prepared_averitec(data_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from veracity.data_prep.prepare import PrepConfig, prepare

    prepared = tmp_path_factory.mktemp("prep_aic")
    prepare(PrepConfig(data_root=str(data_root), output_dir=str(prepared), datasets=["averitec"]))
    return prepared


def test_aic_report_shows_the_sources_qa_pairs_and_likert_scores(
        prepared_averitec: Path, tiny_encoder_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import veracity.models.engine_factory as engine_module
    from veracity.infer.pipelines.aic.run import main

    monkeypatch.setattr(engine_module, "make_engine", lambda config: AnswerAll())
    monkeypatch.setenv("VERACITY_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(REPO)
    out = tmp_path / "run"
    main(["--config", "configs/pipelines/aic_embedded.yaml", "--prepared_dir", str(prepared_averitec), "--embedder",
          str(tiny_encoder_dir), "--answer_prefix", "", "--cache", "", "--evaluate", "false", "--output_dir",
          str(out), "--progress", "false"])
    page = report_of(out, "aic")
    assert_page_shape(page, out)
    records = [r["result"] for r in results(out)]
    assert page.flagged("wrong") == {r["id"] for r in records if r["gold"] and r["label"] != r["gold"]}
    assert not page.flagged("abstained") and not page.flagged("error")
    for r in records:
        assert all(s["url"] in page.text for s in r["sources"])  # each source, with its URL
        assert r["answer"]["questions"][0]["answer"] in page.text  # the QA pairs
    assert page.text.count("Conflicting Evidence/Cherrypicking") >= len(records)  # each claim's Likert table
    assert "not scored" in page.text  # --evaluate false: no metrics, and the page says so


def test_sciclaim_report_marks_the_gold_paper_and_each_stages_rank(tiny_encoder_dir: Path, tmp_path: Path) -> None:
    from veracity.infer.pipelines.sciclaimseekers.run import main

    cross_encoder = build_tiny_cross_encoder(tmp_path / "ce", tiny_encoder_dir)
    posts, collection = write_posts_and_collection(tmp_path)
    out = tmp_path / "run"
    main(["--posts", str(posts), "--collection", str(collection), "--embedder", str(tiny_encoder_dir),
          "--max_length", "64", "--reranker", "cross_encoder", "--cross_encoder", str(cross_encoder),
          "--candidates", "4", "--fusion_depth", "4", "--top_k", "3", "--progress", "false", "--output_dir", str(out)])
    page = report_of(out, "sciclaim")
    assert_page_shape(page, out)
    records = [r["result"] for r in results(out)]
    first = {r["post_id"]: [d for d, _ in r["ranking"]][0] for r in records}
    assert page.flagged("wrong") == {p for p, top in first.items() if top not in results_gold(records, p)}
    assert page.text.count("✓ gold") == len(records)  # each post's gold paper, in its top 3 or below it
    assert {"mrr@5", "hit@1"} <= set(page.metric_names)
    assert "cross-encoder" in page.text and "RRF" in page.text


def results_gold(records: list[dict], post_id: str) -> list[str]:
    return next(r["gold"] for r in records if r["post_id"] == post_id)


class Judge(Engine):
    """UTS's judge, scripted: yes only for a statement about "the second anchor"."""

    kind = "scripted"

    @property
    def model_id(self) -> str:
        return "judge"

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        statements = [r.messages[-1]["content"].split("Statement: ", 1)[1].split("\n", 1)[0] for r in requests]
        return [GenerationResult([Candidate("Yes." if "second anchor" in s else "No.", "stop")]) for s in statements]


def test_uts_report_shows_the_article_each_cite_and_the_judges_verdicts(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import veracity.models.engine_factory as engine_module
    from veracity.infer.pipelines.uts.run import main

    monkeypatch.setattr(engine_module, "make_engine", lambda config: Judge())
    items = [*ITEMS[:3], {**ITEMS[3], "evidence": [{"url": "https://x.example.org/c", "text": f"{PAYLOAD} Yes."}]}]
    out = tmp_path / "run"
    main(["--items", str(write_jsonl(tmp_path / "items.jsonl", items)), "--shadowval", "true",
          "--selective_emission", "true", "--frame", "plain", "--cache", "", "--output_dir", str(out),
          "--progress", "false"])
    page = report_of(out, "uts")
    assert_page_shape(page, out)
    records = [r["result"] for r in results(out)]
    assert page.flagged("abstained") == {r["id"] for r in records if r["outcomes"].get("dropped")}
    assert page.flagged("abstained") and not page.flagged("wrong")  # dropped cites, no fallback
    for r in records:
        assert r["factchecking_article"] in page.text
        assert all(c["url"] in page.text for c in r["cites"])
    assert page.text.count("not supported") >= 4 and "supported (Yes.)" in page.text  # the judge's verdicts
    assert PAYLOAD in page.text and page.tags["script"] == 1


def test_the_report_command_reads_a_sharded_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m veracity.infer.report_html RUN_DIR`` on a run made as shards 0/2 and 1/2 (no records.jsonl, no
    metrics: shards are not scored): one row per item of both shards; a second layout in the folder is an error."""
    import veracity.models.engine_factory as engine_module
    from veracity.infer.pipelines.uts.run import main
    from veracity.infer.report_html import main as report_main

    monkeypatch.setattr(engine_module, "make_engine", lambda config: Judge())
    out = tmp_path / "run"
    argv = ["--items", str(write_jsonl(tmp_path / "items.jsonl", ITEMS)), "--shadowval", "true", "--frame", "plain",
            "--cache", "", "--output_dir", str(out), "--progress", "false"]
    for shard in ("0/2", "1/2"):
        main([*argv, "--shard", shard])
    assert not (out / "records.jsonl").exists() and not (out / "report.html").exists()
    capsys.readouterr()
    report_main([str(out)])
    assert capsys.readouterr().out.strip() == str(out / "report.html")
    text = (out / "report.html").read_text(encoding="utf-8")
    page = Page(text)
    assert sorted(item_id for item_id, _ in page.items) == sorted(item["id"] for item in ITEMS)
    assert "summary.shard-0-of-2.json" in text and "summary.shard-1-of-2.json" in text  # each shard's own summary
    (out / "records.shard-0-of-3.jsonl").write_text("")
    with pytest.raises(SystemExit, match="shards of 2 layouts"):
        report_main([str(out)])


# --- the page from hand-made records (no model) ------------------------------------------------------------------


def hostile_records() -> dict[str, dict]:
    """One record per pipeline with the payload in every text field a renderer shows."""
    return {
        "r2vc": {"id": HOSTILE_ID, "claim": PAYLOAD, "gold": "SUPPORTS", "prediction": PAYLOAD, "label": PAYLOAD,
                 "passages": [{"text": PAYLOAD, "title": PAYLOAD}], "nli": [[0.1, 0.2, 0.7]],
                 "candidates": [{"from": "generator", "text": PAYLOAD, "parse_error": PAYLOAD, "label": None}],
                 "outcome": PAYLOAD, "abstained": True, "abstain_reason": PAYLOAD, "confidence": 0.5,
                 "claim_signals": {PAYLOAD: PAYLOAD}, "chosen": None},
        "aic": {"id": HOSTILE_ID, "claim": PAYLOAD, "gold": "Refuted", "label": PAYLOAD, "status": "answered",
                "sources": [{"url": f"javascript:{PAYLOAD}", "text": PAYLOAD, "role": PAYLOAD},
                            {"url": HOSTILE_URL, "text": PAYLOAD, "role": PAYLOAD}],
                "attempts": [{"text": PAYLOAD, "error": PAYLOAD}],
                "answer": {"questions": [{"question": PAYLOAD, "answer": PAYLOAD, "source": 1}],
                           "likert": {PAYLOAD: 5}, "label_from": PAYLOAD, "notes": [PAYLOAD]}},
        "sciclaim": {"post_id": HOSTILE_ID, "text": PAYLOAD, "gold": [PAYLOAD], "bm25": [PAYLOAD], "dense": [],
                     "rrf": [[PAYLOAD, 0.1]], "ranking": [[PAYLOAD, 0.1]],
                     "llm_answers": [{"doc_id": PAYLOAD, "answer": PAYLOAD, "score": None, "error": PAYLOAD}]},
        "uts": {"id": HOSTILE_ID, "factchecking_article": PAYLOAD, "outcomes": {"fallback": 1},
                "cites": [{"url": HOSTILE_URL, "frame": PAYLOAD, "outcome": "fallback", "chosen": 0,
                           "sentence": PAYLOAD,
                           "tries": [{"candidate": 0, "supported": False, "answer": PAYLOAD}],
                           "candidates": [{"index": 0, "sentence": PAYLOAD}], "anchor_info": {"skipped": PAYLOAD}}]},
    }


@pytest.mark.parametrize("name", ["r2vc", "aic", "sciclaim", "uts", "generic"])
def test_every_text_of_a_record_is_escaped(name: str) -> None:
    from veracity.infer.report_html import pipeline_type

    record = hostile_records().get(name, hostile_records()["r2vc"])
    cls = pipeline_type(name)
    view = cls.report_item if cls else generic_item
    view(record)  # the pipeline's own view renders the record: a crash here is not hidden by the generic fallback
    html = render_report(name, [{"id": HOSTILE_ID, "status": "ok", "result": record}], {PAYLOAD: 1.0},
                         {"job": PAYLOAD, "config": {"output_dir": PAYLOAD}}, summary={PAYLOAD: PAYLOAD}, view=view)
    page = Page(html)
    assert page.tags["script"] == 1 and "img" not in page.tags  # only the page's own script; no injected element
    assert page.items == [(HOSTILE_ID, page.items[0][1])]  # the id survives its quotes as an attribute
    assert PAYLOAD in page.text and "<script>alert" not in html
    assert not [a for a in page.attributes if a[1].startswith("on")]  # no event handler slipped into a tag
    hrefs = [value for tag, attr, value in page.attributes if attr == "href"]
    assert all(h.startswith(("https://", "http://", "#")) for h in hrefs), hrefs  # javascript: is text, not a link
    if name in ("aic", "uts"):  # their views link the URLs: the hostile https one is one link, its quotes inside
        assert HOSTILE_URL in hrefs and f"javascript:{PAYLOAD}" not in hrefs


def test_error_records_long_texts_and_the_detail_limit() -> None:
    records = [{"id": f"r{k}", "status": "ok", "result": {"id": f"r{k}", "text": "x" * 5000, "gold": "A",
                                                          "prediction": "A" if k % 2 else "B"}} for k in range(5)]
    records.append({"id": "bad", "status": "error", "error": "ValueError: judge down", "gold": "A"})
    page = Page(render_report("generic", records, None, detail_limit=4))
    assert [i for i, _ in page.items] == ["r0", "r1", "r2", "r3", "r4", "bad"]
    assert page.flagged("wrong") == {"r0", "r2", "r4"} and page.flagged("error") == {"bad"}
    assert page.text.count("details left out") == 2  # 4 opened views: the 4 flagged items; r1 and r3 without
    assert "judge down" in page.text and "show more" in page.text and "not scored" in page.text


def test_metrics_nest_into_tables() -> None:
    metrics = {"accuracy": 0.5, "outcomes": {"answered": 3},
               "by_source": {s: {f"m{k}": 0.1 * k for k in range(8)} for s in ("fever", "vitaminc")},
               "confusion": {"A": {"A": 1, "B": 0}, "B": {"A": 2, "B": 3}}}
    page = Page(metrics_html(metrics))
    assert page.metric_names == ["accuracy", "outcomes.answered"]
    assert page.tags["table"] == 2 and "m7" in page.text and "fever" in page.text  # by_source: a metric per row


def test_a_renderer_that_fails_falls_back_to_json() -> None:
    def broken(result: dict) -> ReportItem:
        raise KeyError("passages")

    page = Page(render_report("r2vc", [{"id": "a", "status": "ok", "result": {"id": "a", "claim": "Cats purr."}}],
                              None, view=broken))
    assert page.items == [("a", set())] and '"claim": "Cats purr."' in page.text


def test_a_record_whose_result_is_not_a_mapping_is_shown_not_fatal() -> None:
    page = Page(render_report("r2vc", [{"id": "a", "status": "ok", "result": None},
                                       {"id": "b", "status": "ok", "result": ["odd", "<b>"]}], None))
    assert [i for i, _ in page.items] == ["a", "b"] and "<b>" in page.text  # as text


def test_a_screenshot_of_the_report_is_not_inlined_as_a_plot(tmp_path: Path) -> None:
    from veracity.infer.report_html import run_plots

    for name in ("risk_coverage.png", "report.png", "report_r2vc.png"):
        (tmp_path / name).write_bytes(b"\x89PNG")
    assert list(run_plots(tmp_path)) == ["risk_coverage.png"]
