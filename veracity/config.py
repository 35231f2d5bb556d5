"""The one configuration mechanism: dataclasses + YAML (``--config``) + CLI overrides, through TRL's parser."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def parse_config(types: tuple[type, ...], argv: Sequence[str] | None, prog: str) -> tuple[Any, ...]:
    """Parse ``argv`` (``--config x.yaml`` then ``--field value`` overrides) into instances of ``types``."""
    from trl import TrlParser  # light: TrlParser does not import torch

    parser = TrlParser(types, prog=prog)
    return parser.parse_args_and_config(list(argv) if argv is not None else None)
