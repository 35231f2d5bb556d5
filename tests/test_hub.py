"""Hub dataset names go through the same converters (a fake load_dataset stands in for the download)."""

from __future__ import annotations

from pathlib import Path

import pytest

from veracity.data_prep import hub
from veracity.data_prep.prepare import PrepConfig, prepare
from veracity.data_prep.readers import read_jsonl

HUB_ROWS = {
    "tals/vitaminc": [
        {"unique_id": "c1_1", "case_id": "c1", "claim": "A is B .", "evidence": "A is B .", "label": "SUPPORTS",
         "page": "A", "revision_type": "real"},
        {"unique_id": "c1_2", "case_id": "c1", "claim": "A is C .", "evidence": "A is B .", "label": "REFUTES",
         "page": "A", "revision_type": "real"},
    ],
    # One row per evidence pointer, as the hub's fever v1.0 gives it.
    "fever": [
        {"id": 7, "label": "SUPPORTS", "claim": "X is Y.", "evidence_annotation_id": 1, "evidence_id": 10,
         "evidence_wiki_url": "X", "evidence_sentence_id": 0},
        {"id": 7, "label": "SUPPORTS", "claim": "X is Y.", "evidence_annotation_id": 2, "evidence_id": 11,
         "evidence_wiki_url": "X", "evidence_sentence_id": 3},
        {"id": 8, "label": "NOT ENOUGH INFO", "claim": "Z.", "evidence_annotation_id": 3, "evidence_id": -1,
         "evidence_wiki_url": "", "evidence_sentence_id": -1},
    ],
}


@pytest.fixture()
def fake_hub(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    calls: list[tuple] = []

    def load(name: str, config: str | None, split: str) -> list[dict]:
        calls.append((name, config, split))
        return HUB_ROWS[name]

    monkeypatch.setattr(hub, "_load_dataset", load)
    return calls


def test_hub_vitaminc_and_fever(fake_hub: list[tuple], data_root: Path, tmp_path: Path) -> None:
    config = PrepConfig(data_root=str(data_root), output_dir=str(tmp_path), datasets=["watclaimcheck"],
                        hub=["tals/vitaminc:validation", "fever:labelled_dev"])
    manifest = prepare(config)
    assert fake_hub == [("tals/vitaminc", None, "validation"), ("fever", "v1.0", "labelled_dev")]
    vitc = [row for _, row in read_jsonl(tmp_path / "hub_tals_vitaminc_validation.jsonl")]
    assert [(r["id"], r["label"], r["group_id"], r["source_split"]) for r in vitc] == [
        ("vitc-c1_1", "SUPPORTS", "c1", "validation"), ("vitc-c1_2", "REFUTES", "c1", "validation")]
    assert vitc[0]["origin"] == "hf:tals/vitaminc/validation:1"
    fever = [row for _, row in read_jsonl(tmp_path / "hub_fever_labelled_dev.jsonl")]
    assert [(r["id"], r["evidence_sets"]) for r in fever] == [("fever-7", [["X:0"], ["X:3"]]), ("fever-8", [])]
    assert manifest["outputs"]["hub_fever_labelled_dev"]["records"] == 2


def test_hub_errors(fake_hub: list[tuple], data_root: Path) -> None:
    from veracity.data_prep.context import LoadContext

    ctx = LoadContext(data_root=data_root)
    with pytest.raises(ValueError, match="no converter"):
        hub.load_hub(ctx, "someone/else:train")
    with pytest.raises(ValueError, match="lacks a split"):
        hub.load_hub(ctx, "tals/vitaminc")


def _prep_fails(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    from veracity import cli

    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        cli.main(["prep", *argv])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    return err.removeprefix("error: ")


@pytest.mark.parametrize(("spec", "message"), [
    ("someone/else:train", "no converter for hub dataset 'someone/else'; known: "),
    ("tals/vitaminc", "hub spec 'tals/vitaminc' lacks a split (write tals/vitaminc:train)"),
])
def test_a_bad_hub_spec_exits_2_through_the_command(fake_hub: list[tuple], data_root: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str], spec: str,
                                                    message: str) -> None:
    out = tmp_path / "out"
    error = _prep_fails(["--data_root", str(data_root), "--output_dir", str(out), "--datasets", "watclaimcheck",
                         "--hub", spec], capsys)
    assert error.startswith(f"--hub {spec}: {message}"), error
    assert not out.exists(), "nothing may be written, not even run_config.yaml"
    assert fake_hub == []  # refused before any download


def test_a_failed_download_exits_2_naming_the_dataset(data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    def offline(name: str, config: str | None, split: str) -> list[dict]:
        raise ConnectionError(f"Couldn't reach '{name}' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(hub, "_load_dataset", offline)
    out = tmp_path / "out"
    error = _prep_fails(["--data_root", str(data_root), "--output_dir", str(out), "--datasets", "watclaimcheck",
                         "--hub", "tals/vitaminc:validation"], capsys)
    assert error.startswith("hf:tals/vitaminc[validation]: cannot load from the hub (ConnectionError: Couldn't reach")
    assert not out.exists()
