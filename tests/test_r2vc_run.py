"""`veracity infer r2vc` around the pipeline: which claims a run takes (the subset seed is not the sampling seed),
bad claims files and a missing calibrator (exit 2, one line, nothing written), and the risk-control certificate's
scope in the run record, metrics.json and report.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from veracity.infer.pipelines.r2vc.config import R2VCConfig

CERTIFIED_SOURCES = ["fever_symmetric", "vitaminc", "sufficient_facts_vitaminc"]  # the calibrator recipe's


# --- item 5: the sampling seed does not choose the claims ------------------------------------------------------


def _subset(prepared_dir: Path, **config: object) -> list[str]:
    from veracity.infer.pipelines.r2vc.items import prepared_items

    settings = R2VCConfig(prepared_dir=str(prepared_dir), sources=["vitaminc"], max_examples=3, **config)
    return [item["id"] for item in prepared_items(settings)]


def test_changing_the_sampling_seed_keeps_the_same_claims(prepared_dir: Path) -> None:
    subset = _subset(prepared_dir)
    assert len(subset) == 3  # 3 of the 7 VitaminC claims
    for seed in (0, 1, 7, 12345):
        assert _subset(prepared_dir, seed=seed) == subset, "a new sampling seed must evaluate the same claims"
    # the subset has its own seed, and it does move the subset
    assert len({tuple(_subset(prepared_dir, subset_seed=s)) for s in range(6)}) > 1
    assert _subset(prepared_dir, subset_seed=5, seed=1) == _subset(prepared_dir, subset_seed=5, seed=2)


def test_the_two_seeds_have_help_text() -> None:
    import dataclasses

    helps = {f.name: f.metadata.get("help", "") for f in dataclasses.fields(R2VCConfig)}
    assert "sampling" in helps["seed"].lower() and "max_examples" in helps["subset_seed"]


# --- item 13: bad claims files and a missing calibrator, through the command -------------------------------------


def _fails(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    from veracity import cli

    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    return err.removeprefix("error: ")


def _claims(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_a_repeated_claim_id_exits_2_naming_file_and_line(tmp_path: Path, capsys) -> None:
    claims = _claims(tmp_path / "claims.jsonl", [
        {"id": "a", "claim": "Cats purr.", "evidence": "Cats purr."},
        {"id": "b", "claim": "Dogs bark.", "evidence": "Dogs bark."},
        {"id": "a", "claim": "Cows moo.", "evidence": "Cows moo."}])
    out = tmp_path / "out"
    error = _fails(["infer", "r2vc", "--claims", str(claims), "--use_generator", "false", "--output_dir", str(out)],
                   capsys)
    assert error == f"{claims}:3: field 'id': duplicate id 'a' (first on line 1)"
    assert not out.exists(), "nothing may be written, not even run_config.yaml"


@pytest.mark.parametrize("content", ["", "\n\n"])
def test_an_empty_claims_file_exits_2_and_writes_no_metrics(tmp_path: Path, capsys, content: str) -> None:
    claims = tmp_path / "claims.jsonl"
    claims.write_text(content)
    out = tmp_path / "out"
    error = _fails(["infer", "r2vc", "--claims", str(claims), "--use_generator", "false", "--output_dir", str(out)],
                   capsys)
    assert error.startswith(f"{claims}: no claims: the file is empty")
    assert not out.exists()


def test_a_recipe_whose_calibrator_is_missing_exits_2_naming_it(tmp_path: Path, capsys) -> None:
    claims = _claims(tmp_path / "claims.jsonl", [{"id": "a", "claim": "Cats purr.", "evidence": "Cats purr."}])
    missing = tmp_path / "never_trained" / "calibrator.json"  # a machine that has not run `train calibrator`
    out = tmp_path / "out"
    error = _fails(["infer", "r2vc", "--config", "configs/pipelines/r2vc_nli_only.yaml", "--claims", str(claims),
                    "--calibrator", str(missing), "--output_dir", str(out)], capsys)
    assert error == (f"{missing}: no calibrator file here: `veracity train calibrator --calibrator_dir "
                     f"{missing.parent}` with this run's generator and verifier makes it "
                     "(docs/training.md#calibrator); --calibrator none ranks by s_ver instead")  # no recipe there
    assert not out.exists()
    missing.parent.mkdir()
    missing.write_text("{not json")
    assert _fails(["infer", "r2vc", "--config", "configs/pipelines/r2vc_nli_only.yaml", "--claims", str(claims),
                   "--calibrator", str(missing), "--output_dir", str(out)], capsys).startswith(
        f"{missing}: not a calibrator file")
    assert not out.exists()


def test_risk_control_with_a_calibrator_without_certify_scores_exits_2(tmp_path: Path, capsys) -> None:
    from veracity.models.calibrator import LogisticCalibrator

    claims = _claims(tmp_path / "claims.jsonl", [{"id": "a", "claim": "Cats purr.", "evidence": "Cats purr."}])
    calibrator = LogisticCalibrator(["s_ver"], [1.0], 0.0).save(tmp_path / "calibrator.json")
    out = tmp_path / "out"
    error = _fails(["infer", "r2vc", "--config", "configs/pipelines/r2vc_risk_control.yaml", "--claims", str(claims),
                    "--calibrator", str(calibrator), "--model", "embedded", "--output_dir", str(out)], capsys)
    assert error.startswith(f"{calibrator}: abstention risk_control: the calibrator keeps no certify-part")
    assert not out.exists()


def test_a_source_listed_twice_is_a_usage_error(tmp_path: Path, capsys) -> None:
    from veracity import cli

    with pytest.raises(SystemExit) as info:
        cli.main(["infer", "r2vc", "--sources", "vitaminc", "vitaminc", "--output_dir", str(tmp_path / "o")])
    assert info.value.code == 2 and "sources lists ['vitaminc'] more than once" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


# --- item 8: the certificate names what it was computed on ------------------------------------------------------


def _calibrator(path: Path, certify_sources: list[str] | None) -> Path:
    from veracity.models.calibrator import LogisticCalibrator

    risk_control = {"holdout_confidence": [0.9] * 40 + [0.4] * 40, "holdout_correct": [True] * 40 + [False] * 40,
                    "n_certify": 80, "certify_split": "calib"}
    if certify_sources is not None:
        risk_control["certify_sources"] = certify_sources
    return LogisticCalibrator(["s_ver"], [4.0], -2.0, risk_control=risk_control).save(path)


def test_risk_control_on_other_sources_says_the_guarantee_assumes_exchangeability(
        prepared_dir: Path, tiny_verifier: Path, tmp_path: Path) -> None:
    from veracity import cli

    calibrator = _calibrator(tmp_path / "calibrator.json", CERTIFIED_SOURCES)
    out = tmp_path / "run"
    assert cli.main(["infer", "r2vc", "--config", "configs/pipelines/r2vc_risk_control.yaml", "--prepared_dir",
                     str(prepared_dir), "--use_generator", "false", "--nli_model", str(tiny_verifier),
                     "--calibrator", str(calibrator), "--max_examples", "2", "--output_dir", str(out),
                     "--progress", "false"]) == 0
    evaluated = ["fever_symmetric", "vitaminc"]  # what r2vc_risk_control.yaml evaluates
    scope = json.loads((out / "metrics.json").read_text())["risk_control_guarantee"]
    assert scope["certified_on"] == {"sources": CERTIFIED_SOURCES, "split": "calib", "claims": 80}
    assert scope["evaluated_on"] == {"sources": evaluated, "split": "dev"}
    assert scope["same_sources"] is False and scope["assumes"] == "exchangeability"
    for text in (scope["note"], (out / "report.md").read_text()):
        assert "exchangeable" in text and str(CERTIFIED_SOURCES) in text and str(evaluated) in text
    record = yaml.safe_load((out / "run_config.yaml").read_text())
    assert record["config"][-1] == {"risk_control_guarantee": scope}


def test_risk_control_scope_on_the_same_sources_and_for_an_older_calibrator(tmp_path: Path) -> None:
    from veracity.infer.pipelines.r2vc.items import risk_control_scope
    from veracity.models.calibrator import LogisticCalibrator

    config = R2VCConfig(abstention="risk_control", calibrator="c.json", sources=list(CERTIFIED_SOURCES))
    same = risk_control_scope(config, LogisticCalibrator.load(_calibrator(tmp_path / "a.json", CERTIFIED_SOURCES)))
    assert same["same_sources"] is True and "same sources" in same["note"]
    old = risk_control_scope(config, LogisticCalibrator.load(_calibrator(tmp_path / "b.json", None)))
    assert old["same_sources"] is False and "not recorded" in old["note"] and "exchangeable" in old["note"]
    assert risk_control_scope(R2VCConfig(calibrator="c.json"), LogisticCalibrator(["s_ver"], [1.0], 0.0)) is None


def test_the_retrieval_index_of_a_prepared_corpus_is_built_in_prepare_before_any_batch(
        prepared_dir: Path, tiny_verifier: Path, tmp_path: Path) -> None:
    """With --executor ray every actor would otherwise build the same index folder at once, over each other's files:
    the driver's prepare builds it, and the batches only load it."""
    from veracity.config import parse_config
    from veracity.infer.pipelines.r2vc.pipeline import R2VC
    from veracity.infer.pipelines.r2vc.run import make_parser

    *configs, _ = parse_config(make_parser(), [
        "--prepared_dir", str(prepared_dir), "--sources", "fever_paper_dev", "--use_generator", "false",
        "--nli_model", str(tiny_verifier), "--calibrator", "none", "--index_root", str(tmp_path / "index"),
        "--max_examples", "2", "--output_dir", str(tmp_path / "run")])
    pipeline = R2VC(*configs)
    assert any(item["retrieve_from"] == "fever_wiki_paragraphs" for item in pipeline.items())
    pipeline.load(tmp_path)
    try:
        assert not (tmp_path / "index").exists()
        pipeline.prepare(tmp_path)
        assert (tmp_path / "index" / "fever_wiki_paragraphs" / "index_meta.json").is_file()
    finally:
        pipeline.close()


