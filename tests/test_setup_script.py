"""``scripts/setup.sh`` on a machine without a local wheel folder (issue #63): the lock's CPU torch comes from
PyTorch's CPU index; where that index cannot be reached either, the setup ends in one line naming both ways (the
index and ``$VERACITY_WHEELS``), not a resolver dump. ``--venv`` takes absolute and relative paths. Each case runs the
script itself, and stops before anything big is installed."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
TORCH_PIN = next(line for line in (REPO / "requirements.lock").read_text().splitlines() if line.startswith("torch=="))


def setup(*args: str, wheels: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(REPO / "scripts" / "setup.sh"), *args], capture_output=True, text=True,
                          env={**os.environ, "VERACITY_WHEELS": str(wheels), **env}, timeout=120)


def test_dry_run_names_the_environment_and_where_torch_comes_from(tmp_path: Path) -> None:
    empty, folder = tmp_path / "no_wheels", tmp_path / "wheels"
    empty.mkdir()
    folder.mkdir()
    (folder / f"torch-{TORCH_PIN.removeprefix('torch==')}-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    absolute = tmp_path / "envs" / "abs"
    # an absolute --venv is the environment, as given; a relative one lies under the repository
    assert setup("--venv", str(absolute), "--dry_run", wheels=folder).stdout.splitlines() == [
        f"venv: {absolute} (Python 3.11)", f"torch: {TORCH_PIN} from {folder}"]
    assert setup("--venv", "some/env", "--dry_run", wheels=empty).stdout.splitlines() == [
        f"venv: {REPO}/some/env (Python 3.11)", f"torch: {TORCH_PIN} from {TORCH_INDEX}"]  # no folder holds it
    assert setup("--python", "3.12", "--dry_run", wheels=empty).stdout.splitlines() == [
        f"venv: {REPO}/.venv (Python 3.12)", f"torch: {TORCH_PIN.removesuffix('+cpu')} from PyPI"]
    assert not absolute.exists() and not (REPO / "some").exists(), "a dry run makes nothing"
    bad = setup("--venv", str(absolute), "--dryrun", wheels=empty)
    assert bad.returncode == 2 and bad.stderr.startswith("error: unknown option --dryrun (usage: bash scripts/")


def _index_reachable() -> bool:
    try:
        socket.getaddrinfo("download.pytorch.org", 443)
    except OSError:
        return False
    return True


@pytest.mark.skipif(shutil.which("uv") is None, reason="setup.sh would install uv first (a registry download)")
@pytest.mark.skipif(_index_reachable(), reason="PyTorch's index is reachable here: the setup would download torch")
def test_without_a_wheel_folder_or_the_index_setup_ends_in_one_line_naming_both(tmp_path: Path) -> None:
    empty, cache, venv = tmp_path / "no_wheels", tmp_path / "uv_cache", tmp_path / "env"
    empty.mkdir()
    cache.mkdir()
    done = setup("--venv", str(venv), wheels=empty, UV_CACHE_DIR=str(cache), UV_HTTP_RETRIES="0")
    assert done.returncode == 1
    [line] = done.stderr.splitlines()  # one line, not uv's resolver output
    assert line.startswith(f"error: setup: {TORCH_PIN} (the CPU build the lock pins) is in no local wheel folder "
                           f"($VERACITY_WHEELS: {empty}) and PyTorch's CPU index {TORCH_INDEX} could not be reached (")
    assert line.endswith("): run where that index is reachable, or put the wheel in a folder and name it in "
                         "$VERACITY_WHEELS")
    # the environment went where --venv (absolute) said, and nothing was installed into it
    assert (venv / "bin" / "python").exists()
    assert not list(venv.glob("lib/python*/site-packages/torch"))
