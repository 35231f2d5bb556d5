"""The ``veracity`` command: dispatches to each job's ``main(argv)``, imported lazily so ``--help`` is instant.

Usage: veracity <command> [args]      (veracity <command> --help lists its subcommands or options)
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

# command -> (module, what it does); a command with subcommands names its table in SUBCOMMANDS ("@train").
COMMANDS: dict[str, tuple[str, str]] = {
    "prep": ("@prep", "prepare datasets into validated records + a manifest; training sets, CheckThat tasks"),
    "models": ("veracity.models.registry", "list / resolve / install the models of each role; ONNX exports"),
    "demo": ("veracity.demo", "run every working stage on embedded defaults and the shipped data"),
    "index": ("@index", "retrieval indexes: build one, search one (BM25, dense, fusion, rerank)"),
    "train": ("@train", "training: the R2VC generator (SFT, DPO, LoRA merge), NLI verifier, calibrator, reranker"),
    "infer": ("@infer", "batch inference: the four pipelines (r2vc, aic, sciclaim, uts), ablations, generation"),
    "eval": ("@eval", "evaluation: each pipeline's scorer, retrieval metrics, a checkpoint's accuracy"),
    "report": ("veracity.report", "write report.html for a run folder: a training run's or a pipeline run's"),
}
# command -> {subcommand: (module, what it does)}; "" is what the bare command runs (`veracity prep` prepares).
SUBCOMMANDS: dict[str, dict[str, tuple[str, str]]] = {
    "@prep": {
        "": ("veracity.data_prep.prepare", "prepare every shipped dataset into validated records + a manifest"),
        "training-sets": ("veracity.train.training_sets", "SFT and DPO training sets for the R2VC generator"),
        "sciclaim-tasks": ("veracity.data_prep.sciclaim_tasks",
                           "CheckThat-format retrieval tasks from prepared records (no paper collection needed)"),
        "sciclaim-collection": ("veracity.data_prep.checkthat_collection",
                                "convert the official CheckThat! 4b collection pickle into JSONL (opt-in)"),
    },
    "@eval": {
        "retrieval": ("veracity.infer.retrieval.evaluate", "retrieval metrics on the claim → evidence benchmarks"),
        "checkpoint": ("veracity.infer.checkpoint_eval",
                       "label accuracy and macro-F1 of a generator checkpoint or an NLI verifier"),
        "checkpoints": ("veracity.infer.checkpoint_sweep",
                        "every checkpoint of a training run scored on the task: a table, plots, the best one"),
        "averitec": ("veracity.infer.eval.averitec", "AVeriTeC scores: Q-only / Q+A METEOR, old AVeriTeC score, Ev²R"),
        "r2vc": ("veracity.infer.eval.r2vc", "metrics and report.html of an R2VC run, from its records"),
        "sciclaim": ("veracity.infer.eval.sciclaim", "CheckThat! source retrieval: MRR@5, Hit@1, Hit@5 of a run"),
        "m4": ("veracity.infer.eval.m4", "M4, the CheckThat 2026 Task 3 score of generated fact-checking articles"),
    },
    "@infer": {
        "r2vc": ("veracity.infer.pipelines.r2vc.run",
                 "R2VC: retrieval-augmented, verified, calibrated claim verification (FEVER-style)"),
        "aic": ("veracity.infer.pipelines.aic.run", "AIC CTU: long-context RAG, one LLM call per claim (FEVER-8)"),
        "sciclaim": ("veracity.infer.pipelines.sciclaimseekers.run",
                     "SciClaimSeekers: the scientific paper behind a social-media post (CheckThat 4b)"),
        "uts": ("veracity.infer.pipelines.uts.run",
                "UTS: fact-checking articles drafted with citations (CheckThat Task 3)"),
        "ablate": ("veracity.infer.pipelines.ablate", "a pipeline's ablation table: a list of recipes, one table"),
        "generate": ("veracity.infer.generate", "batch generation over a JSONL of items, resumable and shardable"),
    },
    "@index": {
        "build": ("veracity.infer.retrieval.index_build", "build a retrieval index (BM25, dense) over a corpus"),
        "search": ("veracity.infer.retrieval.index_search",
                   "query an index: BM25, dense, α-fusion or RRF, optionally reranked"),
    },
    "@train": {
        "sft": ("veracity.train.sft", "supervised fine-tuning of the R2VC generator with LoRA"),
        "dpo": ("veracity.train.dpo", "DPO of the R2VC generator with LoRA, from the SFT adapter"),
        "merge": ("veracity.train.merge", "merge a LoRA adapter into its base: a plain model folder"),
        "nli": ("veracity.train.nli", "fine-tune the NLI verifier (3-way cross-encoder)"),
        "calibrator": ("veracity.train.calibrator", "fit the R2VC calibrator (P(the candidate's label is gold))"),
        "reranker": ("veracity.train.reranker", "fine-tune SciClaimSeekers' cross-encoder on a task's training posts"),
    },
}


def usage() -> str:
    lines = ["usage: veracity [--verbose] <command> [options]", "", "commands:"]
    lines += [f"  {name:8} {help_text}" for name, (_, help_text) in COMMANDS.items()]
    lines += ["", "`veracity <command> --help` lists a command's subcommands or options; --verbose shows the "
                  "libraries' logs"]
    return "\n".join(lines)


def subcommand_usage(command: str) -> str:
    """``veracity <command> --help`` for a command with subcommands: each with its one line."""
    choices = SUBCOMMANDS[COMMANDS[command][0]]
    bare = f"veracity {command} [options]" if "" in choices else f"veracity {command} <subcommand> [options]"
    lines = [f"usage: {bare}", "", "subcommands:"]
    lines += [f"  {sub or '(none)':20} {help_text}" for sub, (_, help_text) in choices.items()]
    lines += ["", f"`veracity {command} <subcommand> --help` lists its options"]
    return "\n".join(lines)


def fail(message: str) -> int:
    """A usage error of the dispatch itself: one line, exit status 2, as the jobs' parsers do."""
    print(f"error: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    verbose = "--verbose" in args  # a global flag: third-party logs, warnings and bars come back
    args = [a for a in args if a != "--verbose"]
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        return fail(f"veracity: unknown command {command!r} (`veracity --help` lists them)")
    module_name, help_text = COMMANDS[command]
    if module_name in SUBCOMMANDS:
        choices = SUBCOMMANDS[module_name]
        if rest[:1] in (["-h"], ["--help"]):
            print(subcommand_usage(command))
            if "" not in choices:
                return 0
            print(f"\noptions of `veracity {command}` itself:")  # then the bare command's own help, below
        if rest and rest[0] in choices:
            module_name, rest = choices[rest[0]][0], rest[1:]
        elif "" in choices:
            module_name = choices[""][0]
        else:
            named = f"unknown subcommand {rest[0]!r}" if rest else "a subcommand is needed"
            return fail(f"veracity {command}: {named}: choose from {', '.join(choices)} "
                        f"(`veracity {command} --help` says what each does)")
    if not module_name:
        print(f"veracity {command}: not available yet — {help_text}", file=sys.stderr)
        return 2
    from veracity.logs import setup_logging  # lazy, as the error types below: `--help` loads the stdlib alone

    setup_logging(verbose=verbose)
    module = importlib.import_module(module_name)
    from veracity.models.engine import EngineUnavailableError  # lazy, as above

    try:
        result = module.main(rest)
    except input_errors() as error:  # one error path for every command: one line, exit code 2
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    except EngineUnavailableError as error:  # a job that cannot go on without its engine (a scorer, an evaluation)
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    return failed_items(result)


def failed_items(result: object) -> int:
    """Exit status 1 when a batch job ends with items whose last record is an error (``failed_items`` of its
    summary: an engine that failed, an item that raised), with one line saying so; else 0."""
    failed = result.get("failed_items") if isinstance(result, dict) else None
    if not failed:
        return 0
    print(f"error: {failed} item(s) failed: their error records are in the output; `--retry_errors true` runs them "
          "again", file=sys.stderr)
    return 1


def input_errors() -> tuple[type[BaseException], ...]:
    """What a user can fix without a traceback: a bad input record or file (``DataError``) or another bad input,
    such as no data root or a model that is not there (``InputError``), prepared data that is missing or changed
    (``PreparedDataError``), a batch output another run is writing (``OutputLockedError``) or whose records were
    made under another config (``RunConfigMismatchError``). Jobs raise these; only this module turns them into
    exit status 2 (argparse's usage errors aside)."""
    # lazy: these modules bring yaml and the record schema (0.1 s), which `veracity --help` does not need
    from veracity.data_prep.errors import InputError
    from veracity.data_prep.prepared import PreparedDataError
    from veracity.infer.batch import OutputLockedError
    from veracity.rundir import RunConfigMismatchError

    return InputError, PreparedDataError, OutputLockedError, RunConfigMismatchError


if __name__ == "__main__":
    raise SystemExit(main())
