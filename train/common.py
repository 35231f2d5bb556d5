"""What the training jobs share: their config parsing (with a progress bar), validated training records
(file:line:field errors), resume, and where a run reports to."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any

from veracity.config import parse_config
from veracity.data_prep.errors import DataError, InputError
from veracity.data_prep.readers import read_jsonl

logger = logging.getLogger(__name__)


def parse_training_config(parser: Any, argv: Any) -> tuple[Any, ...]:
    """``parse_config`` for a job with a Trainer: the training shows its progress bar (steps, ETA) also in quiet
    mode. TrainingArguments turns the bar off when the transformers logger is above WARNING, which quiet mode sets
    to hide library chatter; it is parsed at WARNING here, so only an explicit ``disable_tqdm: true`` removes it."""
    transformers_logger = logging.getLogger("transformers")
    level = transformers_logger.level
    transformers_logger.setLevel(min(level or logging.WARNING, logging.WARNING))
    try:
        return parse_config(parser, argv)
    finally:
        transformers_logger.setLevel(level)


def _check_messages(path: Path, line: int, row: dict[str, Any], name: str) -> None:
    value = row.get(name)
    if not isinstance(value, list) or not value:
        raise DataError(path, line, "expected a non-empty list of {role, content} messages", field=name)
    for index, message in enumerate(value):
        if not (isinstance(message, dict) and isinstance(message.get("role"), str)
                and isinstance(message.get("content"), str)):
            raise DataError(path, line, f"message {index} is not a {{role, content}} object", field=name)


def load_records(path: str | Path, fields: tuple[str, ...], limit: int | None = None) -> list[dict[str, Any]]:
    """Training records with the given message-list fields; a malformed record names file, line and field."""
    path = Path(path)
    records = []
    for line, row in read_jsonl(path):
        for name in fields:
            _check_messages(path, line, row, name)
        records.append({name: row[name] for name in fields})
        if limit and len(records) >= limit:
            break
    if not records:
        raise DataError(path, None, "no training records")
    return records


def last_checkpoint(output_dir: str | Path) -> str | None:
    """The newest ``checkpoint-N`` in ``output_dir`` (resume="auto"), or None for a fresh run."""
    from transformers.trainer_utils import get_last_checkpoint  # lazy: seconds to import

    folder = Path(output_dir)
    if not folder.is_dir():
        return None
    found = get_last_checkpoint(str(folder))
    if found:
        logger.info("resuming from %s", found)
    return found


AUTO_REPORTING = "auto"  # every shipped recipe's report_to: TensorBoard where it is installed
TENSORBOARD_MODULES = ("tensorboard", "tensorboardX")  # either one serves transformers' TensorBoardCallback


def tensorboard_installed() -> bool:
    return any(importlib.util.find_spec(name) is not None for name in TENSORBOARD_MODULES)


def resolve_reporting(training_args: Any) -> list[str]:
    """Set ``training_args.report_to`` to the integrations this run reports to, before any weights load.

    ``auto`` (the shipped recipes' value) becomes ``tensorboard`` where TensorBoard (or tensorboardX) is installed
    and nothing where it is not, said in one info line: a recipe runs the same on a machine without it, and its
    curves are in the run's report.html either way. An explicit ``tensorboard`` without it is the user's to fix: one
    ``error:`` line (the Trainer would say so only after the model is in memory).
    """
    report_to = training_args.report_to
    wanted = [report_to] if isinstance(report_to, str) else list(report_to or [])
    resolved = []
    for name in wanted:
        if name == AUTO_REPORTING and tensorboard_installed():
            resolved.append("tensorboard")
        elif name == AUTO_REPORTING:
            logger.info("report_to auto: TensorBoard is not installed, so no event files (pip install tensorboard "
                        "adds them); the curves are in the run's report.html")
        elif name == "tensorboard" and not tensorboard_installed():
            raise InputError("--report_to tensorboard needs TensorBoard: pip install tensorboard (or pass --report_to "
                             "auto, which uses it only where it is installed)")
        elif name != "none":
            resolved.append(name)
    training_args.report_to = list(dict.fromkeys(resolved))
    return training_args.report_to


def model_init_kwargs(model_args: Any, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the trainer's ``from_pretrained`` gets from the recipe's model fields (``ModelConfig``): its ``dtype``
    and ``attn_implementation``. TRL loads a model given by path with ``args.model_init_kwargs`` alone, whose dtype
    defaults to float32, so without this a bf16 recipe trained float32 weights (33 vs 17 GiB on the 8B shape).
    ``--model_init_kwargs`` (a TRL field) still wins for any key it sets."""
    kwargs: dict[str, Any] = {"dtype": model_args.dtype or "float32", "revision": model_args.model_revision}
    if model_args.attn_implementation:
        kwargs["attn_implementation"] = model_args.attn_implementation
    return {**kwargs, **(extra or {})}
