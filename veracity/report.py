"""Write ``report.html`` for a run folder: a training run's page or a pipeline run's.

Usage: veracity report RUN_DIR

A training run (``run_config.yaml``'s job ``train …``; finished or interrupted) gets the page of
``train/report.py``; a pipeline run (``infer …``, an ``eval …`` scorer's run) the pipelines' page
(``infer/report_html.py``, also ``python -m veracity.infer.report_html RUN_DIR``). Every ``veracity train`` job and
the pipeline driver write their page at the end of a run; this command writes it again, e.g. for a killed run.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from veracity.config import OneLineErrors
from veracity.data_prep.errors import InputError
from veracity.rundir import read_run_config


def make_parser() -> argparse.ArgumentParser:
    parser = OneLineErrors(prog="veracity report", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="the run folder (it holds run_config.yaml)")
    return parser


def main(argv: Sequence[str] | None = None) -> Path:
    """Write ``RUN_DIR/report.html``, print its path and return it.

    Raises:
        InputError: ``RUN_DIR`` is no folder, has no ``run_config.yaml``, or (a pipeline run) holds no records.
    """
    run_dir = make_parser().parse_args(argv).run_dir
    if not run_dir.is_dir():
        raise InputError(f"{run_dir}: no such folder (give a run folder: one with run_config.yaml)")
    record = run_dir / "run_config.yaml"
    if not record.is_file():
        raise InputError(f"{run_dir}: no run_config.yaml, so not a run folder (every veracity job writes one first)")
    recorded = read_run_config(record, run_dir)  # unreadable: one error line, as a resume's check says it
    if not isinstance(recorded, dict):
        raise InputError(f"{record}: not a run record (not a mapping)")
    job = str(recorded.get("job", ""))
    if job.startswith("train "):
        from veracity.train.report import write_training_report

        path = write_training_report(run_dir)
    else:
        from veracity.infer.report_html import report_run

        path = report_run(run_dir)
    print(path)
    return path
