"""The one configuration mechanism: dataclasses + YAML (``--config``) + CLI overrides, through TRL's parser.

Every job has ``make_parser()`` (built with :func:`make_parser` here) and ``main(argv)``; the config test asks each
job for its parser, so a YAML in ``configs/`` is checked against exactly the dataclasses its job reads.

Every parser made here explains itself: ``--config`` is in its help; options of a library's dataclass
(TrainingArguments and TRL's configs, hundreds of them) sit in their own section after veracity's, showing the
most used ones, with ``--help_all`` for every one; and a usage error is one line, ``error: <prog>: <why>``, exit 2:
an option written short (``--max_example``: long options are taken only in full), a recipe field that is no option
(named with its file and line, and the closest option), a ``base`` that names no file (with the path it resolved to).

A YAML may start from another one: ``base: r2vc_embedded.yaml`` (a path relative to the file) takes every value
of that file, and the keys written here replace them — so an ablation recipe lists only what it changes.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import yaml

BASE_KEY = "base"


def load_config_values(path: str | Path) -> dict[str, Any]:
    """The values of a YAML recipe with its ``base`` chain resolved (a cycle is an error naming the files)."""
    return {key: value for key, (value, _) in recipe_fields(path).items()}


def recipe_fields(path: str | Path, _seen: tuple[Path, ...] = ()) -> dict[str, tuple[Any, str]]:
    """``{field: (value, "file:line")}`` of a YAML recipe, its ``base`` chain resolved: each field with where it is
    set, so an error can name the file and line of a misspelt field even when it sits in a base recipe.

    Raises:
        DataError: a file that is missing, not YAML or not a mapping; a ``base`` that names no file (the path
            resolved relative to the recipe, as the error shows) or recipes that include each other.
    """
    from veracity.errors import DataError

    shown = Path(path)
    path = shown.resolve()
    if path in _seen:
        raise DataError(shown, None, f"recipes include each other: {[str(p) for p in (*_seen, path)]}",
                        field=BASE_KEY)
    try:
        node = yaml.compose(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise DataError(shown, None, f"cannot read the recipe ({error.strerror or error})") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        raise DataError(shown, mark.line + 1 if mark else None,
                        f"not YAML: {getattr(error, 'problem', None) or error}") from None
    if node is None:
        return {}
    if not isinstance(node, yaml.MappingNode):
        raise DataError(shown, node.start_mark.line + 1, "a recipe must be a mapping of field: value")
    values = yaml.safe_load(path.read_text(encoding="utf-8"))
    lines = {str(key.value): key.start_mark.line + 1 for key, _ in node.value}
    fields = {key: (value, f"{shown}:{lines.get(str(key))}") for key, value in values.items()}
    base = values.get(BASE_KEY)
    if base is None:
        return fields
    del fields[BASE_KEY]
    if not (path.parent / str(base)).is_file():
        raise DataError(shown, lines[BASE_KEY], f"no recipe {path.parent / str(base)} (a base path is relative to "
                                                "the recipe that names it)", field=BASE_KEY)
    return {**recipe_fields(os.path.normpath(shown.parent / str(base)), (*_seen, path)), **fields}


def unknown_field(name: str, where: str, known: Sequence[str]) -> str:
    """One line for a recipe field that is no option: where it is, and the closest option there is (difflib)."""
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = f"did you mean '{close[0]}'?" if close else "`--help` lists the options"
    return f"{where}: field '{name}': not an option of this command ({hint})"


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
    ``error:`` line and exit code 2, whatever went wrong. Sub-parsers are made of the same class, so they follow.

    Long options are taken only as written: argparse's default would read ``--max_example`` as ``--max_examples``
    (and a misspelt option as whichever one it happens to abbreviate)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments: "):
            message += self.closest_option(message.split()[2])
        self.exit(2, f"error: {self.prog}: {message}\n")

    def closest_option(self, given: str) -> str:
        """`` (did you mean --x?)`` for an unknown option close to one of this parser's; else nothing."""
        if not given.startswith("--"):
            return ""
        options = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
        close = difflib.get_close_matches(given.split("=")[0], options, n=1, cutoff=0.8)
        return f" (did you mean {close[0]}?)" if close else ""


def subcommand_help(prog: str, lines: dict[str, str]) -> str:
    """The help of a command with subcommands, laid out as every ``veracity <command> --help``: the usage, each
    subcommand with its one line ("" for what the bare command runs), and where each one's options are."""
    bare = f"{prog} [options]" if "" in lines else f"{prog} <subcommand> [options]"
    listed = [f"  {sub or '(none)':20} {line}" for sub, line in lines.items()]
    return "\n".join([f"usage: {bare}", "", "subcommands:", *listed, "",
                      f"`{prog} <subcommand> --help` lists its options"]) + "\n"


class SubcommandParser(OneLineErrors):
    """An argparse parser with sub-parsers whose ``--help`` is :func:`subcommand_help`'s, like every other command's
    (argparse's own layout wraps each subcommand's line under a brace list)."""

    bare: str | None = None  # what the bare command runs, if it runs anything

    def format_help(self) -> str:
        subparsers = next((a for a in self._actions if isinstance(a, argparse._SubParsersAction)), None)
        if subparsers is None:  # a sub-parser (made of this class too): its options, as argparse lists them
            return super().format_help()
        lines = {"": self.bare} if self.bare else {}
        lines.update({choice.dest: choice.help or "" for choice in subparsers._choices_actions})
        return subcommand_help(self.prog, lines)


class ConfigOption(argparse.Action):
    """``--config`` as argparse lists it in ``--help``. :func:`parse_config` takes the recipe out of argv before
    argparse parses it, so this action only runs where a parser is used without it."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        parser.error(f"{option_string}: a recipe is read by veracity.config.parse_config")


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
    parser.add_argument("--config", metavar="YAML", action=ConfigOption, default=argparse.SUPPRESS,
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
    if not known.config:
        return _parse(parser, rest)
    if not Path(known.config).is_file():
        parser.error(f"--config {known.config}: no such file")
    try:
        fields = recipe_fields(known.config)
    except ValueError as error:  # DataError: the file, line and field
        parser.error(str(error))
    options = [a.dest for a in parser._actions if a.dest not in ("help", "help_all", "config")]
    for name, (_, where) in fields.items():
        if name not in options and name != "env":  # TrlParser reads `env:` (environment variables) itself
            parser.error(unknown_field(name, where, options))
    # TrlParser reads one plain YAML: hand it the recipe with its base chain resolved.
    with tempfile.TemporaryDirectory() as tmp:
        merged = Path(tmp) / Path(known.config).name
        values = {name: value for name, (value, _) in fields.items()}
        merged.write_text(yaml.safe_dump(values, sort_keys=False), encoding="utf-8")
        return _parse(parser, ["--config", str(merged), *rest])


def _parse(parser: Any, args: list[str]) -> tuple[Any, ...]:
    """TrlParser's parse, a value a config class refuses turned into the parser's one-line error."""
    try:
        return parser.parse_args_and_config(args)
    except ValueError as error:
        parser.error(" ".join(str(error).split()))
