"""CLI dispatch, shipped configs, run directories, atomic writes."""

from __future__ import annotations

import dataclasses
import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from veracity import cli
from veracity.io import atomic_writer, write_jsonl
from veracity.rundir import write_run_config

REPO = Path(__file__).resolve().parents[1]

# configs/<folder>/<file prefix>*.yaml → the job that reads them; the job's make_parser() says which dataclasses.
# A new kind of config must be added here.
CONFIG_JOBS = {
    "prep": "veracity.data_prep.prepare",
    "retrieval": "veracity.infer.retrieval.evaluate",
    "train/sft": "veracity.train.sft",
    "train/dpo": "veracity.train.dpo",
    "train/nli": "veracity.train.nli",
    "train/calibrator": "veracity.train.calibrator",
    "train/reranker": "veracity.train.reranker",
    "pipelines/r2vc": "veracity.infer.pipelines.r2vc.run",
    "pipelines/uts": "veracity.infer.pipelines.uts.run",
    "pipelines/aic": "veracity.infer.pipelines.aic.run",
    "pipelines/sciclaimseekers": "veracity.infer.pipelines.sciclaimseekers.run",
    "ablations": "veracity.infer.pipelines.ablate",
}


def _config_types(path: Path) -> tuple[type, ...]:
    relative = path.relative_to(REPO / "configs")
    key = relative.parts[0] if relative.parts[0] in CONFIG_JOBS else f"{relative.parts[0]}/{path.stem.split('_')[0]}"
    return tuple(importlib.import_module(CONFIG_JOBS[key]).make_parser().dataclass_types)


def test_every_job_has_a_parser_and_main() -> None:
    """Every command the CLI dispatches to is a job with make_parser() and main(argv) (the models command's parser
    is argparse, with sub-commands)."""
    modules = {m for m, _ in cli.COMMANDS.values() if not m.startswith("@")}
    modules |= {m for subs in cli.SUBCOMMANDS.values() for m, _ in subs.values()}
    for name in sorted(modules):
        module = importlib.import_module(name)
        assert callable(getattr(module, "main", None)), name
        parser = module.make_parser()
        assert hasattr(parser, "parse_args"), name


OUR_YAMLS = sorted(p for p in REPO.glob("configs/**/*.yaml") if "accelerate" not in p.parts)


