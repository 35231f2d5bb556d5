"""Input errors that name the file, line and field, and the collector behind ``--skip-invalid``."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from veracity.errors import DataError, InputError  # noqa: F401 - the errors every layer raises, named here too

logger = logging.getLogger(__name__)


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