# --- issue 44, item 7: a calibrator fit on constrained log-probs refuses free ones -------------------------------

FACTS = [("The bridge is {} metres long.", "SUPPORTS"), ("The river is {} km wide.", "REFUTES"),
         ("The tower has {} floors.", "NOT ENOUGH INFO")]


def test_a_calibrator_fit_with_logprobs_names_its_decoding_and_refuses_another(
        tiny_lm_dir: Path, tiny_verifier: Path, tmp_path: Path, capsys) -> None:
    """``train calibrator`` on a tiny generator (no response cache: the engine's own ``decoding()`` is recorded)
    fits the mean_logprob feature under a definition that says "constrained"; ``infer r2vc --constrained false``
    with it is refused before anything is written, ``--constrained true`` runs."""
    from veracity import cli
    from veracity.models.engine import LOGPROB_DEFINITION

    claims = _claims(tmp_path / "claims.jsonl", [
        {"id": f"c{k}", "claim": text.format(k + 10), "evidence": [text.format(k + 10 + (k % 3 == 1))],
         "label": label} for k in range(12) for text, label in [FACTS[k % 3]]])
    models = ["--model", str(tiny_lm_dir), "--nli_model", str(tiny_verifier), "--n_candidates", "2",
              "--rationale_max_chars", "12", "--progress", "false"]
    calibrator_dir = tmp_path / "calibrator"
    cli.main(["train", "calibrator", "--claims", str(claims), *models, "--calibrator_dir", str(calibrator_dir)])
    fitted = json.loads((calibrator_dir / "calibrator.json").read_text())
    assert "mean_logprob" in fitted["feature_names"]
    assert fitted["logprob_definition"] == f"{LOGPROB_DEFINITION}, constrained"
    simulation = yaml.safe_load((calibrator_dir / "simulation" / "run_config.yaml").read_text())
    engine = f"transformers:{tiny_lm_dir}"
    assert simulation["decoding"]["engine"].startswith(engine)  # each record's facts: all the same, so these
    assert simulation["decoding"] == {"constrained": True, "logprob_definition": LOGPROB_DEFINITION,
                                      "engine": simulation["decoding"]["engine"]}

    calibrator = str(calibrator_dir / "calibrator.json")
    out = tmp_path / "free"
    error = _fails(["infer", "r2vc", "--claims", str(claims), *models, "--calibrator", calibrator,
                    "--constrained", "false", "--output_dir", str(out)], capsys)
    assert error.startswith(f"{calibrator}: the calibrator was fit on log-probabilities defined as "
                            f"'{LOGPROB_DEFINITION}, constrained', but engine transformers:")
    assert f"gives '{LOGPROB_DEFINITION}, free'" in error and not out.exists()
    two = _claims(tmp_path / "two.jsonl", [json.loads(line) for line in claims.read_text().splitlines()[:2]])
    assert cli.main(["infer", "r2vc", "--claims", str(two), *models, "--calibrator", calibrator,
                     "--output_dir", str(tmp_path / "constrained")]) == 0
    decoding = yaml.safe_load((tmp_path / "constrained" / "run_config.yaml").read_text())["decoding"]
    assert decoding == {**simulation["decoding"], "constrained": True}
