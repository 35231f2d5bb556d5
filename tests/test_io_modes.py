"""Atomic writes give their outputs the modes of plain writes (umask applied), not their temp files' 0600/0700."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from veracity.io import atomic_directory, atomic_writer, process_umask, write_json, write_jsonl


@pytest.fixture(params=[0o022, 0o027])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    previous = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_process_umask_reads_without_changing(umask: int) -> None:
    assert process_umask() == umask
    assert process_umask() == umask


def test_atomic_files_follow_the_umask(tmp_path: Path, umask: int) -> None:
    write_jsonl(tmp_path / "records.jsonl", [{"a": 1}])
    write_json(tmp_path / "metrics.json", {"accuracy": 1.0})
    with atomic_writer(tmp_path / "blob.bin", "wb") as handle:
        handle.write(b"x")
    (tmp_path / "plain.txt").write_text("x")
    for name in ("records.jsonl", "metrics.json", "blob.bin"):
        assert _mode(tmp_path / name) == 0o666 & ~umask == _mode(tmp_path / "plain.txt"), name


def test_atomic_directory_follows_the_umask(tmp_path: Path, umask: int) -> None:
    with atomic_directory(tmp_path / "model", "test") as tmp:
        (tmp / "config.json").write_text("{}")
    (tmp_path / "plain").mkdir()
    assert _mode(tmp_path / "model") == 0o777 & ~umask == _mode(tmp_path / "plain")
    assert _mode(tmp_path / "model" / "COMPLETED") == 0o666 & ~umask
