"""The one configuration mechanism: dataclasses + YAML (``--config``) + CLI overrides, through TRL's parser.

Every job has ``make_parser()`` (built with :func:`make_parser` here) and ``main(argv)``; the config test asks each
job for its parser, so a YAML in ``configs/`` is checked against exactly the dataclasses its job reads.

A YAML may start from another one: ``base: r2vc_embedded.yaml`` (a path relative to the file) takes every value
of that file, and the keys written here replace them — so an ablation recipe lists only what it changes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

BASE_KEY = "base"


def load_config_values(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The values of a YAML recipe with its ``base`` chain resolved (a cycle is an error naming the files)."""
    path = Path(path).resolve()
    if path in _seen:
        raise ValueError(f"{path}: field '{BASE_KEY}': recipes include each other: {[str(p) for p in _seen]}")
    values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(values, dict):
        raise ValueError(f"{path}: a recipe must be a mapping of option: value")
    base = values.pop(BASE_KEY, None)
    if base is None:
        return values
    return {**load_config_values(path.parent / str(base), (*_seen, path)), **values}


def make_parser(types: tuple[type, ...], prog: str) -> Any:
    """A ``TrlParser`` over ``types`` (``--config x.yaml`` sets values, ``--field value`` overrides them)."""
    from trl import TrlParser  # light: TrlParser does not import torch

    return TrlParser(types, prog=prog)


def parse_config(types: tuple[type, ...] | Any, argv: Sequence[str] | None,
                 prog: str | None = None) -> tuple[Any, ...]:
    """Parse ``argv`` into instances of ``types`` (or with a parser from :func:`make_parser`).

    A value a config class refuses (its ``__post_init__`` raises ValueError) is a usage error: the parser's
    one-line message and exit code 2, before anything is written.
    """
    parser = make_parser(types, prog or "veracity") if isinstance(types, tuple) else types
    args = list(sys.argv[1:] if argv is None else argv)
    peek = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    peek.add_argument("--config")
    known, rest = peek.parse_known_args(args)
    try:
        if not known.config or BASE_KEY not in (yaml.safe_load(Path(known.config).read_text(encoding="utf-8")) or {}):
            return parser.parse_args_and_config(args)
        # TrlParser reads one plain YAML: hand it the recipe with its base chain resolved.
        with tempfile.TemporaryDirectory() as tmp:
            merged = Path(tmp) / Path(known.config).name
            merged.write_text(yaml.safe_dump(load_config_values(known.config), sort_keys=False), encoding="utf-8")
            return parser.parse_args_and_config(["--config", str(merged), *rest])
    except ValueError as error:
        parser.error(" ".join(str(error).split()))
