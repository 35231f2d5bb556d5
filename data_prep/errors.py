"""Input errors that name the file, line and field, and the collector behind ``--skip-invalid``."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)


class InputError(ValueError):
    """Something the user can fix without a traceback: a bad record or file, option value, model name or folder.
    ``str()`` is one line; ``veracity.cli`` prints it as ``error: <message>`` and exits with status 2."""


class DataError(InputError):
    """A bad input record. ``str()`` reads ``file:line: field 'x': message``."""

    def __init__(self, path: str | Path, line: int | None, message: str, field: str | None = None):
        self.path = str(path)
        self.line = line
        self.field = field
        self.message = message
        where = f"{self.path}:{line}" if line is not None else self.path
        what = f"field '{field}': " if field else ""
        super().__init__(f"{where}: {what}{message}")

    def as_record(self) -> dict[str, object]:
        return {"path": self.path, "line": self.line, "field": self.field, "message": self.message}


@dataclass
class ErrorPolicy:
    """Raise on the first bad record, or (``skip_invalid``) log it, count it and go on."""

    skip_invalid: bool = False
    skipped: list[DataError] = field(default_factory=list)

    def handle(self, error: DataError) -> None:
        if not self.skip_invalid:
            raise error
        logger.warning("skipped invalid record: %s", error)
        self.skipped.append(error)
