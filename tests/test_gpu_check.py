"""scripts/gpu_check.sh and scripts/gpu_payload.sh (issue #64): the prepared GPU check runs here, on the tiny shape,
as the same script (``--cpu``); the payload lists what it would fetch and refuses to grow past the device tool's
limit, without downloading anything."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fixture_data import write_tiny_training_sets

REPO = Path(__file__).resolve().parents[1]


def bash(script: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(REPO / "scripts" / script), *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", **env}, timeout=300)


def test_the_gpu_check_runs_on_the_tiny_shape_on_this_cpu(tiny_lm_dir: Path, tmp_path: Path) -> None:
    sft, dpo = write_tiny_training_sets(tmp_path, records=6)
    done = bash("gpu_check.sh", "--cpu", "--tokenizer", str(tiny_lm_dir), "--train_file", str(sft),
                "--dpo_file", str(dpo), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("gpu_check (cpu): ") and lines[1].startswith("device: CPU")
    assert "versions: python " in done.stdout and "trl 1." in done.stdout
    rows = [line for line in lines if line.startswith(("| sft |", "| dpo |"))]
    assert [row.split(" | ")[:2] for row in rows] == [["| sft", "shipped"], ["| sft", "no_checkpointing+padding_free"],
                                                      ["| dpo", "shipped"], ["| dpo", "no_checkpointing+padding_free"]]
    assert all(row.split(" | ")[3] == "2" and row.endswith("|  |") for row in rows), rows  # 2 rounds, no note
    assert (tmp_path / "out" / "gpu_check.md").read_text() == done.stdout.split("\n", 1)[1]
    saved = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert [len(row["runs"]) for row in saved["rows"]] == [2, 2, 2, 2]


def payload_inputs(tmp_path: Path, tiny_lm_dir: Path) -> list[str]:
    (tmp_path / "records").mkdir()
    write_tiny_training_sets(tmp_path / "records", records=6)
    return ["--records", str(tmp_path / "records"), "--tokenizer", str(tiny_lm_dir), "--out", str(tmp_path / "p")]


def test_the_payload_dry_run_lists_the_locked_wheels_and_the_files_it_would_copy(tiny_lm_dir: Path,
                                                                                 tmp_path: Path) -> None:
    done = bash("gpu_payload.sh", "--dry_run", *payload_inputs(tmp_path, tiny_lm_dir))
    assert done.returncode == 0, done.stderr
    lock = {line.split("==")[0].lower(): line for line in (REPO / "requirements.lock").read_text().splitlines()
            if "==" in line}
    listed = [line.strip() for line in done.stdout.splitlines() if line.startswith("  ")]
    for name in ("trl", "datasets", "dill", "multiprocess", "transformers", "peft", "fsspec"):
        assert lock[name] in listed, name  # the lock's own versions
    assert "liger-kernel==0.8.5" in listed and "would build: veracity's wheel (uv build --wheel)" in done.stdout
    assert any(line.startswith("tokenizer/tokenizer.json (") for line in listed)
    assert any(line.startswith("records/sft.jsonl") for line in listed)
    assert not (tmp_path / "p").exists(), "a dry run writes nothing"


def test_a_payload_over_the_limit_is_one_error_line(tiny_lm_dir: Path, tmp_path: Path) -> None:
    done = bash("gpu_payload.sh", "--dry_run", *payload_inputs(tmp_path, tiny_lm_dir), GPU_PAYLOAD_LIMIT_MIB="0")
    err = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(err) == 1, done.stderr
    assert err[0].startswith("error: gpu_payload: the local files alone come to ") and "over the 0 MiB" in err[0]
