"""The CLI explains itself: every command's help lists its subcommands or its options (each with help text,
``--config`` among them), and every bad path or unknown option ends in one ``error:`` line with exit code 2."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path
from typing import Any

import pytest

from veracity import cli

REPO = Path(__file__).resolve().parents[1]
MISSING = "/nonexistent/veracity-test"


def subcommands() -> list[tuple[str, str, str]]:
    """``(command, subcommand, module)`` for everything ``veracity`` dispatches to (subcommand "" for none)."""
    found = []
    for command, (module, _) in cli.COMMANDS.items():
        for sub, (sub_module, _) in cli.SUBCOMMANDS.get(module, {"": (module, "")}).items():
            found.append((command, sub, sub_module))
    return found


def argv_of(command: str, sub: str) -> list[str]:
    return [command, sub] if sub else [command]


def parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """A parser and its argparse sub-parsers (``veracity models resolve`` …), depth first."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += parsers(sub)
    return found


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[Any, str, str]:
    """``veracity ARGV`` in this process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    try:
        code = cli.main(argv)
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


def test_every_option_of_every_command_has_help_and_jobs_take_config() -> None:
    problems = []
    for command, sub, module in subcommands():
        parser = importlib.import_module(module).make_parser()
        for each in parsers(parser):
            hidden = getattr(each, "hidden_help", {})  # library options --help leaves to --help_all
            for action in each._actions:
                help_text = hidden.get(action, action.help)
                if not isinstance(action, argparse._SubParsersAction) and not (help_text or "").strip():
                    problems.append(f"veracity {command} {sub}: {action.option_strings or action.dest} has no help")
        options = {o for a in parser._actions for o in a.option_strings}
        if hasattr(parser, "dataclass_types") and "--config" not in options:  # `models` reads no recipe
            problems.append(f"veracity {command} {sub}: no --config in its help")
        if hasattr(parser, "dataclass_types") and "--config" not in parser.format_help():
            problems.append(f"veracity {command} {sub}: --config hidden from --help")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("command", [c for c, (m, _) in cli.COMMANDS.items() if m in cli.SUBCOMMANDS])
def test_command_help_lists_each_subcommand_with_its_line(command: str, capsys) -> None:
    code, out, err = run([command, "--help"], capsys)
    assert code in (0, None) and not err
    for sub, (_, line) in cli.SUBCOMMANDS[cli.COMMANDS[command][0]].items():
        assert f"  {sub or '(none)':20} {line}\n" in out
    if command == "prep":  # the bare command's own options follow
        assert "--data_root" in out


def test_top_level_and_infer_help(capsys) -> None:
    _, out, _ = run(["--help"], capsys)
    assert all(f"  {command:8} {line}" in out for command, (_, line) in cli.COMMANDS.items())
    _, out, _ = run(["infer", "--help"], capsys)
    listed = [line.split()[0] for line in out.split("subcommands:\n")[1].split("\n\n")[0].splitlines()]
    assert listed == ["r2vc", "aic", "sciclaim", "uts", "ablate", "generate"]
    code, out, err = run(["models", "--help"], capsys)  # laid out as every other command's subcommands
    listed = [line.split()[0] for line in out.split("subcommands:\n")[1].split("\n\n")[0].splitlines()]
    assert code == 0 and not err and listed == ["(none)", "list", "resolve", "install", "export-onnx", "card"]
    assert out.startswith("usage: veracity models [options]\n") and "  resolve              print the local" in out


def test_training_help_shows_recipe_options_first_and_the_rest_behind_help_all(capsys) -> None:
    code, short, _ = run(["train", "sft", "--help"], capsys)
    assert code == 0
    ours, library = short.split("SFTConfig, ModelConfig options (the most used; --help_all lists all ")
    assert "--train_file" in ours and "--dry_run" in ours and "--learning_rate" not in ours
    assert "--learning_rate" in library and "--lora_r" in library and "--adam_beta1" not in short
    code, full, _ = run(["train", "sft", "--help_all"], capsys)
    assert code == 0 and "--adam_beta1" in full and "--train_file" in full
    assert len(short.splitlines()) < len(full.splitlines()) / 3
    code, _, err = run(["train", "nli", "--help"], capsys)
    assert code == 0 and not err


# For each subcommand, a path option pointing nowhere (with what else it needs to reach that path).
MISSING_PATHS: dict[tuple[str, str], list[str]] = {
    ("prep", ""): ["--data_root", MISSING],
    ("prep", "training-sets"): ["--prepared_dir", MISSING],
    ("prep", "sciclaim-tasks"): ["--prepared_dir", MISSING],
    ("prep", "sciclaim-collection"): ["--pickle", MISSING, "--output", "c.jsonl", "--trust_pickle", "true"],
    ("models", ""): ["card", MISSING, "--section", "title", MISSING],
    ("demo", ""): ["--data_root", MISSING],
    ("index", "build"): ["--corpus", MISSING, "--output_dir", "index"],
    ("index", "search"): ["--index_dir", MISSING, "--query", "x"],
    ("train", "sft"): ["--config", f"{REPO}/configs/train/sft_lora_smollm2_cpu.yaml", "--train_file", MISSING],
    ("train", "dpo"): ["--config", f"{REPO}/configs/train/dpo_lora_smollm2_cpu.yaml", "--sft_adapter", MISSING],
    ("train", "merge"): ["--adapter", MISSING, "--output_dir", "merged"],
    ("train", "nli"): ["--prepared_dir", MISSING],
    ("train", "calibrator"): ["--prepared_dir", MISSING],
    ("train", "reranker"): ["--prepared_dir", MISSING],
    ("infer", "r2vc"): ["--prepared_dir", MISSING],
    ("infer", "aic"): ["--prepared_dir", MISSING],
    ("infer", "sciclaim"): ["--posts", MISSING, "--collection", MISSING],
    ("infer", "uts"): ["--prepared_dir", MISSING],
    ("infer", "ablate"): ["--config", MISSING],
    ("infer", "generate"): ["--input", MISSING, "--output_dir", "out"],
    ("eval", "retrieval"): ["--prepared_dir", MISSING],
    ("eval", "checkpoint"): ["--prepared_dir", MISSING],
    ("eval", "checkpoints"): [MISSING],
    ("eval", "averitec"): ["--predictions", MISSING, "--gold", MISSING],
    ("eval", "r2vc"): ["--predictions", MISSING, "--output_dir", "out"],
    ("eval", "sciclaim"): ["--submission", MISSING, "--gold", MISSING, "--output_dir", "out"],
    ("eval", "m4"): ["--items", MISSING, "--reference_as_article", "true"],
    ("report", ""): [MISSING],
}
SUBCOMMANDS = [(command, sub) for command, sub, _ in subcommands()]


def test_every_subcommand_has_a_missing_path_case() -> None:
    assert set(MISSING_PATHS) == set(SUBCOMMANDS)


def _one_error_line(code: Any, err: str) -> str:
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.mark.parametrize(("command", "sub"), SUBCOMMANDS, ids=lambda x: x or "-")
def test_missing_path_is_one_error_line_exit_2(command: str, sub: str, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)  # whatever a job would write by default lands here
    code, _, err = run(argv_of(command, sub) + MISSING_PATHS[command, sub], capsys)
    assert MISSING in _one_error_line(code, err)


@pytest.mark.parametrize(("command", "sub"), SUBCOMMANDS, ids=lambda x: x or "-")
def test_unknown_option_is_one_error_line_exit_2(command: str, sub: str, tmp_path: Path, monkeypatch,
                                                 capsys) -> None:
    monkeypatch.chdir(tmp_path)
    # the options it requires given, so that only the unknown one is wrong (a missing recipe is named first)
    given = [] if MISSING_PATHS[command, sub] == ["--config", MISSING] else MISSING_PATHS[command, sub]
    code, _, err = run(argv_of(command, sub) + given + ["--bogus", "1"], capsys)
    assert _one_error_line(code, err).endswith("unrecognized arguments: --bogus 1")


@pytest.mark.parametrize("argv", [
    ["train", "nli", "--init", MISSING, "--claim_sources", "vitaminc", "--eval_sources", "vitaminc",
     "--use_cpu", "true", "--report_to", "none"],
    ["eval", "checkpoint", "--kind", "nli", "--nli_model", MISSING, "--sources", "vitaminc"],
    ["index", "build", "--corpus", "corpus.jsonl", "--embedder", MISSING],
], ids=["train-nli-init", "eval-checkpoint-nli-model", "index-build-embedder"])
def test_a_model_path_that_is_not_there_is_one_error_line(argv: list[str], prepared_dir: Path, tmp_path: Path,
                                                          monkeypatch, capsys) -> None:
    """A model option naming no folder is the user's to fix: one ``error:`` line naming it, exit status 2, and the
    run folder not written (the models are resolved before it is)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus.jsonl").write_text('{"doc_id": "a", "text": "The bridge is 120 m long."}\n')
    out = tmp_path / "out"
    code, _, err = run(argv + ["--prepared_dir", str(prepared_dir)] * (argv[0] != "index")
                       + ["--output_dir", str(out)], capsys)
    assert MISSING in _one_error_line(code, err)
    assert not out.exists()


def test_the_issues_two_commands(capsys) -> None:
    code, _, err = run(["index", "search", "--index_dir", "/nonexistent", "--query", "x"], capsys)
    assert _one_error_line(code, err) == "error: /nonexistent is not a complete index (no index_meta.json)"
    code, _, err = run(["infer", "r2vc", "--bogus", "1"], capsys)
    assert _one_error_line(code, err) == "error: veracity infer r2vc: unrecognized arguments: --bogus 1"


def test_a_folder_that_is_no_index_is_a_user_error(tmp_path: Path, capsys) -> None:
    code, _, err = run(["index", "search", "--index_dir", str(tmp_path), "--query", "x"], capsys)
    assert _one_error_line(code, err) == f"error: {tmp_path} is not a complete index (no index_meta.json)"
