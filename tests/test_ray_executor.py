"""``--executor ray`` (infer/executors.py) on a local Ray cluster of 2 CPUs, through each pipeline's ``main(argv)``:
the records equal the local executor's (same ids, decisions and scores; timings aside) for R2VC, AIC,
SciClaimSeekers and UTS; a run interrupted mid-file resumes with each id once; an item that raises in an actor is
an error record, and ``--retry_errors`` runs it again; the Ray run's driver loads no model (the actors do)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pipeline_inputs import CLAIMS, ITEMS, build_tiny_cross_encoder, write_jsonl, write_posts_and_collection

from veracity.infer.batch import latest_records
from veracity.infer.pipelines.driver import entry
from veracity.infer.pipelines.uts.pipeline import UTS

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent


def without_timing(value: Any) -> Any:
    """A record with every ``*seconds*`` field left out (how long a step took is the one thing that may differ)."""
    if isinstance(value, dict):
        return {k: without_timing(v) for k, v in value.items() if "seconds" not in k}
    if isinstance(value, list):
        return [without_timing(v) for v in value]
    return value


def records(folder: Path) -> dict[str, Any]:
    """The last record of each id in ``folder``'s records.jsonl, timings left out."""
    return {r["id"]: without_timing(r) for r in latest_records(folder / "records.jsonl")}


