"""The documentation holds: every relative link and ``docs/…#anchor`` resolves, and every command in a fenced
``bash`` block of README.md and docs/ is one the project runs.

Links: ``[text](target)`` and images in README.md and docs/**/*.md — the file must exist and a ``#fragment`` must be
the GitHub slug of one of its headings. Code (``*.py``, ``*.sh``, ``*.yaml``) cites pages as
``docs/<page>.md#<anchor>``: each must resolve the same way. Commands: a ``veracity …`` line (or
``.venv/bin/veracity``, after ``VAR=value`` assignments, through ``\\`` continuations, ``&&`` chains and ``#
comments``; also ``accelerate launch … -m veracity.cli …``) is parsed with the parser of the job the CLI dispatches
to, without running it; a ``--config`` recipe must exist and hold only fields of that job. ``bash X.sh`` and ``python
X.py`` name files that exist. The config tables of the pipeline pages name only options of their command. A command
that needs more than a fresh clone's CPU — a GPU, a server, a trained model — says so with a ``# needs: …`` comment
(docs/index.md#what-a-command-needs). Each test reports every problem it finds at once, as ``file:line``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import re
import shlex
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

from veracity import cli
from veracity.config import load_config_values

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted([REPO / "README.md", *REPO.glob("docs/**/*.md")])
CODE_FOLDERS = ("bench", "configs", "data_prep", "infer", "models", "scripts", "tests", "train", "veracity")
CODE_SUFFIXES = (".py", ".sh", ".yaml", ".yml")
SHELL_FENCES = ("bash", "sh", "shell")
OPERATORS = {"&&", "||", ";", "|"}
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
DOCS_CITATION = re.compile(r"docs/[\w./-]+\.md(?:#[\w-]+)?")


def rel(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name


# --- Markdown: fences, headings, slugs ------------------------------------------------------------------------

def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of the lines outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        marker = re.match(r"^\s*(`{3,}|~{3,})", line)
        if marker and (fence is None or marker.group(1)[0] == fence[0] and len(marker.group(1)) >= len(fence)):
            fence = None if fence else marker.group(1)
            continue
        if fence is None:
            yield number, line


def shell_blocks(text: str) -> Iterator[tuple[int, list[str]]]:
    """``(line number of the first line, lines)`` of each fenced bash / sh / shell block."""
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = re.match(r"^\s*(`{3,}|~{3,})\s*(\w*)", lines[index])
        if not opening:
            index += 1
            continue
        fence, language = opening.group(1), opening.group(2)
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        if language in SHELL_FENCES:
            yield index + 2, lines[index + 1:end]
        index = end + 1


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text without Markdown, lower case, punctuation dropped (letters,
    digits, ``_``, ``-`` and spaces stay), spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())  # a link or image reads as its text
    text = re.sub(r"<[^>]+>", "", text).lower()
    return "".join(c for c in text if c.isalnum() or c in "-_ ").replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every heading anchor of a Markdown page (a repeated slug gets ``-1``, ``-2``, … as on GitHub)."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8")):
        heading = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        slug = github_slug(heading.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return frozenset(found)


def target_problem(target: str, base: Path) -> str | None:
    """Why a relative link ``target`` from a file in ``base`` does not resolve (None when it does)."""
    path_part, _, fragment = target.partition("#")
    path = (base / path_part).resolve() if path_part else None
    if path is not None and not path.exists():
        return f"{target}: no such file"
    page = path or base
    if fragment and page.suffix == ".md" and fragment not in anchors(page):
        return f"{target}: {rel(page)} has no heading with anchor #{fragment}"
    return None


def test_every_relative_link_in_the_docs_resolves() -> None:
    problems = []
    for page in PAGES:
        for number, line in prose_lines(page.read_text(encoding="utf-8")):
            for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):  # a link inside inline code is not a link
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                if target.startswith("#"):
                    problem = None if target[1:] in anchors(page) else f"{target}: no heading with that anchor here"
                else:
                    problem = target_problem(target, page.parent)
                if problem:
                    problems.append(f"{rel(page)}:{number}: {problem}")
    assert not problems, "broken links:\n" + "\n".join(problems)


PAGE_LINK = re.compile(r"\[`?([\w./-]+\.md)(?:#[\w-]+)?`?\]\(([^)#\s]*)")


def test_a_link_named_after_a_page_leads_to_that_page() -> None:
    """``[results.md](experiment-log.md#…)`` reads as one page and opens another (issue #63)."""
    problems = []
    for page in PAGES:
        for number, line in prose_lines(page.read_text(encoding="utf-8")):
            for text, target in PAGE_LINK.findall(line):
                if target and Path(text).name != Path(target).name:
                    problems.append(f"{rel(page)}:{number}: [{text}] leads to {target}")
    assert not problems, "links whose text names another page:\n" + "\n".join(problems)


def code_files() -> Iterator[Path]:
    for folder in CODE_FOLDERS:
        for path in sorted((REPO / folder).rglob("*")):
            if path.suffix in CODE_SUFFIXES and path.is_file() and "__pycache__" not in path.parts:
                yield path


def test_every_docs_page_cited_in_code_exists_with_its_anchor() -> None:
    problems, cited = [], 0
    for path in code_files():
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for citation in DOCS_CITATION.findall(line):
                cited += 1
                problem = target_problem(citation, REPO)
                if problem:
                    problems.append(f"{rel(path)}:{number}: {problem}")
    assert not problems, "docs citations that do not resolve:\n" + "\n".join(problems)
    assert cited > 20, f"only {cited} docs/… citations found in the code: is the scan looking in the right place?"


# --- commands in fenced bash blocks ---------------------------------------------------------------------------

def logical_lines(first: int, lines: list[str]) -> Iterator[tuple[int, str]]:
    """``(line number, command line)`` with ``\\`` continuations joined; blank and comment-only lines skipped."""
    pending, start = "", first
    for offset, line in enumerate(lines):
        if not pending:
            start = first + offset
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        whole, pending = pending + line, ""
        if whole.strip() and not whole.lstrip().startswith("#"):
            yield start, whole


def segments(line: str) -> list[list[str]]:
    """The simple commands of a shell line (split at ``&&``, ``||``, ``;``, ``|``; comments dropped), each
    without its leading ``VAR=value`` assignments."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars="&|;")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    parts: list[list[str]] = [[]]
    for token in lexer:
        if token in OPERATORS:
            parts.append([])
        else:
            parts[-1].append(token)
    cleaned = []
    for part in parts:
        while part and ASSIGNMENT.match(part[0]):
            part = part[1:]
        if part:
            cleaned.append(part)
    return cleaned


class ParseError(Exception):
    pass


def _raise(message: str) -> None:
    raise ParseError(message)


def quiet(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` (and its sub-parsers) raising ParseError instead of printing and exiting."""
    parser.error = _raise  # type: ignore[method-assign]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                quiet(sub)
    return parser


@cache
def job_module(name: str) -> Any:
    return importlib.import_module(name)


def veracity_problem(args: list[str]) -> str | None:
    """Why ``veracity ARGS`` is not a command the CLI runs (None when its parser accepts it): the dispatch of
    :func:`veracity.cli.main`, then the job's own parser, ``--config`` recipes included."""
    problem = parse_veracity(args)
    return problem if isinstance(problem, str) else None


def parse_veracity(args: list[str]) -> str | tuple[argparse.Namespace, set[str]]:
    """``veracity ARGS`` parsed by the job's own parser, as :func:`veracity_problem` checks it: the options' values
    (a recipe's values, then the command line's) and the names of those the recipe or the command line set, or why
    the command is not one the CLI runs."""
    args = [a for a in args if a != "--verbose"]
    if not args or args[0] in ("-h", "--help"):
        return argparse.Namespace(), set()
    command, rest = args[0], args[1:]
    if command not in cli.COMMANDS:
        return f"unknown command {command!r}"
    module_name = cli.COMMANDS[command][0]
    if module_name in cli.SUBCOMMANDS:
        choices = cli.SUBCOMMANDS[module_name]
        if rest and rest[0] in choices:
            module_name, rest = choices[rest[0]][0], rest[1:]
        elif "" in choices:
            module_name = choices[""][0]
        else:
            return f"`veracity {command}` needs one of {sorted(choices)}"
    parser = quiet(job_module(module_name).make_parser())
    given: set[str] = set()
    if "--config" in rest:
        at = rest.index("--config")
        if at + 1 >= len(rest):
            return "--config without a file"
        recipe, rest = rest[at + 1], rest[:at] + rest[at + 2:]
        if not (REPO / recipe).is_file():
            return f"--config {recipe}: no such file"
        values = load_config_values(REPO / recipe)
        if hasattr(parser, "dataclass_types"):
            fields = {f.name for t in parser.dataclass_types for f in dataclasses.fields(t)}
        else:
            fields = {a.dest for a in parser._actions}
        unknown = sorted(set(values) - fields)
        if unknown:
            return f"--config {recipe}: keys that are not options of this job: {unknown}"
        parser.set_defaults_with_config(**values)  # as TrlParser does: a recipe's value makes a field optional
        given |= set(values)
    given |= {a.dest for a in parser._actions for o in a.option_strings if o in rest}
    try:
        return argparse.ArgumentParser.parse_args(parser, rest), given  # parse only: nothing is built or run
    except ParseError as error:
        return str(error)


def command_problem(part: list[str]) -> str | None:
    """Why one simple command of a docs block is wrong (None when it is right, or not the project's)."""
    program = part[0]
    if program in ("veracity", ".venv/bin/veracity"):
        return veracity_problem(part[1:])
    if program == "bash" and len(part) > 1:
        return None if (REPO / part[1]).is_file() else f"{part[1]}: no such script"
    if program.endswith("python") and len(part) > 1 and part[1].endswith(".py"):
        return None if (REPO / part[1]).is_file() else f"{part[1]}: no such file"
    if program == "accelerate" and "-m" in part and part[part.index("-m") + 1:][:1] == ["veracity.cli"]:
        if "--config_file" in part and not (REPO / part[part.index("--config_file") + 1]).is_file():
            return f"{part[part.index('--config_file') + 1]}: no such accelerate config"
        return veracity_problem(part[part.index("-m") + 2:])
    return None


def docs_commands() -> Iterator[tuple[str, str, list[str]]]:
    """``(file:line, the line, one simple command)`` for every command of every fenced shell block."""
    for page in PAGES:
        for first, lines in shell_blocks(page.read_text(encoding="utf-8")):
            for number, line in logical_lines(first, lines):
                for part in segments(line):
                    yield f"{rel(page)}:{number}", line.strip(), part


def test_every_command_in_the_docs_is_a_real_command_with_real_options() -> None:
    problems, veracity_commands = [], 0
    for where, line, part in docs_commands():
        veracity_commands += part[0].endswith("veracity") or "veracity.cli" in part
        problem = command_problem(part)
        if problem:
            problems.append(f"{where}: {' '.join(line.split())[:100]}\n    {problem}")
    assert not problems, f"{len(problems)} bad command(s) in the docs:\n" + "\n".join(problems)
    assert veracity_commands > 40, f"only {veracity_commands} veracity commands found: is the block scan broken?"


def test_the_checks_catch_what_they_are_for(tmp_path: Path) -> None:
    """The checkers themselves, on made-up input: a wrong option, a wrong sub-command, a recipe key that is no
    field, a continuation and a chain, a slug with punctuation and a repeated heading."""
    assert veracity_problem(["infer", "r2vc", "--config", "configs/pipelines/r2vc_embedded.yaml"]) is None
    assert "unrecognized arguments" in veracity_problem(["infer", "r2vc", "--no_such_option", "1"])
    assert "needs one of" in veracity_problem(["infer", "nothing"])
    assert "no such file" in veracity_problem(["train", "sft", "--config", "configs/train/missing.yaml"])
    assert veracity_problem(["models", "resolve", "not_a_role"])  # a sub-parser's choice
    recipe = tmp_path / "bad.yaml"  # an absolute path: REPO / it is itself
    recipe.write_text("max_examples: 3\nnot_a_field: 1\n")
    assert "not_a_field" in veracity_problem(["infer", "uts", "--config", str(recipe)])
    lines = ["OMP_NUM_THREADS=2 veracity prep && \\", "  veracity eval r2vc --predictions p  # a comment"]
    [(number, joined)] = logical_lines(7, lines)
    assert number == 7 and [p[:2] for p in segments(joined)] == [["veracity", "prep"], ["veracity", "eval"]]
    assert github_slug("SFT and DPO (`train/`, α*)") == "sft-and-dpo-train-α"
    page = tmp_path / "p.md"
    page.write_text("# A\n\n```bash\n# not a heading\n```\n\n## A\n")
    assert anchors(page) == {"a", "a-1"}


# --- what a documented command needs beyond a fresh clone ------------------------------------------------------

NEEDS_MARK = re.compile(r"(?:^|\s)#\s*needs:\s*([a-z][a-z ,]*[a-z])")
NEEDS = ("gpu", "server", "trained model")
OUTPUT_OPTIONS = ("output_dir", "calibrator_dir")  # where a command writes: what the commands after it may read
TRAINED = "runs/train/"  # what `veracity train …` writes: a fresh clone has none of it
# Unmarked commands of README.md, which this session does not edit: the marker its own session adds
# (issue #63's report names the line). Remove an entry once the README line carries its marker.
def marked_needs(text: str) -> set[str]:
    """The needs a ``# needs: gpu, server, trained model`` comment names (any of the three)."""
    found = NEEDS_MARK.search(text)
    return {kind.strip() for kind in found.group(1).split(",")} if found else set()


def command_needs(part: list[str], parsed: argparse.Namespace, given: set[str], made: list[str]) -> set[str]:
    """What a parsed ``veracity`` command needs that a fresh clone on a CPU lacks: a CUDA GPU (a cuda device, the
    vLLM engine outside its CPU environment, a bf16 training recipe that is not a dry run), a server (an
    OpenAI-compatible one, a Ray cluster), or a trained model (a ``runs/train/…`` path that its recipe or command line
    names — a default is the job's own to fall back from — and no earlier command of its block writes)."""
    values = vars(parsed)
    needs = set()
    if str(values.get("device") or "").startswith("cuda") or values.get("num_gpus_per_worker"):
        needs.add("gpu")
    if values.get("engine") == "vllm" and not part[0].startswith(".venv-vllm/"):
        needs.add("gpu")
    if values.get("bf16") is True and not values.get("dry_run"):
        needs.add("gpu")
    if values.get("engine") == "openai" or values.get("ray_address"):
        needs.add("server")
    for name, value in values.items():
        if name not in given or name in OUTPUT_OPTIONS or (name == "model" and values.get("use_generator") is False):
            continue  # where it writes; the generator of a run that has none
        for path in value if isinstance(value, list) else [value]:
            if (isinstance(path, str) and path.startswith(TRAINED)
                    and not any(path == m or path.startswith(m.rstrip("/") + "/") for m in made)):
                needs.add("trained model")
    return needs


def accelerate_needs(part: list[str]) -> set[str]:
    """``accelerate launch --config_file X``: a GPU when its config does not set ``use_cpu: true``."""
    if "--config_file" not in part:
        return set()
    config = load_config_values(REPO / part[part.index("--config_file") + 1])
    return set() if config.get("use_cpu") else {"gpu"}


def needs_problems(page: Path) -> Iterator[str]:
    """Every veracity command of a page's shell blocks that needs more than a fresh clone and does not say so, as
    ``file:line: …``. A ``# needs: …`` comment on a command's line marks it; on a line of its own, every command after
    it in the block."""
    for first, lines in shell_blocks(page.read_text(encoding="utf-8")):
        block_marks = [(first + k, marked_needs(line)) for k, line in enumerate(lines)
                       if line.lstrip().startswith("#")]
        made: list[str] = []
        for number, line in logical_lines(first, lines):
            marked = marked_needs(line).union(*(kinds for at, kinds in block_marks if at < number))
            if marked - set(NEEDS):
                yield f"{rel(page)}:{number}: `# needs:` names {sorted(marked - set(NEEDS))}; it takes {list(NEEDS)}"
            for part in segments(line):
                if part[0] == "accelerate" and "veracity.cli" in part:
                    needs, args = accelerate_needs(part), part[part.index("-m") + 2:]
                elif part[0] in ("veracity", ".venv/bin/veracity", ".venv-vllm/bin/veracity"):
                    needs, args = set(), part[1:]
                else:
                    continue
                parsed = parse_veracity(args)
                if isinstance(parsed, str):
                    continue  # a command that does not parse is the other test's to report
                parsed, given = parsed
                needs |= command_needs(part, parsed, given, made)
                made += [v for k in OUTPUT_OPTIONS if isinstance(v := getattr(parsed, k, None), str)]
                if needs - marked:
                    yield (f"{rel(page)}:{number}: {' '.join(line.split())[:90]}\n    needs {sorted(needs - marked)}: "
                           f"mark it `# needs: {', '.join(sorted(needs))}`")


def test_every_command_that_needs_more_than_a_fresh_clone_says_so() -> None:
    """The commands of README.md and docs/ run on a fresh clone's CPU as written (after setup and `veracity prep`),
    or say what they need: `# needs: gpu`, `# needs: server`, `# needs: trained model` (docs/index.md)."""
    problems = [problem for page in PAGES for problem in needs_problems(page)]
    assert not problems, f"{len(problems)} command(s) that need more than they say:\n" + "\n".join(problems)


def test_the_needs_check_catches_what_it_is_for(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("\n".join([
        "```bash",
        "veracity infer r2vc --config configs/pipelines/r2vc_real.yaml",  # vLLM and the 8B generator, unmarked
        "veracity infer generate --input i.jsonl --output_dir o --engine openai  # needs: server",
        "veracity train calibrator --config configs/train/calibrator_r2vc_embedded.yaml",  # the SFT generator
        "veracity train sft --config configs/train/sft_lora_nemotron8b.yaml --dry_run true",  # a dry run: CPU
        "# needs: gpu",
        "veracity train sft --config configs/train/sft_lora_nemotron8b.yaml",
        "```",
        "```bash",
        "veracity train sft --config configs/train/sft_lora_smollm2_cpu.yaml",
        "veracity train merge --adapter runs/train/sft_smollm2/adapter --output_dir runs/train/sft_smollm2/merged",
        "veracity infer r2vc --config configs/pipelines/r2vc_embedded.yaml --calibrator none",  # made above
        "veracity infer r2vc --config configs/pipelines/r2vc_nli_only.yaml",  # its calibrator: made nowhere",
        "veracity prep  # needs: a lot of patience",
        "```"]) + "\n")
    found = [problem.split("\n")[0].split(": ", 1)[0] + " " + problem.split("\n    needs ")[1].split(":")[0]
             for problem in needs_problems(page) if "\n    needs " in problem]
    assert found == [f"{page.name}:2 ['gpu', 'trained model']", f"{page.name}:4 ['trained model']",
                     f"{page.name}:13 ['trained model']"]
    assert [p for p in needs_problems(page) if "it takes" in p] == [
        f"{page.name}:14: `# needs:` names ['a lot of patience']; it takes ['gpu', 'server', 'trained model']"]


# page → the command whose options its "| field | default | what it sets |" tables list
FIELD_TABLES = {"docs/pipelines/r2vc.md": ["infer", "r2vc"], "docs/pipelines/aic.md": ["infer", "aic"],
                "docs/pipelines/sciclaimseekers.md": ["infer", "sciclaim"], "docs/pipelines/uts.md": ["infer", "uts"],
                "docs/engines.md": ["infer", "generate"]}


def test_every_field_a_config_table_names_is_an_option_of_its_command() -> None:
    problems, named = [], 0
    for page, command in FIELD_TABLES.items():
        module = cli.SUBCOMMANDS[cli.COMMANDS[command[0]][0]][command[1]][0]
        options = {a.dest for a in job_module(module).make_parser()._actions}
        in_table = False
        for number, line in enumerate((REPO / page).read_text(encoding="utf-8").splitlines(), 1):
            if line.strip() == "| field | default | what it sets |":
                in_table = True
            elif not line.startswith("|"):
                in_table = False
            elif in_table and (cell := re.match(r"^\| `(\w+)` \|", line)):
                named += 1
                if cell.group(1) not in options:
                    problems.append(f"{page}:{number}: `{cell.group(1)}` is no option of veracity {' '.join(command)}")
    assert not problems, "config tables naming fields that do not exist:\n" + "\n".join(problems)
    assert named > 100, f"only {named} fields found in the config tables"


def test_results_holds_current_tables_only() -> None:
    """docs/results.md stays a page of current tables (issue 46: at most 400 lines); what it outgrows moves to
    docs/experiment-log.md under the same heading."""
    lines = (Path(__file__).parents[1] / "docs" / "results.md").read_text().splitlines()
    assert len(lines) <= 400, f"docs/results.md has {len(lines)} lines: move older tables to experiment-log.md"
