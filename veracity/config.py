"""The one configuration mechanism: dataclasses + YAML (``--config``) + CLI overrides, through TRL's parser.

Every job has ``make_parser()`` (built with :func:`make_parser` here) and ``main(argv)``; the config test asks each
job for its parser, so a YAML in ``configs/`` is checked against exactly the dataclasses its job reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def make_parser(types: tuple[type, ...], prog: str) -> Any:
    """A ``TrlParser`` over ``types`` (``--config x.yaml`` sets values, ``--field value`` overrides them)."""
    from trl import TrlParser  # light: TrlParser does not import torch

    return TrlParser(types, prog=prog)


def parse_config(types: tuple[type, ...] | Any, argv: Sequence[str] | None,
                 prog: str | None = None) -> tuple[Any, ...]:
    """Parse ``argv`` into instances of ``types`` (or with a parser from :func:`make_parser`)."""
    parser = make_parser(types, prog or "veracity") if isinstance(types, tuple) else types
    return parser.parse_args_and_config(list(argv) if argv is not None else None)
