"""One --device on every command that loads a model: parsed, resolved, recorded, and reaching each model (#49)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml

from veracity.cli import main as cli
from veracity.data_prep.errors import InputError
from veracity.models.device import check_device, model_device, resolve_device

# every command that loads a model (issue #49's list, plus index search)
COMMANDS = {
    "infer r2vc": "veracity.infer.pipelines.r2vc.run", "infer aic": "veracity.infer.pipelines.aic.run",
    "infer sciclaim": "veracity.infer.pipelines.sciclaimseekers.run", "infer uts": "veracity.infer.pipelines.uts.run",
    "infer generate": "veracity.infer.generate", "eval checkpoint": "veracity.infer.checkpoint_eval",
    "eval m4": "veracity.infer.eval.m4", "eval averitec": "veracity.infer.eval.averitec",
    "train calibrator": "veracity.train.calibrator", "train reranker": "veracity.train.reranker",
    "index build": "veracity.infer.retrieval.index_build", "index search": "veracity.infer.retrieval.index_search",
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_model_loading_command_has_device_in_its_help(command: str) -> None:
    text = importlib.import_module(COMMANDS[command]).make_parser().format_help()
    assert "--device" in text and "auto (the GPU when torch sees one" in " ".join(text.split()), command


def test_device_specs_resolve_on_a_machine_without_a_gpu() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert resolve_device("auto") == "cpu" and resolve_device("cpu") == "cpu"
    for spec in ("cuda", "cuda:1"):
        with pytest.raises(InputError, match="torch sees no CUDA GPU"):
            resolve_device(spec)
    for bad in ("gpu", "cuda:x", "CPU", ""):
        with pytest.raises(ValueError, match="--device must be"):
            check_device(bad)


def test_eval_checkpoint_records_the_device_and_the_models_are_on_it(prepared_dir: Path, tiny_lm_dir: Path,
                                                                      tmp_path: Path) -> None:
    from veracity.models.engine import EngineConfig
    from veracity.models.engine_factory import make_engine

    out = tmp_path / "cpu"
    assert cli(["eval", "checkpoint", "--kind", "generator", "--model", str(tiny_lm_dir), "--prepared_dir",
                str(prepared_dir), "--sources", "vitaminc", "--max_examples", "2", "--rationale_max_chars", "16",
                "--device", "cpu", "--output_dir", str(out)]) == 0
    record = yaml.safe_load((out / "run_config.yaml").read_text())
    assert record["device"] == "cpu" and record["config"][1]["device"] == "cpu"
    metrics = yaml.safe_load((out / "metrics.json").read_text())["vitaminc"]
    assert metrics["examples_per_second"] > 0 and metrics["seconds"] > 0
    engine = make_engine(EngineConfig(model=str(tiny_lm_dir), device="cpu"))
    assert model_device(engine.model) == "cpu"


@pytest.mark.skipif(importlib.util.find_spec("torch") and __import__("torch").cuda.is_available(),
                    reason="this machine has a GPU")
def test_device_cuda_without_a_gpu_is_one_error_line_and_writes_nothing(prepared_dir: Path, tiny_lm_dir: Path,
                                                                         tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "gpu"
    with pytest.raises(SystemExit) as stop:
        cli(["eval", "checkpoint", "--kind", "generator", "--model", str(tiny_lm_dir), "--prepared_dir",
             str(prepared_dir), "--sources", "vitaminc", "--device", "cuda", "--output_dir", str(out)])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --device cuda: torch sees no CUDA GPU"), err
    assert not out.exists()


def test_the_device_reaches_the_verifier_and_the_encoders(monkeypatch: pytest.MonkeyPatch, prepared_dir: Path,
                                                          tiny_encoder_dir: Path, tmp_path: Path) -> None:
    """Each component is built with the job's --device (spied): the verifier of eval checkpoint --kind nli and the
    dense encoder of index build."""
    from tiny_models import build_tiny_nli

    import veracity.infer.checkpoint_eval as checkpoint_eval
    import veracity.infer.retrieval.index as index_module

    seen: list[tuple[str, str]] = []

    def spy(name: str, cls: type) -> type:
        class Spy(cls):  # type: ignore[misc, valid-type]
            def __init__(self, *args: object, **kwargs: object) -> None:
                seen.append((name, str(kwargs.get("device"))))
                super().__init__(*args, **kwargs)
        return Spy

    monkeypatch.setattr(checkpoint_eval, "NLIVerifier", spy("verifier", checkpoint_eval.NLIVerifier))
    monkeypatch.setattr(index_module, "DenseEncoder", spy("encoder", index_module.DenseEncoder))
    nli = build_tiny_nli(tmp_path / "nli", tiny_encoder_dir, {0: "CONTRADICTION", 1: "ENTAILMENT", 2: "NEUTRAL"})
    cli(["eval", "checkpoint", "--kind", "nli", "--nli_model", str(nli), "--nli_backend", "torch", "--device", "cpu",
         "--prepared_dir", str(prepared_dir), "--sources", "vitaminc", "--output_dir", str(tmp_path / "e")])
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"doc_id": "a", "text": "The bridge is 120 m long."}\n{"doc_id": "b", "text": "Cats."}\n')
    cli(["index", "build", "--corpus", str(corpus), "--output_dir", str(tmp_path / "ix"), "--embedder",
         str(tiny_encoder_dir), "--device", "cpu"])
    assert seen == [("verifier", "cpu"), ("encoder", "cpu")]
    assert yaml.safe_load((tmp_path / "ix" / "run_config.yaml").read_text())["device"] == "cpu"


class Built(Exception):
    """Raised by a spied component once it has seen its device: the test stops there (no GPU to load onto)."""


def test_a_gpu_device_reaches_the_verifier_and_the_encoders(monkeypatch: pytest.MonkeyPatch, prepared_dir: Path,
                                                            tiny_encoder_dir: Path, tmp_path: Path) -> None:
    """The same with --device cuda:0 on a machine made to look as if it had a GPU: a component built with a
    hard-coded "cpu" (or with the driver's resolved device instead of the job's) would say so here."""
    import torch

    import veracity.infer.checkpoint_eval as checkpoint_eval
    import veracity.infer.retrieval.index as index_module

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    seen: list[tuple[str, str]] = []

    def spy(name: str) -> type:
        class Spy:
            def __init__(self, *args: object, **kwargs: object) -> None:
                seen.append((name, str(kwargs.get("device"))))
                raise Built(name)
        return Spy

    monkeypatch.setattr(checkpoint_eval, "NLIVerifier", spy("verifier"))
    monkeypatch.setattr(index_module, "DenseEncoder", spy("encoder"))
    with pytest.raises(Built):
        cli(["eval", "checkpoint", "--kind", "nli", "--nli_model", str(tiny_encoder_dir), "--device", "cuda:0",
             "--prepared_dir", str(prepared_dir), "--sources", "vitaminc", "--output_dir", str(tmp_path / "e")])
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"doc_id": "a", "text": "The bridge is 120 m long."}\n')
    with pytest.raises(Built):
        cli(["index", "build", "--corpus", str(corpus), "--output_dir", str(tmp_path / "ix"), "--embedder",
             str(tiny_encoder_dir), "--device", "cuda:0"])
    assert seen == [("verifier", "cuda:0"), ("encoder", "cuda:0")]


def test_a_ray_driver_names_models_on_the_actors_device_not_its_own() -> None:
    """``--executor ray``: the driver resolves ``auto`` as its actors will (a GPU when Ray gives them one), so the
    models it records are those they load; a cuda spec is the actors' to check."""
    from veracity.infer.executors import ExecutorConfig, actor_device
    from veracity.models.device import resolved_for

    assert actor_device(ExecutorConfig(executor="ray")) == "cpu"
    assert actor_device(ExecutorConfig(executor="ray", num_gpus_per_worker=1)) == "cuda"
    with resolved_for("cuda"):
        assert resolve_device("auto") == "cuda" and resolve_device("cuda:1") == "cuda:1"
        assert resolve_device("cpu") == "cpu"
    import torch

    if not torch.cuda.is_available():
        assert resolve_device("auto") == "cpu"  # outside the block: this machine again
