"""The one driver behind the four pipelines (infer/pipelines/driver.py): a run killed mid-way resumes and records
every item exactly once, ``--shard i/n`` splits the items, ``--retry_errors`` re-runs the failed ones, and a
resume under other settings is refused — the same for R2VC, AIC, SciClaimSeekers and UTS."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from pipeline_inputs import (
    CLAIMS,
    ITEMS,
    POSTS,
    AnswerAll,
    build_tiny_cross_encoder,
    write_jsonl,
    write_posts_and_collection,
)

from veracity.data_prep.checkthat_files import read_submission
from veracity.infer.pipelines.aic.pipeline import AIC
from veracity.infer.pipelines.r2vc.pipeline import R2VC
from veracity.infer.pipelines.sciclaimseekers.pipeline import SciClaim
from veracity.infer.pipelines.uts.pipeline import UTS

REPO = Path(__file__).resolve().parents[1]


class Killed(BaseException):
    """A stand-in for a kill mid-run: not an Exception, so the batch runner's per-item isolation lets it through."""


def kill_after(monkeypatch: pytest.MonkeyPatch, cls: type, n: int) -> list[str]:
    """Make ``cls``'s batch call die once ``n`` items have been processed; returns the ids processed."""
    original = cls.__call__
    done: list[str] = []

    def call(self, items):  # noqa: ANN001, ANN202 - the pipeline's own signature
        if len(done) >= n:
            raise Killed(f"killed after {n} items")
        done.extend(str(item["id"]) for item in items)
        return original(self, items)

    monkeypatch.setattr(cls, "__call__", call)
    return done


def recorded_ids(path: Path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text(encoding="utf-8").splitlines()]


def kill_then_resume(monkeypatch: pytest.MonkeyPatch, cls: type, main, argv: list[str], n: int,  # noqa: ANN001
                     out: Path) -> dict:
    """Run, die after ``n`` items, check what was kept, resume; returns the resumed run's report."""
    with monkeypatch.context() as patch:
        kill_after(patch, cls, n)
        with pytest.raises(Killed):
            main(argv)
    kept = recorded_ids(out / "records.jsonl")
    assert len(kept) == n and len(set(kept)) == n  # what the killed run finished is on disk, once
    assert not (out / "records.jsonl.lock").exists()  # the lock died with it
    return main(argv)


def assert_each_once(path: Path, ids: list[str]) -> None:
    counts = Counter(recorded_ids(path))
    assert sorted(counts) == sorted(ids) and set(counts.values()) == {1}, counts


# --- R2VC --------------------------------------------------------------------------------------------------------


