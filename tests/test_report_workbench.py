"""report.html as an error analyst's workbench, through a real R2VC run (``veracity infer r2vc``'s ``main``) on
tiny models: the header (date, commit, data, models by id with the pre-built verifier named, engine and decoding,
device), the metric definitions, the labelled confusion matrix, the "abstained, label right" and "answered,
wrong" filters, the label each claim would have had without abstention, FEVER's tokens as text, whole ids, and
the prompt behind the generator candidates."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml
from pipeline_inputs import CLAIMS, write_jsonl
from test_report_html import Page, assert_page_shape, results

from veracity.models.engine import Candidate, Engine, GenerationRequest, GenerationResult
from veracity.models.registry import VERIFIER_FOLDER

LONG_PREFIX = "fever_symmetric:dev:" + "0" * 40  # ids that differ only at their end
FEVER_CLAIMS = [
    {"id": f"{LONG_PREFIX}1", "claim": "Star Wars -COLON- Episode IV -LRB- film -RRB- was released in 1977.",
     "evidence": [{"title": "Star_Wars_-LRB-film-RRB-", "text": "The film -LSB- 1 -RSB- opened in May 1977 ."}],
     "label": "SUPPORTS"},
    {"id": f"{LONG_PREFIX}2", "claim": "Paris is in Spain.", "evidence": ["Paris -LRB- French -RRB- is in France."],
     "label": "REFUTES"},
]
FILTERS = ["abstained-right", "answered-wrong"]


class AlwaysSupports(Engine):
    """R2VC's generator, scripted: every claim SUPPORTS, citing passage 1."""

    kind = "scripted"

    @property
    def model_id(self) -> str:
        return "always-supports"

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        answer = json.dumps({"label": "SUPPORTS", "rationale": "Passage 1 says so.", "evidence_ids": [1]})
        return [GenerationResult([Candidate(answer, "stop", [-0.1])]) for _ in requests]


@pytest.fixture(scope="module")
def models_root(tmp_path_factory: pytest.TempPathFactory, tiny_encoder_dir: Path) -> Path:
    """A models root holding the (tiny) pre-built verifier, as ../shared/models holds the embedded one."""
    from tiny_models import build_tiny_nli

    root = tmp_path_factory.mktemp("models_root")
    built = build_tiny_nli(tmp_path_factory.mktemp("tiny_verifier"), tiny_encoder_dir,
                           {0: "entailment", 1: "neutral", 2: "contradiction"}, veracity_evidence_titles=False)
    shutil.copytree(built, root / VERIFIER_FOLDER)
    return root


def run_r2vc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, models_root: Path, *extra: str) -> tuple[Path, Page]:
    """An R2VC run over the test claims and the FEVER-tokenised ones, with ``--nli_model embedded`` found only in
    the models root (the cache is empty): the pre-built fallback."""
    import veracity.infer.pipelines.r2vc.pipeline as r2vc
    from veracity.infer.pipelines.r2vc.run import main

    monkeypatch.setattr(r2vc, "make_engine", lambda config: AlwaysSupports())
    monkeypatch.setenv("VERACITY_MODELS_ROOT", str(models_root))
    monkeypatch.setenv("VERACITY_CACHE", str(tmp_path / "empty_cache"))
    claims = write_jsonl(tmp_path / "claims.jsonl", [*CLAIMS, *FEVER_CLAIMS])
    out = tmp_path / "run"
    main(["--claims", str(claims), "--nli_model", "embedded", "--n_candidates", "1", "--cache", "",
          "--device", "cpu", "--output_dir", str(out), "--progress", "false", *extra])
    page = Page((out / "report.html").read_text(encoding="utf-8"))
    assert_page_shape(page, out, FILTERS)
    return out, page


def header(html: str) -> dict[str, str]:
    """The header table's rows: name → text (tags stripped)."""
    table = re.search(r'<table class="kv header">(.*?)</table>', html, re.S)
    assert table, "no header"
    rows = re.findall(r"<tr><th>(.*?)</th><td>(.*?)</td></tr>", table.group(1), re.S)
    return {name: re.sub(r"<[^>]+>", "", value) for name, value in rows}


def test_the_header_says_when_on_what_and_with_which_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            models_root: Path) -> None:
    out, page = run_r2vc(tmp_path, monkeypatch, models_root, "--api_key", "sk-NOT-FOR-THE-PAGE")
    html = (out / "report.html").read_text(encoding="utf-8")
    record = yaml.safe_load((out / "run_config.yaml").read_text())
    rows = header(html)
    assert list(rows)[:3] == ["date", "commit", "job"]
    assert rows["date"] == record["started"] and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", rows["date"])
    assert rows["commit"] == record["git_revision"] and rows["commit"]
    assert rows["data"] == f"source: claims {tmp_path / 'claims.jsonl'} · split: – · slice: every item"
    assert rows["generator"] == record["models"]["generator"] and "always-supports" in rows["generator"]
    assert rows["verifier"].startswith(record["models"]["verifier"] + " — the pre-built embedded verifier")
    assert rows["calibrator"] == "none"
    decoding = record["decoding"]
    assert rows["engine and decoding"].startswith("engine transformers")
    assert ("unconstrained decoding" if decoding["constrained"] is False else "constrained decoding") in \
        rows["engine and decoding"]
    assert rows["device"] == record["device"] == "cpu"
    assert "sk-NOT-FOR-THE-PAGE" not in html and "&lt;redacted&gt;" in html  # the key only ever redacted


