"""The Python API (``veracity.load_pipeline``, ``veracity.eval``): for each pipeline, a short example as a user
writes it, on tiny models; its records are the records the CLI writes for the same items (timings aside), and the
models are loaded once for every call."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pipeline_inputs import CLAIMS, ITEMS, POSTS, AnswerAll, build_tiny_cross_encoder, write_jsonl
from pipeline_inputs import write_posts_and_collection as write_posts

from veracity import cli, load_pipeline

REPO = Path(__file__).resolve().parents[1]


def timeless(record: dict) -> dict:
    """A record without what a clock decides (the batch record's and AIC's per-stage seconds)."""
    record = {k: v for k, v in record.items() if k != "seconds"}
    if isinstance(record.get("result"), dict):
        record["result"] = {k: v for k, v in record["result"].items() if k != "seconds"}
    return record


def cli_records(out: Path) -> list[dict]:
    return [timeless(json.loads(line)) for line in (out / "records.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # the examples name the shipped recipes as docs/api.md does


def test_import_stays_light() -> None:
    code = "import sys, veracity; print(sorted(m for m in sys.modules if m in ('torch', 'transformers', 'numpy')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_r2vc_example_returns_the_cli_records(tiny_lm_dir: Path, tiny_verifier: Path, tmp_path: Path) -> None:
    from veracity import eval as scores

    models = {"model": str(tiny_lm_dir), "nli_model": str(tiny_verifier), "calibrator": None, "cache": ""}
    # --- the example ---
    with load_pipeline("configs/pipelines/r2vc_embedded.yaml", **models) as p:
        records = p.run(CLAIMS)
        again = p.run(CLAIMS[:1])  # the same loaded models, a second call
    print(records[0]["result"]["prediction"], scores.r2vc(records)["accuracy"])
    # --- the same claims through the CLI ---
    out = tmp_path / "cli"
    claims = write_jsonl(tmp_path / "claims.jsonl", CLAIMS)
    assert cli.main(["infer", "r2vc", "--config", "configs/pipelines/r2vc_embedded.yaml", "--claims", str(claims),
                     "--model", str(tiny_lm_dir), "--nli_model", str(tiny_verifier), "--calibrator", "none",
                     "--cache", "", "--output_dir", str(out), "--progress", "false"]) == 0
    assert [timeless(r) for r in records] == cli_records(out)
    assert timeless(again[0]) == timeless(records[0])
    assert scores.r2vc(records) == json.loads((out / "metrics.json").read_text())
    assert p.closed and not Path(p.config.output_dir).exists()  # no run directory: the scratch folder is gone


def test_a_bad_row_is_a_data_error_naming_it(tiny_verifier: Path) -> None:
    from veracity.data_prep.errors import DataError

    with load_pipeline(pipeline="r2vc", use_generator=False, nli_model=str(tiny_verifier), calibrator=None) as p:
        with pytest.raises(DataError, match=r"rows:2: field 'claim': missing or empty claim"):
            p.run([CLAIMS[0], {"id": "x", "claim": ""}])
        with pytest.raises(DataError, match=r"rows:2: field 'id': duplicate id 'c1'"):
            p.run([CLAIMS[0], CLAIMS[0]])
    with pytest.raises(ValueError, match="unknown option"):
        load_pipeline(pipeline="r2vc", no_such_option=1)


def test_r2vc_run_dir_writes_what_the_cli_writes_and_resumes(tiny_verifier: Path, tmp_path: Path) -> None:
    with load_pipeline(pipeline="r2vc", use_generator=False, nli_model=str(tiny_verifier), calibrator=None) as p:
        first = p.run(CLAIMS[:2], run_dir=tmp_path / "run")
        both = p.run(CLAIMS[:3], run_dir=tmp_path / "run")  # the first two are not run again
    assert [r["id"] for r in both] == ["c1", "c2", "c3"] and both[:2] == first
    assert len((tmp_path / "run" / "records.jsonl").read_text().splitlines()) == 3
    assert "job: infer r2vc" in (tmp_path / "run" / "run_config.yaml").read_text()


def test_aic_example_returns_the_cli_records(data_root: Path, tiny_encoder_dir: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import veracity.models.engine_factory as engine_module
    from veracity.data_prep.prepare import PrepConfig, prepare

    monkeypatch.setattr(engine_module, "make_engine", lambda config: AnswerAll())  # the generator, scripted
    prepared = tmp_path / "prep"
    prepare(PrepConfig(data_root=str(data_root), output_dir=str(prepared), datasets=["averitec"]))
    settings = {"prepared_dir": str(prepared), "embedder": str(tiny_encoder_dir), "answer_prefix": "", "cache": ""}
    out = tmp_path / "cli"
    assert cli.main(["infer", "aic", "--config", "configs/pipelines/aic_embedded.yaml", "--evaluate", "false",
                     *[a for k, v in settings.items() for a in (f"--{k}", v)], "--output_dir", str(out),
                     "--progress", "false"]) == 0
    expected = cli_records(out)
    rows = [{"id": r["id"], "claim": r["result"]["claim"], "gold": r["result"]["gold"],
             "record_id": r["result"]["record_id"]} for r in expected]
    # --- the example: claims by their id in the (proxy) knowledge store ---
    with load_pipeline("configs/pipelines/aic_embedded.yaml", **settings) as p:
        records = p.run(rows)
    print(records[0]["result"]["label"], records[0]["result"]["answer"]["questions"][0])
    assert [timeless(r) for r in records] == expected


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory, tiny_encoder_dir: Path) -> Path:
    return build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny_ce"), tiny_encoder_dir)


def test_sciclaim_example_returns_the_cli_records(tiny_encoder_dir: Path, tiny_cross_encoder: Path,
                                                  tmp_path: Path) -> None:
    from veracity import eval as scores

    posts, collection = write_posts(tmp_path)
    settings = {"collection": str(collection), "embedder": str(tiny_encoder_dir), "cross_encoder":
                str(tiny_cross_encoder), "max_length": 64, "candidates": 4, "fusion_depth": 4, "top_k": 4}
    # --- the example ---
    with load_pipeline("configs/pipelines/sciclaimseekers_embedded.yaml", **settings) as p:
        records = p.run([{"id": post, "text": text, "gold": [gold]} for post, text, gold in POSTS])
    print([d for d, _ in records[0]["result"]["ranking"]], scores.sciclaim(records))
    out = tmp_path / "cli"
    assert cli.main(["infer", "sciclaim", "--config", "configs/pipelines/sciclaimseekers_embedded.yaml", "--posts",
                     str(posts), *[a for k, v in settings.items() for a in (f"--{k}", str(v))],
                     "--output_dir", str(out), "--progress", "false"]) == 0
    assert [timeless(r) for r in records] == cli_records(out)
    assert scores.sciclaim(records) == json.loads((out / "metrics.json").read_text())


def test_uts_example_returns_the_cli_records(tiny_lm_dir: Path, tmp_path: Path) -> None:
    # --- the example: ShadowVal with the (tiny) LLM judge of the recipe ---
    with load_pipeline("configs/pipelines/uts_embedded.yaml", model=str(tiny_lm_dir), cache="") as p:
        records = p.run(ITEMS)
    print(records[0]["result"]["factchecking_article"])
    out = tmp_path / "cli"
    items = write_jsonl(tmp_path / "items.jsonl", ITEMS)
    assert cli.main(["infer", "uts", "--config", "configs/pipelines/uts_embedded.yaml", "--items", str(items),
                     "--model", str(tiny_lm_dir), "--cache", "", "--output_dir", str(out), "--progress", "false"]) == 0
    assert [timeless(r) for r in records] == cli_records(out)
    assert all(c["tries"] for r in records for c in r["result"]["cites"])  # the judge was asked
