"""The ``veracity`` command: dispatches to each job's ``main(argv)``, imported lazily so ``--help`` is instant.

Usage: veracity <command> [args]      (veracity <command> --help for its options)
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

# command -> (module, what it does); a command with sub-commands maps to {sub: module} in SUBCOMMANDS.
COMMANDS: dict[str, tuple[str, str]] = {
    "prep": ("@prep", "prepare datasets into validated records + manifest; `prep training-sets` for SFT/DPO"),
    "models": ("veracity.models.registry", "list / resolve / materialize the models of each role"),
    "demo": ("veracity.demo", "run every working stage on embedded defaults and the shipped data"),
    "index": ("@index", "`index build` / `index search`: retrieval indexes (BM25, FAISS, fusion, rerank)"),
    "train": ("@train", "`train sft`, `train dpo`, `train merge` (LoRA), `train nli` (verifier), `train calibrator`, "
                        "`train reranker` (SciClaimSeekers' cross-encoder)"),
    "infer": ("@infer", "offline batch inference: `infer r2vc|aic|sciclaim|uts` (the pipelines), `infer ablate` "
                        "(a pipeline's ablation table), `infer generate`"),
    "eval": ("@eval", "evaluation: `eval r2vc|averitec|sciclaim|m4` (scorers), `eval retrieval`, `eval checkpoint`"),
}
SUBCOMMANDS: dict[str, dict[str, str]] = {
    # a bare `veracity prep` (or one followed by options) prepares the datasets
    "@prep": {"": "veracity.data_prep.prepare", "training-sets": "veracity.train.training_sets",
              "sciclaim-tasks": "veracity.data_prep.sciclaim_tasks",
              "sciclaim-collection": "veracity.data_prep.checkthat_collection"},
    "@eval": {"retrieval": "veracity.infer.retrieval.evaluate", "checkpoint": "veracity.infer.checkpoint_eval",
              "averitec": "veracity.infer.eval.averitec", "r2vc": "veracity.infer.eval.r2vc",
              "sciclaim": "veracity.infer.eval.sciclaim", "m4": "veracity.infer.eval.m4"},
    "@infer": {"generate": "veracity.infer.generate", "r2vc": "veracity.infer.pipelines.r2vc.run",
               "sciclaim": "veracity.infer.pipelines.sciclaimseekers.run", "aic": "veracity.infer.pipelines.aic.run",
               "uts": "veracity.infer.pipelines.uts.run", "ablate": "veracity.infer.pipelines.ablate"},
    "@index": {"build": "veracity.infer.retrieval.index_build", "search": "veracity.infer.retrieval.index_search"},
    "@train": {"sft": "veracity.train.sft", "dpo": "veracity.train.dpo", "merge": "veracity.train.merge",
               "nli": "veracity.train.nli", "calibrator": "veracity.train.calibrator",
               "reranker": "veracity.train.reranker"},
}


def usage() -> str:
    lines = ["usage: veracity [--verbose] <command> [options]", "", "commands:"]
    lines += [f"  {name:8} {help_text}" for name, (_, help_text) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    verbose = "--verbose" in args  # a global flag: third-party logs, warnings and bars come back
    args = [a for a in args if a != "--verbose"]
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        print(f"veracity: unknown command {command!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module_name, help_text = COMMANDS[command]
    if module_name in SUBCOMMANDS:
        choices = SUBCOMMANDS[module_name]
        if rest and rest[0] in choices:
            module_name, rest = choices[rest[0]], rest[1:]
        elif "" in choices:
            module_name = choices[""]
        else:
            print(f"usage: veracity {command} {{{','.join(choices)}}} [options]", file=sys.stderr)
            return 2
    if not module_name:
        print(f"veracity {command}: not available yet — {help_text}", file=sys.stderr)
        return 2
    from veracity.logs import setup_logging  # lazy, as the error types below: `--help` loads the stdlib alone

    setup_logging(verbose=verbose)
    module = importlib.import_module(module_name)
    try:
        module.main(rest)
    except input_errors() as error:  # one error path for every command: one line, exit code 2
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    return 0


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
