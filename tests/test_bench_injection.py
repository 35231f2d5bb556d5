"""bench/r2vc_injection.py: an output folder made under other settings stops the probe with one line naming it,
as `veracity infer r2vc` does, not with a traceback."""

from __future__ import annotations

import sys

import pytest
from repo_scripts import load_script


def test_a_mismatched_output_is_one_line_naming_the_file(monkeypatch, tmp_path) -> None:
    import veracity.infer.pipelines.r2vc.run as r2vc_run
    from veracity.rundir import RunConfigMismatchError

    record = tmp_path / "full_pipeline_clean" / "run_config.json"

    def mismatched(argv):
        raise RunConfigMismatchError(f"{record}: made under another config")

    monkeypatch.setattr(r2vc_run, "main", mismatched)
    monkeypatch.setattr(sys, "argv", ["r2vc_injection.py", "--output_dir", str(tmp_path)])
    module = load_script("bench/r2vc_injection.py")
    with pytest.raises(SystemExit) as stopped:
        module.main()
    assert str(stopped.value) == f"bench/r2vc_injection.py: {record}: made under another config"
