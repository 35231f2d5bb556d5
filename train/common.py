"""What the training jobs share: their config parsing (with a progress bar), validated training records
(file:line:field errors) and resume."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from veracity.config import parse_config
from veracity.data_prep.errors import DataError
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
