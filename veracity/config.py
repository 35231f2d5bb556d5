"""The one configuration mechanism: dataclasses + YAML (``--config``) + CLI overrides, through TRL's parser.

Every job has ``make_parser()`` (built with :func:`make_parser` here) and ``main(argv)``; the config test asks each
job for its parser, so a YAML in ``configs/`` is checked against exactly the dataclasses its job reads.

Every parser made here explains itself: ``--config`` is in its help; options of a library's dataclass
(TrainingArguments and TRL's configs, hundreds of them) sit in their own section after veracity's, showing the
most used ones, with ``--help_all`` for every one; and a usage error is one line, ``error: <prog>: <why>``, exit 2.

A YAML may start from another one: ``base: r2vc_embedded.yaml`` (a path relative to the file) takes every value
of that file, and the keys written here replace them — so an ablation recipe lists only what it changes.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

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


# The library options `--help` still shows for a training job: what the shipped recipes in configs/train set.
COMMON_LIBRARY_OPTIONS = frozenset({
    "output_dir", "num_train_epochs", "max_steps", "per_device_train_batch_size", "per_device_eval_batch_size",
    "gradient_accumulation_steps", "learning_rate", "lr_scheduler_type", "warmup_steps", "weight_decay", "seed",
    "max_length", "beta", "bf16", "use_cpu", "gradient_checkpointing", "logging_steps", "eval_strategy", "eval_steps",
    "save_strategy", "save_steps", "save_total_limit", "load_best_model_at_end", "metric_for_best_model",
    "report_to", "dataloader_num_workers", "model_name_or_path", "dtype", "attn_implementation", "use_peft",
    "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules",
})
CONFIG_HELP = ("a YAML recipe (configs/…): its values replace the defaults below, options given here override it; "
               f"'{BASE_KEY}: other.yaml' in it starts from another recipe")


class OneLineErrors(argparse.ArgumentParser):
    """argparse prints the whole usage (dozens of lines for a job) before a usage error; the project's rule is one
    ``error:`` line and exit code 2, whatever went wrong. Sub-parsers are made of the same class, so they follow."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message}\n")


class AbbreviatedConfig(argparse.Action):
    """``--config`` as argparse sees it: only when abbreviated (``--conf``), since :func:`parse_config` hands
    TrlParser the full spelling, which TrlParser removes before parsing."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        parser.error(f"{option_string}: write --config in full")


class HelpAll(argparse.Action):
    """``--help_all``: the help with every option, the library options ``--help`` leaves out included."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        for action, help_text in parser.hidden_help.items():
            action.help = help_text
        parser.print_help()
        parser.exit()


def make_parser(types: tuple[type, ...], prog: str) -> Any:
    """A ``TrlParser`` over ``types`` (``--config x.yaml`` sets values, ``--field value`` overrides them)."""
    from trl import TrlParser  # light: TrlParser does not import torch

    class Parser(OneLineErrors, TrlParser):
        def parse_args_into_dataclasses(self, args: Any = None, return_remaining_strings: bool = False,
                                        **kwargs: Any) -> tuple[Any, ...]:
            # HfArgumentParser reports an unknown option as "Some specified arguments are not used by the
            # HfArgumentParser", after the dataclasses have checked their values; say it as argparse does, first.
            if not return_remaining_strings:
                unknown = self.parse_known_args(args)[1]
                if unknown:
                    self.error(f"unrecognized arguments: {' '.join(unknown)}")
            return super().parse_args_into_dataclasses(args, return_remaining_strings, **kwargs)

    parser = Parser(types, prog=prog)
    # TrlParser takes --config out of argv before argparse sees it, so argparse would not list it: this entry is
    # for the help (SUPPRESS: never set on the namespace, which would become an extra parsed "dataclass").
    parser.add_argument("--config", metavar="YAML", action=AbbreviatedConfig, default=argparse.SUPPRESS,
                        help=CONFIG_HELP)
    options = parser._optionals._group_actions  # argparse's list: moved to sit first, after -h
    options.insert(1, options.pop())
    for action in parser._actions:  # HfArgumentParser adds --no_<flag> for a flag on by default, without help
        if action.option_strings[:1] and action.option_strings[0].startswith("--no_") and not action.help:
            action.help = f"turn --{action.dest} off"
    _library_options_apart(parser, types)
    # argparse's usage line names every option (70 lines for a training job), the list below does that already
    required = [f"{a.option_strings[0]} {a.metavar or a.dest.upper()}" for a in parser._actions if a.required]
    parser.usage = " ".join(["%(prog)s", *required, "[--config YAML] [options]"])
    return parser


def _library_options_apart(parser: Any, types: tuple[type, ...]) -> None:
    """Move the options of dataclasses that are not veracity's into a section after veracity's own, hiding all but
    :data:`COMMON_LIBRARY_OPTIONS` from ``--help`` (``--help_all`` shows them): TrainingArguments alone brings
    over a hundred, which buried a recipe's own options."""
    ours = {f.name for t in types if t.__module__.startswith("veracity.") for f in dataclasses.fields(t)}
    library = [a for a in parser._optionals._group_actions
               if a.dest not in ours and a.dest not in ("help", "config")]
    parser.hidden_help = {}
    if not library:
        return
    names = ", ".join(t.__name__ for t in types if not t.__module__.startswith("veracity."))
    group = parser.add_argument_group(f"{names} options (the most used; --help_all lists all "
                                      f"{len({a.dest for a in library})})")
    for action in library:
        parser._optionals._group_actions.remove(action)
        group._group_actions.append(action)
        if action.dest not in COMMON_LIBRARY_OPTIONS:
            parser.hidden_help[action] = action.help
            action.help = argparse.SUPPRESS
    parser.add_argument("--help_all", action=HelpAll, help="show the help with every option, and exit")


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
    if known.config:
        if not Path(known.config).is_file():
            parser.error(f"--config {known.config}: no such file")
        args = ["--config", known.config, *rest]  # `--config=x.yaml` too: TrlParser only finds `--config x.yaml`
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
