"""CLI dispatch, shipped configs, run directories, atomic writes."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from veracity import cli
from veracity.io import atomic_writer, write_jsonl
from veracity.rundir import write_run_config

REPO = Path(__file__).resolve().parents[1]

# configs/<folder>/*.yaml → the dataclasses that read them. A new config folder must be added here.
CONFIG_TYPES = {
    "prep": ("veracity.data_prep.prepare:PrepConfig",),
    "retrieval": ("veracity.infer.retrieval.evaluate:RetrievalEvalConfig",
                  "veracity.infer.retrieval.index:IndexSettings"),
}


def _config_types(folder: str) -> tuple[type, ...]:
    types = []
    for spec in CONFIG_TYPES[folder]:
        module, name = spec.split(":")
        types.append(getattr(__import__(module, fromlist=[name]), name))
    return tuple(types)


@pytest.mark.parametrize("path", sorted(REPO.glob("configs/**/*.yaml")), ids=lambda p: str(p.relative_to(REPO)))
def test_every_shipped_yaml_parses(path: Path) -> None:
    from veracity.config import parse_config

    folder = path.relative_to(REPO / "configs").parts[0]
    types = _config_types(folder)
    values = yaml.safe_load(path.read_text())
    unknown = set(values) - {f.name for cls in types for f in dataclasses.fields(cls)}
    assert not unknown, f"{path}: keys the config does not have: {unknown}"
    configs = parse_config(types, ["--config", str(path)], prog="test")
    parsed = {f.name: getattr(c, f.name) for c in configs for f in dataclasses.fields(c)}
    assert all(parsed[key] == value for key, value in values.items())


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
    assert "unknown command" in capsys.readouterr().err
    assert cli.main(["train"]) == 2
    assert "not available yet" in capsys.readouterr().err


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