def recorded_ids(folder: Path) -> list[str]:
    return [json.loads(line)["id"] for line in (folder / "records.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def model_loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every model this process (a run's driver; the actors are other processes) loads from here on: transformers
    weights of any class (generators, verifiers, and the models under sentence-transformers' encoders and
    cross-encoders) and ONNX Runtime sessions."""
    import onnxruntime
    from transformers import PreTrainedModel

    loads: list[str] = []
    from_pretrained = PreTrainedModel.from_pretrained.__func__  # type: ignore[attr-defined]

    def counted(cls: type, *args: Any, **kwargs: Any) -> Any:
        loads.append(f"{cls.__name__} {args[0] if args else ''}")
        return from_pretrained(cls, *args, **kwargs)

    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(counted))
    session = onnxruntime.InferenceSession.__init__
    monkeypatch.setattr(onnxruntime.InferenceSession, "__init__",
                        lambda self, path, *a, **k: loads.append(f"onnx {path}") or session(self, path, *a, **k))
    return loads


def local_and_ray(main: Any, argv: list[str], tmp_path: Path, *ray_options: str,
                  loads: list[str] | None = None) -> tuple[dict, dict]:
    """The same run under each executor (into ``tmp_path/local`` and ``tmp_path/ray``): the two reports. With
    ``loads`` (:func:`model_loads`): the local run loaded models, the Ray run's driver none."""
    local = main([*argv, "--output_dir", str(tmp_path / "local")])
    before = list(loads) if loads is not None else []
    on_ray = main([*argv, "--output_dir", str(tmp_path / "ray"), "--executor", "ray", *ray_options])
    assert on_ray["executor"]["executor"] == "ray" and "executor" not in local
    if loads is not None:
        assert before, "the local run loads its models in this process"
        assert loads == before, f"the Ray driver loaded {loads[len(before):]}: only the actors load models"
    return local, on_ray


def assert_same_records(tmp_path: Path, n: int) -> None:
    local, on_ray = records(tmp_path / "local"), records(tmp_path / "ray")
    assert len(local) == n and local == on_ray
    assert sorted(recorded_ids(tmp_path / "ray")) == sorted(local), "each id once"


# --- R2VC: generator (the tiny Llama, greedy) and verifier in the actor ------------------------------------------


def r2vc_argv(tmp_path: Path, verifier: Path, lm: Path) -> list[str]:
    claims = write_jsonl(tmp_path / "claims.jsonl", CLAIMS)
    return ["--claims", str(claims), "--nli_model", str(verifier), "--model", str(lm), "--n_candidates", "1",
            "--temperature", "0", "--max_new_tokens", "6", "--constrained", "false", "--claims_per_call", "2",
            "--progress", "false"]


def test_r2vc_on_ray_equals_local(ray_cluster: Any, tiny_verifier: Path, tiny_lm_dir: Path, tmp_path: Path,
                                  model_loads: list[str]) -> None:
    from veracity.infer.pipelines.r2vc.run import main

    argv = r2vc_argv(tmp_path, tiny_verifier, tiny_lm_dir)
    local, on_ray = local_and_ray(main, argv, tmp_path, loads=model_loads)
    loaded = " ".join(model_loads)
    assert str(tiny_lm_dir) in loaded and str(tiny_verifier) in loaded, "the local run: generator and verifier"
    import yaml

    named = [yaml.safe_load((tmp_path / run / "run_config.yaml").read_text())["models"] for run in ("local", "ray")]
    assert named[0] == named[1] and "generator" in named[1], "named as a loaded one is"
    assert_same_records(tmp_path, len(CLAIMS))
    assert json.loads((tmp_path / "ray" / "metrics.json").read_text()) == local["metrics"] == on_ray["metrics"]
    assert on_ray["seconds_per_stage"].keys() == local["seconds_per_stage"].keys()
    assert on_ray["verifier"]["pairs"] == local["verifier"]["pairs"] > 0  # the actor's stats, as a local run's


# --- AIC: proxy store and index cache written by the driver, read by the actor -----------------------------------


def test_aic_on_ray_equals_local(ray_cluster: Any, data_root: Path, tiny_encoder_dir: Path, tiny_lm_dir: Path,
                                 tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model_loads: list[str]) -> None:
    from veracity.data_prep.prepare import PrepConfig, prepare
    from veracity.infer.pipelines.aic.run import main
    from veracity.models.nltk_data import ensure_nltk_data

    ensure_nltk_data(tmp_path / "cache" / "nltk_data")
    monkeypatch.setenv("VERACITY_CACHE", str(tmp_path / "cache"))  # the actors get it too
    monkeypatch.chdir(REPO)  # a recipe path relative to the repository, for the driver and its actors
    prepared = tmp_path / "prep"
    prepare(PrepConfig(data_root=str(data_root), output_dir=str(prepared), datasets=["averitec"]))
    argv = ["--config", "configs/pipelines/aic_embedded.yaml", "--prepared_dir", str(prepared), "--embedder",
            str(tiny_encoder_dir), "--model", str(tiny_lm_dir), "--answer_prefix", "", "--max_new_tokens", "8",
            "--cache", "", "--claims_per_call", "1", "--progress", "false"]
    local, on_ray = local_and_ray(main, argv, tmp_path, loads=model_loads)
    assert_same_records(tmp_path, 2)
    assert (on_ray["answered"], on_ray["failed"]) == (local["answered"], local["failed"])
    assert on_ray["metrics"] == local["metrics"]
    assert (tmp_path / "ray" / "index_cache" / "0" / "index.faiss").is_file()  # built by the actor


# --- SciClaimSeekers: index built by the driver, loaded by the actor ---------------------------------------------


def test_sciclaim_on_ray_equals_local(ray_cluster: Any, tiny_encoder_dir: Path, tmp_path: Path,
                                      model_loads: list[str]) -> None:
    from veracity.data_prep.checkthat_files import read_submission
    from veracity.infer.pipelines.sciclaimseekers.run import main

    cross_encoder = build_tiny_cross_encoder(tmp_path / "ce", tiny_encoder_dir)
    posts, collection = write_posts_and_collection(tmp_path)
    argv = ["--posts", str(posts), "--collection", str(collection), "--embedder", str(tiny_encoder_dir),
            "--max_length", "64", "--reranker", "cross_encoder", "--cross_encoder", str(cross_encoder),
            "--candidates", "4", "--fusion_depth", "4", "--top_k", "4", "--posts_per_call", "2", "--progress",
            "false", "--index_dir", str(tmp_path / "index")]  # built by the local run: the Ray driver loads nothing
    local, on_ray = local_and_ray(main, argv, tmp_path, loads=model_loads)
    assert_same_records(tmp_path, 4)
    assert read_submission(tmp_path / "ray" / "submission.tsv") == read_submission(tmp_path / "local" /
                                                                                   "submission.tsv")
    assert on_ray["metrics"] == local["metrics"] and on_ray["metrics"]["n"] == 4


# --- UTS: two actors; a resumed interrupted file; an item that raises in an actor; --retry_errors -----------------


class FailingUTS(UTS):
    """UTS whose batches holding item i3 raise, in whichever process runs them (the actors import this module)."""

    def __call__(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if any(item["id"] == "i3" for item in items):
            raise ValueError("judge down")
        return super().__call__(items)


def test_uts_on_two_actors_equals_local_resumes_once_and_a_failing_item_is_an_error_record_retried_on_request(
        ray_cluster: Any, tmp_path: Path) -> None:
    from veracity.infer.pipelines.uts.run import main

    items = write_jsonl(tmp_path / "items.jsonl", ITEMS)
    argv = ["--items", str(items), "--items_per_call", "2", "--progress", "false"]
    local, on_ray = local_and_ray(main, argv, tmp_path, "--workers", "2")
    assert_same_records(tmp_path, len(ITEMS))
    assert on_ray["articles"] == local["articles"] == len(ITEMS)
    assert (tmp_path / "ray" / "articles.jsonl").read_text() == (tmp_path / "local" / "articles.jsonl").read_text()
    # a driver killed mid-write left one record and a torn line: the resume runs the other three, each once;
    # i3 raises in an actor: its batch is retried item by item, so i3 alone is an error record
    out = tmp_path / "interrupted"
    out.mkdir()
    lines = (tmp_path / "local" / "records.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (out / "records.jsonl").write_text(lines[0] + lines[1][:30], encoding="utf-8")
    ray_argv = [*argv, "--output_dir", str(out), "--executor", "ray"]
    report = entry(FailingUTS, "tests")[2](ray_argv)
    assert (report["already_done"], report["processed"], report["ok"], report["errors"]) == (1, 3, 2, 1)
    failed = records(out)["i3"]
    assert failed["status"] == "error" and failed["error"] == "ValueError: judge down"
    assert main(ray_argv)["processed"] == 0  # a resume keeps the error
    again = main([*ray_argv, "--retry_errors", "true"])
    assert (again["retried"], again["processed"], again["ok"]) == (1, 1, 1)
    assert Counter(recorded_ids(out)) == {"i1": 1, "i2": 1, "i3": 2, "i4": 1}  # appended; the last one wins
    assert records(out) == records(tmp_path / "local")


class OtherModelsUTS(UTS):
    """UTS whose actors report other models than the driver recorded (another model cache on their node)."""

    def model_ids(self) -> dict[str, str]:
        import ray

        in_actor = ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None
        return {**super().model_ids(), "judge": "node-b/judge#2222" if in_actor else "node-a/judge#1111"}


def test_an_actor_with_other_models_stops_the_run_before_its_records(ray_cluster: Any, tmp_path: Path) -> None:
    from veracity.infer.executors import WorkerModelsError
    from veracity.rundir import RunConfigMismatchError

    items = write_jsonl(tmp_path / "items.jsonl", ITEMS)
    out = tmp_path / "out"
    argv = ["--items", str(items), "--items_per_call", "2", "--progress", "false", "--output_dir", str(out),
            "--executor", "ray"]
    with pytest.raises(WorkerModelsError, match=r"loaded other models than .*run_config.yaml records — judge: "
                       r"node-b/judge#2222 \(recorded: node-a/judge#1111\)"):
        entry(OtherModelsUTS, "tests")[2](argv)
    assert issubclass(WorkerModelsError, RunConfigMismatchError)  # the command line: one error line, status 2
    written = out / "records.jsonl"
    assert not written.exists() or written.read_text() == ""  # not one record made by the other models


# --- vLLM replicas (a GPU machine with vLLM installed) -----------------------------------------------------------


@pytest.mark.gpu
def test_r2vc_on_vllm_replicas_one_engine_per_gpu(ray_cluster: Any, tiny_verifier: Path, tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    torch = pytest.importorskip("torch")
    from veracity.infer.pipelines.r2vc.run import main

    gpus = torch.cuda.device_count()
    claims = write_jsonl(tmp_path / "claims.jsonl", CLAIMS)
    report = main(["--claims", str(claims), "--nli_model", str(tiny_verifier), "--engine", "vllm", "--model",
                   "real", "--n_candidates", "2", "--max_new_tokens", "64", "--claims_per_call", "2",
                   "--output_dir", str(tmp_path / "run"), "--progress", "false", "--executor", "ray",
                   "--workers", str(gpus), "--num_gpus_per_worker", "1"])
    assert (report["processed"], report["errors"]) == (len(CLAIMS), 0)
    import yaml

    run_config = yaml.safe_load((tmp_path / "run" / "run_config.yaml").read_text())
    assert run_config["models"]["generator"].startswith("vllm:")
    assert len(report.get("stats_per_worker", {"one actor": None})) == gpus  # one engine per GPU
    assert all(r["status"] == "ok" for r in records(tmp_path / "run").values())


def test_an_unknown_executor_or_no_worker_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from veracity import cli

    items = write_jsonl(tmp_path / "items.jsonl", ITEMS)
    for option, value in (("--executor", "spark"), ("--workers", "0")):
        with pytest.raises(SystemExit) as stop:
            cli.main(["infer", "uts", "--items", str(items), "--output_dir", str(tmp_path / "o"), option, value])
        assert stop.value.code == 2 and option.strip("-") in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_shard_that_would_start_a_second_ray_beside_a_running_sibling_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One Ray per machine: shard 1/2 without --ray_address, while shard 0/2 of the folder is being written (its
    lock held), would start a Ray instance of its own beside the sibling's: one error line, status 2, no record."""
    from veracity import cli
    from veracity.infer.batch import output_lock

    items = write_jsonl(tmp_path / "items.jsonl", ITEMS)
    out = tmp_path / "out"
    argv = ["infer", "uts", "--items", str(items), "--output_dir", str(out), "--progress", "false",
            "--executor", "ray", "--shard", "1/2"]
    out.mkdir()
    with output_lock(out / "records.shard-0-of-2.jsonl"):  # the sibling shard, running
        with pytest.raises(SystemExit) as stop:
            cli.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and err[0].startswith("error: ")
    assert "records.shard-0-of-2.jsonl is being written by a sibling shard" in err[0]
    assert "--ray_address auto" in err[0]
    assert not (out / "records.shard-1-of-2.jsonl").exists()