@pytest.mark.parametrize("path", OUR_YAMLS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_shipped_yaml_parses(path: Path) -> None:
    from veracity.config import load_config_values, parse_config

    types = _config_types(path)
    values = load_config_values(path)  # a recipe's `base` chain resolved
    unknown = set(values) - {f.name for cls in types for f in dataclasses.fields(cls)}
    assert not unknown, f"{path}: keys the config does not have: {unknown}"
    # GPU recipes (bf16) are parsed here as on a CPU: TrainingArguments refuses bf16 without a GPU.
    cpu = ["--bf16", "false", "--use_cpu", "true"] if values.get("bf16") else []
    configs = parse_config(types, ["--config", str(path), *cpu], prog="test")
    parsed = {f.name: getattr(c, f.name) for c in configs for f in dataclasses.fields(c)}
    parsed.update({k: values[k] for k in ("bf16", "use_cpu") if cpu and k in values})
    parsed["report_to"] = "none" if parsed.get("report_to") == [] else parsed.get("report_to")
    differ = {k: (parsed[k], v) for k, v in values.items() if parsed[k] != v and str(parsed[k]) != str(v)}
    assert not differ, f"{path}: parsed values differ from the YAML: {differ}"


@pytest.mark.parametrize("path", sorted(REPO.glob("configs/accelerate/*.yaml")), ids=lambda p: p.name)
def test_accelerate_configs_load(path: Path) -> None:
    from accelerate.commands.config.config_args import ClusterConfig

    config = ClusterConfig.from_yaml_file(str(path))
    assert config.num_processes >= 1 and config.mixed_precision in ("bf16", "no")


def test_help_is_instant_and_lists_commands() -> None:
    code = (
        "import sys, veracity.cli as c; c.main(['--help']); "
        "print(sorted(m for m in sys.modules if m in ('torch', 'transformers', 'trl')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    for command in ("prep", "index", "train", "infer", "eval", "demo"):
        assert f"  {command}" in out
    assert out.strip().endswith("[]"), "veracity --help must not import heavy libraries"


def test_unknown_and_not_yet_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["frobnicate"]) == 2
    assert capsys.readouterr().err == "error: veracity: unknown command 'frobnicate' (`veracity --help` lists them)\n"
    assert cli.main(["train"]) == 2
    assert capsys.readouterr().err.startswith("error: veracity train: a subcommand is needed: choose from sft, dpo, "
                                              "merge, nli, calibrator, reranker")
    assert cli.main(["eval", "nonsense"]) == 2
    assert capsys.readouterr().err.startswith("error: veracity eval: unknown subcommand 'nonsense': choose from "
                                              "retrieval, checkpoint, checkpoints, averitec, r2vc, sciclaim, m4")


def test_atomic_writer_keeps_the_old_file_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "x.jsonl"
    write_jsonl(target, [{"a": 1}])

    def rows():
        yield {"a": 2}
        raise RuntimeError("crash mid-write")

    with pytest.raises(RuntimeError):
        write_jsonl(target, rows())
    assert target.read_text() == '{"a":1}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["x.jsonl"]  # no temp file left behind
    with atomic_writer(target) as handle:
        handle.write("new\n")
    assert target.read_text() == "new\n"


def test_run_config_records_config_versions_and_revision(tmp_path: Path) -> None:
    @dataclasses.dataclass
    class Cfg:
        lr: float = 1e-3
        path: Path = Path("/x")

    write_run_config(tmp_path / "run", Cfg(), job="unit")
    record = yaml.safe_load((tmp_path / "run" / "run_config.yaml").read_text())
    assert record["job"] == "unit" and record["config"] == {"lr": 1e-3, "path": "/x"}
    assert record["versions"]["torch"] and record["versions"]["python"].startswith("3.")
    assert "git_revision" in record


def test_a_recipe_can_start_from_another(tmp_path: Path) -> None:
    from veracity.config import load_config_values, parse_config
    from veracity.infer.pipelines.r2vc.config import R2VCConfig

    (tmp_path / "base.yaml").write_text("split: calib\nn_candidates: 6\nsources: [vitaminc]\n")
    (tmp_path / "ablation.yaml").write_text("base: base.yaml\nn_candidates: 2\n")
    assert load_config_values(tmp_path / "ablation.yaml") == {"split": "calib", "n_candidates": 2,
                                                              "sources": ["vitaminc"]}
    (config,) = parse_config((R2VCConfig,), ["--config", str(tmp_path / "ablation.yaml"), "--max_examples", "3"])
    assert (config.split, config.n_candidates, config.sources, config.max_examples) == ("calib", 2, ["vitaminc"], 3)
    (config,) = parse_config((R2VCConfig,), ["--n_candidates", "4", f"--config={tmp_path / 'ablation.yaml'}"])
    assert (config.split, config.n_candidates) == ("calib", 4)  # any order, `--config=PATH` too; the flag wins
    (tmp_path / "base.yaml").write_text("base: ablation.yaml\n")
    with pytest.raises(ValueError, match="include each other"):
        load_config_values(tmp_path / "ablation.yaml")


def test_quiet_mode_drops_library_debug_logs_even_when_the_library_sets_its_own_level() -> None:
    import logging

    from veracity.logs import OwnLogsOnly

    def record(name: str, level: int) -> logging.LogRecord:
        return logging.LogRecord(name, level, __file__, 1, "message", None, None)

    keep = OwnLogsOnly().filter
    assert keep(record("veracity.infer.batch", logging.DEBUG)) and keep(record("veracity", logging.INFO))
    assert not keep(record("bm25s", logging.DEBUG)) and not keep(record("transformers.trainer", logging.INFO))
    assert keep(record("bm25s", logging.WARNING))


def test_run_config_differences_skip_how_much_and_how_fast() -> None:
    from veracity.rundir import differences

    old = [{"split": "dev", "max_examples": 5, "tau_ver": 0.55}, {"model": "a", "batch_size": 8}]
    new = [{"split": "dev", "max_examples": 50, "tau_ver": 0.55}, {"model": "b", "batch_size": 2}]
    assert differences(old, new) == ["[1].model: 'a' → 'b'"]
    assert differences({"sources": ["x"]}, {"sources": ["x", "y"]}) == ["sources: ['x'] → ['x', 'y']"]
    assert differences({"a": 1}, {"a": 1, "b": None}) == []