def test_r2vc_killed_mid_run_resumes_each_claim_once(tiny_verifier: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from veracity.infer.pipelines.r2vc.run import main

    claims = write_jsonl(tmp_path / "claims.jsonl", CLAIMS)
    out = tmp_path / "run"
    argv = ["--claims", str(claims), "--use_generator", "false", "--nli_model", str(tiny_verifier),
            "--claims_per_call", "1", "--output_dir", str(out), "--progress", "false"]
    report = kill_then_resume(monkeypatch, R2VC, main, argv, 2, out)
    assert (report["already_done"], report["processed"], report["total_in_shard"]) == (2, 3, 5)
    assert_each_once(out / "records.jsonl", [c["id"] for c in CLAIMS])
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["n"] == 4 and metrics["n_unlabelled"] == 1  # c4 has no label
    assert [json.loads(line)["id"] for line in (out / "predictions.jsonl").read_text().splitlines()] == [
        c["id"] for c in CLAIMS]
    uninterrupted = tmp_path / "whole"
    main([*argv[:-4], "--output_dir", str(uninterrupted), "--progress", "false"])
    assert json.loads((uninterrupted / "metrics.json").read_text()) == metrics


# --- AIC ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def prepared_averitec(data_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from veracity.data_prep.prepare import PrepConfig, prepare

    prepared = tmp_path_factory.mktemp("prep_aic")
    prepare(PrepConfig(data_root=str(data_root), output_dir=str(prepared), datasets=["averitec"]))
    return prepared


@pytest.fixture()
def scripted_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``veracity infer aic`` with the generator replaced by :class:`AnswerAll` (everything else real)."""
    import veracity.models.engine_factory as engine_module

    monkeypatch.setattr(engine_module, "make_engine", lambda config: AnswerAll())
    monkeypatch.setenv("VERACITY_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(REPO)


def aic_argv(prepared: Path, encoder: Path, out: Path, *extra: str) -> list[str]:
    return ["--config", "configs/pipelines/aic_embedded.yaml", "--prepared_dir", str(prepared), "--embedder",
            str(encoder), "--answer_prefix", "", "--cache", "", "--evaluate", "false", "--claims_per_call", "1",
            "--output_dir", str(out), "--progress", "false", *extra]


def test_aic_killed_mid_run_resumes_each_claim_once(prepared_averitec: Path, tiny_encoder_dir: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch, scripted_engine: None) -> None:
    from veracity.infer.pipelines.aic.run import main

    out = tmp_path / "run"
    argv = aic_argv(prepared_averitec, tiny_encoder_dir, out)
    report = kill_then_resume(monkeypatch, AIC, main, argv, 1, out)
    assert (report["already_done"], report["processed"]) == (1, 1)
    assert_each_once(out / "records.jsonl", ["0", "2"])  # the prepared dev claims (dev-1 has an empty claim)
    predictions = json.loads((out / "predictions.json").read_text())
    assert [(p["claim_id"], p["pred_label"]) for p in predictions] == [("0", "Refuted"), ("2", "Refuted")]
    assert report["answered"] == 2 and report["failed"] == 0


# --- SciClaimSeekers ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory, tiny_encoder_dir: Path) -> Path:
    return build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny_ce"), tiny_encoder_dir)


def sciclaim_argv(folder: Path, encoder: Path, cross_encoder: Path, out: Path, *extra: str) -> list[str]:
    posts, collection = write_posts_and_collection(folder)
    return ["--posts", str(posts), "--collection", str(collection), "--embedder", str(encoder), "--max_length",
            "64", "--reranker", "cross_encoder", "--cross_encoder", str(cross_encoder), "--candidates", "4",
            "--fusion_depth", "4", "--top_k", "4", "--posts_per_call", "1", "--progress", "false", "--output_dir",
            str(out), *extra]


def test_sciclaim_killed_mid_run_resumes_each_post_once(tiny_encoder_dir: Path, tiny_cross_encoder: Path,
                                                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from veracity.infer.pipelines.sciclaimseekers.run import main

    out = tmp_path / "run"
    argv = sciclaim_argv(tmp_path, tiny_encoder_dir, tiny_cross_encoder, out)
    report = kill_then_resume(monkeypatch, SciClaim, main, argv, 2, out)
    assert (report["already_done"], report["processed"]) == (2, 2)
    ids = [p for p, _, _ in POSTS]
    assert_each_once(out / "records.jsonl", ids)
    assert list(read_submission(out / "submission.tsv")) == ids
    assert report["metrics"]["n"] == 4
    whole = main([*argv[:-2], "--output_dir", str(tmp_path / "whole")])  # the same ranking as never killed
    assert read_submission(tmp_path / "whole" / "submission.tsv") == read_submission(out / "submission.tsv")
    assert whole["metrics"] == report["metrics"]


def test_sciclaim_shards_split_the_posts_and_refuse_other_settings(tiny_encoder_dir: Path, tiny_cross_encoder: Path,
                                                                   tmp_path: Path) -> None:
    from veracity import cli
    from veracity.infer.pipelines.sciclaimseekers.run import main

    out = tmp_path / "run"
    argv = sciclaim_argv(tmp_path, tiny_encoder_dir, tiny_cross_encoder, out)
    shards = [main([*argv, "--shard", f"{i}/2"]) for i in range(2)]
    assert all("metrics" not in report for report in shards)  # a shard is not scored alone
    files = [out / f"records.shard-{i}-of-2.jsonl" for i in range(2)]
    first, second = (set(recorded_ids(f)) for f in files)
    assert first.isdisjoint(second) and first | second == {p for p, _, _ in POSTS}
    shard0 = files[0].read_bytes()
    with pytest.raises(SystemExit) as stop:  # the other shard under other settings: refused, nothing written
        cli.main(["infer", "sciclaim", *argv, "--shard", "1/2", "--top_k", "3"])
    assert stop.value.code == 2 and files[0].read_bytes() == shard0


# --- UTS ---------------------------------------------------------------------------------------------------------


def test_uts_killed_mid_run_resumes_each_item_once_and_retries_errors_on_request(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from veracity.infer.pipelines.uts.pipeline import UTSPipeline
    from veracity.infer.pipelines.uts.run import main

    items = write_jsonl(tmp_path / "items.jsonl", ITEMS)
    out = tmp_path / "run"
    argv = ["--items", str(items), "--items_per_call", "1", "--output_dir", str(out), "--progress", "false"]
    report = kill_then_resume(monkeypatch, UTS, main, argv, 2, out)
    ids = [item["id"] for item in ITEMS]
    assert (report["already_done"], report["processed"]) == (2, 2)
    assert_each_once(out / "records.jsonl", ids)
    assert [json.loads(line)["id"] for line in (out / "articles.jsonl").read_text().splitlines()] == ids
    # an item that fails is an error record; a resume keeps it, --retry_errors true runs it again
    retry = tmp_path / "retry"
    argv = [*argv[:-4], "--output_dir", str(retry), "--progress", "false"]
    draft = UTSPipeline.__call__
    with monkeypatch.context() as patch:
        patch.setattr(UTSPipeline, "__call__", lambda self, rows: [ValueError("judge down")] if rows[0]["id"] == "i3"
                      else draft(self, rows))
        assert main(argv)["errors"] == 1
        assert main(argv)["processed"] == 0  # default: a failed item stays failed (as R2VC, AIC, SciClaimSeekers)
    again = main([*argv, "--retry_errors", "true"])
    assert (again["retried"], again["ok"]) == (1, 1)
    assert recorded_ids(retry / "records.jsonl") == ["i1", "i2", "i3", "i4", "i3"]  # appended; the last one wins
    assert len((retry / "articles.jsonl").read_text().splitlines()) == 4


# --- one output folder, one run (every pipeline: the driver's claim, infer/run_folder.py) ----------------------


def uts_cli(items: Path, out: Path, *extra: str) -> list[str]:
    return ["infer", "uts", "--items", str(items), "--items_per_call", "1", "--output_dir", str(out), "--progress",
            "false", *extra]


def refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run the CLI, expect one ``error:`` line and exit status 2; returns the line."""
    from veracity import cli

    capsys.readouterr()  # what earlier steps printed (progress bars) is not this run's
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert stop.value.code == 2 and len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_a_second_layout_or_config_in_one_folder_is_refused_and_shards_keep_their_own_summary(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """UTS unsharded with one --lede, then --shard 0/2 with another into the same folder: refused, nothing there
    changes (before, run_config.yaml, articles.jsonl and summary.json were overwritten and the report showed the
    first run's records under the second's config). The same the other way round, and for another i/n."""
    from veracity import cli

    items = write_jsonl(tmp_path / "items.jsonl", ITEMS)
    out = tmp_path / "run"
    assert cli.main(uts_cli(items, out, "--lede", "First: {claim}.")) == 0
    before = snapshot(out)
    for extra in (["--shard", "0/2", "--lede", "Second: {claim}."], ["--shard", "0/2"], ["--shard", "1/3"]):
        line = refused(capsys, uts_cli(items, out, *extra))
        assert "records.jsonl" in line and "another shard layout (unsharded)" in line
        assert snapshot(out) == before
    # a sharded folder: each shard writes its own summary; an unsharded run or another i/n is refused
    sharded = tmp_path / "sharded"
    reports = [cli.main(uts_cli(items, sharded, "--shard", f"{i}/2")) for i in range(2)]
    assert reports == [0, 0]
    summaries = [json.loads((sharded / f"summary.shard-{i}-of-2.json").read_text()) for i in range(2)]
    assert not (sharded / "summary.json").exists()
    counts = [len(recorded_ids(sharded / f"records.shard-{i}-of-2.jsonl")) for i in range(2)]
    assert [s["processed"] for s in summaries] == counts and sum(counts) == len(ITEMS)
    before = snapshot(sharded)
    for extra in ([], ["--shard", "0/3"]):
        line = refused(capsys, uts_cli(items, sharded, *extra))
        assert "records.shard-0-of-2.jsonl" in line and "--shard i/2" in line
    assert snapshot(sharded) == before
    # the same layout under another config: refused too (the records of a sibling shard)
    line = refused(capsys, uts_cli(items, sharded, "--shard", "1/2", "--lede", "Other: {claim}."))
    assert "records.shard-0-of-2.jsonl" in line and "lede" in line
    assert snapshot(sharded) == before


def test_another_job_into_a_run_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``infer generate`` (outputs of other names) into the folder of a UTS run: refused before its model loads,
    nothing there changes (before, its run_config.yaml and summary.json replaced the UTS run's)."""
    from veracity import cli

    items = write_jsonl(tmp_path / "items.jsonl", ITEMS)
    out = tmp_path / "run"
    assert cli.main(uts_cli(items, out)) == 0
    before = snapshot(out)
    line = refused(capsys, ["infer", "generate", "--input", str(items), "--output_dir", str(out), "--template",
                            "{claim}", "--model", str(tmp_path / "no_model"), "--progress", "false"])
    assert "holds a run of `infer uts` (articles.jsonl), and this is `infer generate`" in line
    assert snapshot(out) == before


def test_a_run_of_another_layout_or_config_still_without_records_is_refused_while_it_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Shard 0/2 is running (its lock held, no record written yet): a run of another layout, or shard 1/2 under
    another config, is refused — the lock is no longer per file only. Shard 1/2 under the same config runs."""
    import threading

    from veracity import cli
    from veracity.infer.pipelines.uts.run import main

    items = write_jsonl(tmp_path / "items.jsonl", ITEMS)
    out = tmp_path / "run"
    started, release = threading.Event(), threading.Event()
    draft = UTS.__call__

    def held(self, rows):  # noqa: ANN001, ANN202 - the pipeline's own signature
        if threading.current_thread() is not threading.main_thread():
            started.set()
            assert release.wait(60)
        return draft(self, rows)

    monkeypatch.setattr(UTS, "__call__", held)
    worker = threading.Thread(target=main, args=(uts_cli(items, out, "--shard", "0/2", "--lede", "A: {claim}.")[2:],))
    worker.start()
    try:
        assert started.wait(60)
        assert not (out / "records.shard-0-of-2.jsonl").read_text()  # nothing recorded yet
        line = refused(capsys, uts_cli(items, out, "--lede", "A: {claim}."))
        assert "records.shard-0-of-2.jsonl is being written by a run of another shard layout" in line
        line = refused(capsys, uts_cli(items, out, "--shard", "1/2", "--lede", "B: {claim}."))
        assert "records.shard-0-of-2.jsonl: the run writing it now was started under another run config" in line
        assert cli.main(uts_cli(items, out, "--shard", "1/2", "--lede", "A: {claim}.")) == 0
    finally:
        release.set()
        worker.join(60)
    assert sorted(recorded_ids(out / "records.shard-0-of-2.jsonl") + recorded_ids(out / "records.shard-1-of-2.jsonl")
                  ) == sorted(item["id"] for item in ITEMS)


# --- every model that shapes a record is in the run record by content ---------------------------------------------


def retrain_in_place(folder: Path) -> bytes:
    """The same folder with other weights (one tensor moved), as a model retrained in place; returns the old bytes."""
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    old = path.read_bytes()
    weights = load_file(path)
    name = next(k for k, v in weights.items() if v.is_floating_point())
    weights[name] = weights[name] + 0.01
    save_file(weights, path, metadata={"format": "pt"})
    return old


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_sciclaim_resume_under_another_encoder_or_cross_encoder_is_refused_before_loading(
        tiny_encoder_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The dense encoder and the cross-encoder are recorded by content: retrained in place (same path, other
    weights), a resume is refused in one line before any model loads — no index rebuilt, nothing written (before, the
    cross-encoder was recorded by path and the encoder not at all: the index was rebuilt silently and the run went
    on with mixed retrieval). Back to the recorded weights, the run resumes."""
    import shutil

    import yaml

    from veracity.infer.pipelines.sciclaimseekers.run import main
    from veracity.models.fingerprint import model_fingerprint

    encoder = Path(shutil.copytree(tiny_encoder_dir, tmp_path / "encoder"))
    cross = build_tiny_cross_encoder(tmp_path / "cross_encoder", tiny_encoder_dir)
    out = tmp_path / "run"
    argv = sciclaim_argv(tmp_path, encoder, cross, out)
    assert main([*argv, "--max_examples", "2"])["processed"] == 2
    models = yaml.safe_load((out / "run_config.yaml").read_text())["models"]
    assert models == {"embedder": f"{encoder}#{model_fingerprint(encoder)}",
                      "cross_encoder": f"{cross}#{model_fingerprint(cross)}"}
    before = tree(out)
    load = SciClaim.load
    monkeypatch.setattr(SciClaim, "load", lambda self, run_dir: pytest.fail("a model loaded before the refusal"))
    for folder, role in ((encoder, "embedder"), (cross, "cross_encoder")):
        old = retrain_in_place(folder)
        line = refused(capsys, ["infer", "sciclaim", *argv])
        assert f"models.{role}: '{models[role]}' → '{folder}#{model_fingerprint(folder)}'" in line
        assert tree(out) == before
        (folder / "model.safetensors").write_bytes(old)
    monkeypatch.setattr(SciClaim, "load", load)
    report = main(argv)
    assert (report["already_done"], report["processed"]) == (2, 2)


def test_aic_resume_under_another_embedder_is_refused_before_loading(
        prepared_averitec: Path, tiny_encoder_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        scripted_engine: None, capsys: pytest.CaptureFixture[str]) -> None:
    """AIC's claim indexes are keyed by the embedder's fingerprint, so a new embedder rebuilt them claim by claim
    and a resume mixed two retrievals; the embedder is now in the run record, checked before any model loads."""
    import shutil

    import yaml

    from veracity.infer.pipelines.aic.run import main
    from veracity.models.fingerprint import model_fingerprint

    encoder = Path(shutil.copytree(tiny_encoder_dir, tmp_path / "encoder"))
    out = tmp_path / "run"
    argv = aic_argv(prepared_averitec, encoder, out)
    main(argv)
    recorded = yaml.safe_load((out / "run_config.yaml").read_text())["models"]
    assert recorded == {"embedder": f"{encoder}#{model_fingerprint(encoder)}", "generator": AnswerAll().identity}
    before = tree(out)
    monkeypatch.setattr(AIC, "load", lambda self, run_dir: pytest.fail("a model loaded before the refusal"))
    retrain_in_place(encoder)
    line = refused(capsys, ["infer", "aic", *argv])
    assert f"models.embedder: '{recorded['embedder']}' → '{encoder}#{model_fingerprint(encoder)}'" in line
    assert tree(out) == before


def test_r2vc_resume_under_another_retrieval_encoder_is_refused_before_loading(
        tiny_verifier: Path, tiny_encoder_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Claims that retrieve from an --index_dir: the index's encoder is in the run record by content; retrained in
    place, a resume is refused before any model loads (before, the new claims became error records, an index
    mismatch each, beside the old claims' answers)."""
    import shutil

    import yaml
    from retrieval_fixture import write_benchmark

    from veracity.infer.pipelines.r2vc.run import main
    from veracity.infer.retrieval.index import IndexSettings, build_index
    from veracity.models.fingerprint import model_fingerprint

    encoder = Path(shutil.copytree(tiny_encoder_dir, tmp_path / "encoder"))
    bench = write_benchmark(tmp_path / "bench")
    index = build_index(bench / "toy_corpus.jsonl", tmp_path / "index",
                        IndexSettings(embedder=str(encoder), faiss_kind="flat", progress=False))
    claims = tmp_path / "claims.jsonl"
    rows = [{"id": c["id"], "claim": c["claim"]} for c in CLAIMS]
    write_jsonl(claims, rows[:2])
    out = tmp_path / "run"
    argv = ["--claims", str(claims), "--index_dir", str(index), "--use_generator", "false", "--nli_model",
            str(tiny_verifier), "--output_dir", str(out), "--progress", "false"]
    assert main(argv)["ok"] == 2
    recorded = yaml.safe_load((out / "run_config.yaml").read_text())["models"]["embedder"]
    assert recorded == f"{encoder}#{model_fingerprint(encoder)}"
    before = tree(out)
    retrain_in_place(encoder)
    write_jsonl(claims, rows)
    monkeypatch.setattr(R2VC, "load", lambda self, run_dir: pytest.fail("a model loaded before the refusal"))
    line = refused(capsys, ["infer", "r2vc", *argv])
    assert f"models.embedder: '{recorded}' → '{encoder}#{model_fingerprint(encoder)}'" in line
    assert tree(out) == before
