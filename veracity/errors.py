"""The errors a user can fix without a traceback, at the bottom of the layers so every one can raise them (the
configuration parser included); ``veracity.data_prep.errors`` names them too, beside the collector of bad records."""

from __future__ import annotations

from pathlib import Path


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
