"""Typed access to one raw row, with errors that name the file, line and field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from veracity.data_prep.errors import DataError


@dataclass
class RawRow:
    """One raw record and where it came from (``origin`` is ``relative/path:line``)."""

    path: str
    line: int
    data: dict[str, Any]
    origin: str
    output: str = ""  # the output it was read for (where counters such as normalized labels go)

    def error(self, message: str, field: str | None = None) -> DataError:
        return DataError(self.path, self.line, message, field=field)

    def has(self, name: str) -> bool:
        return name in self.data

    def str(self, name: str) -> str:
        """A required string field (may be empty: callers decide what empty means)."""
        if name not in self.data:
            raise self.error("missing", field=name)
        value = self.data[name]
        if not isinstance(value, str):
            raise self.error(f"expected a string, got {type(value).__name__} ({value!r:.60})", field=name)
        return value

    def opt_str(self, name: str) -> str:
        """An optional string field: missing or null reads as ''."""
        value = self.data.get(name)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise self.error(f"expected a string or null, got {type(value).__name__}", field=name)
        return value

    def id(self, name: str) -> str:
        """A required identifier: a string or an integer, returned as a string."""
        if name not in self.data:
            raise self.error("missing", field=name)
        value = self.data[name]
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise self.error(f"expected a string or integer id, got {type(value).__name__}", field=name)
        if value == "":
            raise self.error("empty id", field=name)
        return str(value)

    def list(self, name: str, *, required: bool = True) -> list[Any]:
        if name not in self.data or self.data[name] is None:
            if required:
                raise self.error("missing", field=name)
            return []
        value = self.data[name]
        if not isinstance(value, list):
            raise self.error(f"expected a list, got {type(value).__name__}", field=name)
        return value