def test_metric_names_carry_their_definitions_and_the_confusion_matrix_its_axes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, models_root: Path) -> None:
    out, page = run_r2vc(tmp_path, monkeypatch, models_root)
    html = (out / "report.html").read_text(encoding="utf-8")
    for name in ("accuracy", "macro_f1", "coverage", "selective_risk", "aurc", "ece", "brier"):
        assert re.search(rf'<span title="[^"]+">{name}</span>', html), name  # the tooltip on the name
        assert f"<dt>{name}</dt>" in html  # and the glossary entry
    assert "expected calibration error" in page.text and "area under the risk–coverage curve" in page.text
    confusion = re.search(r'<table class="confusion">(.*?)</table>', html, re.S).group(1)
    assert "predicted →" in confusion and "gold ↓" in confusion
    predicted = re.findall(r"<th>([^<]+)</th>", confusion.split("</tr>")[1])  # the second header row
    metrics = json.loads((out / "metrics.json").read_text())
    assert sorted(predicted) == sorted(next(iter(metrics["confusion"].values())))
    for gold, row in metrics["confusion"].items():  # each gold row's counts under their predicted labels
        cells = re.search(rf"<th>{gold}</th>((?:<td[^>]*>\d+</td>)+)", confusion).group(1)
        assert dict(zip(predicted, (int(n) for n in re.findall(r">(\d+)<", cells)), strict=True)) == row


def test_filters_would_be_labels_fever_text_full_ids_and_the_prompt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    models_root: Path) -> None:
    out, page = run_r2vc(tmp_path, monkeypatch, models_root)  # the tiny verifier: every claim abstains
    html = (out / "report.html").read_text(encoding="utf-8")
    records = [r["result"] for r in results(out)]
    assert all(r["abstained"] for r in records) and all(r["label"] == "SUPPORTS" for r in records)
    right = {r["id"] for r in records if r["gold"] == "SUPPORTS"}
    assert page.flagged("abstained-right") == right and right and not page.flagged("answered-wrong")
    assert 'label for="f-abstained-right"' in html and f"abstained, label right ({len(right)})" in page.text
    # the label without abstention: a column of each row, and in the decision
    columns = re.findall(r'<button type="button" data-k="\d+">(.*?)</button>', html)
    for r in records:
        row = re.search(rf'data-id="{re.escape(r["id"])}"><summary class="grid">(.*?)</summary>', html, re.S)
        cells = re.findall(r"<span[^>]*>(.*?)</span>", row.group(1))
        assert cells[columns.index("without abstention")] == "SUPPORTS"
        assert cells[columns.index("prediction")] == "NOT ENOUGH INFO"
    assert page.text.count("label without abstention") == len(records)
    # FEVER's tokens as text in the claim, the passage and its title; the record keeps them
    assert "Star Wars: Episode IV (film) was released in 1977." in page.text
    assert "The film [1] opened in May 1977 ." in page.text and "Star_Wars_(film)" in page.text
    assert "Paris (French) is in France." in page.text
    shown = page.text.replace(FEVER_CLAIMS[0]["claim"], "")  # the prompt shows what the model read: tokens
    assert "-LRB-" not in shown.split("prompt of the generator")[0]
    assert records[-2]["claim"] == FEVER_CLAIMS[0]["claim"]
    # whole ids: each row's id cell holds the whole id and wraps instead of being cut
    for claim in FEVER_CLAIMS:
        assert f'<span class="id" title="{claim["id"]}">{claim["id"]}</span>' in html
    assert "span.id { white-space: normal; overflow-wrap: anywhere; }" in html
    # the prompt behind the candidates, once per claim, with the passages as the generator got them
    assert page.text.count("prompt of the generator candidates") == len(records)
    assert "<passage id=1>" in page.text and "The film -LSB- 1 -RSB- opened" in page.text


def test_an_answering_run_flags_answered_wrong(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               models_root: Path) -> None:
    out, page = run_r2vc(tmp_path, monkeypatch, models_root, "--abstention", "none")
    records = [r["result"] for r in results(out)]
    assert not any(r["abstained"] for r in records)
    wrong = {r["id"] for r in records if r["gold"] and r["prediction"] != r["gold"]}
    assert page.flagged("answered-wrong") == wrong and wrong and not page.flagged("abstained-right")
