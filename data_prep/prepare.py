"""Prepare every shipped dataset into validated records with a manifest.

Usage: veracity prep [--config configs/prep/default.yaml] [--data_root ../shared/data] [--output_dir runs/prep]
                     [--datasets fever vitaminc ...] [--skip_invalid] [--hub tals/vitaminc:validation]

Outputs (``output_dir``): one ``<name>.jsonl`` per output, ``manifest.json`` (counts per label and split, events
such as filtered empty claims or dropped identical duplicates, the label variants that were normalised, content
hashes of inputs and outputs), ``skipped.jsonl`` with ``--skip_invalid``, and ``run_config.yaml``. Everything is
read and validated before anything is written — the run record included — each file is written to a temp file and
renamed, and the same inputs give byte-identical outputs. The manifest is the list of outputs: files an earlier
run into the same folder listed and this one does not are removed.

Rules every loader follows: a repeated id with identical content is dropped and counted
(``filtered:duplicate_identical``), with other content it is an error naming both lines; a field over its size
limit (``limits.py``: 100,000 characters for a claim, 1,000,000 for evidence and other text) is an error naming
file, line and field. With ``--skip_invalid`` both are skipped, logged and counted instead.

Splits are assigned after every loader has run, over connected groups of all records of the run: records that
share a normalized claim or a case/group id are in one group, and a group's split hashes its smallest key
(``splits.assign_group_splits``), so no claim is in two splits of any output. With ``--datasets`` (or ``--hub``)
the groups are computed over the selected datasets only: a claim tied to another claim solely through a dataset
left out may then get another split than in a full run (a claim tied to nothing always gets the same one).
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veracity.config import make_parser as parser_for
from veracity.config import parse_config
from veracity.data_prep.averitec import load_averitec
from veracity.data_prep.checkthat import load_checkthat
from veracity.data_prep.climate_fever import load_climate_fever
from veracity.data_prep.context import LoadContext
from veracity.data_prep.errors import ErrorPolicy, InputError
from veracity.data_prep.fever import load_fever
from veracity.data_prep.hub import load_hub
from veracity.data_prep.limits import enforce_limits
from veracity.data_prep.nli import load_nli
from veracity.data_prep.prepared import MANIFEST
from veracity.data_prep.schema import Record
from veracity.data_prep.splits import SplitSpec, assign_group_splits
from veracity.data_prep.vitaminc import load_vitaminc
from veracity.data_prep.watclaimcheck import load_watclaimcheck
from veracity.io import sha256_file, write_json, write_jsonl
from veracity.rundir import write_run_config

logger = logging.getLogger(__name__)

Loader = Callable[[LoadContext, "PrepConfig"], dict[str, list[Record]]]

DATASETS: dict[str, Loader] = {
    "fever": lambda ctx, cfg: load_fever(ctx, Path(cfg.fever_wiki_pages) if cfg.fever_wiki_pages else None),
    "vitaminc": lambda ctx, cfg: load_vitaminc(ctx),
    "climate_fever": lambda ctx, cfg: load_climate_fever(ctx),
    "averitec": lambda ctx, cfg: load_averitec(ctx),
    "checkthat": lambda ctx, cfg: load_checkthat(ctx),
    "watclaimcheck": lambda ctx, cfg: load_watclaimcheck(ctx),
    "nli": lambda ctx, cfg: load_nli(ctx),
}
DATA_ROOT_ENV = "VERACITY_DATA_ROOT"
DEFAULT_DATA_ROOTS = ("../shared/data", "shared/data")  # relative to the working directory
DATA_DOCS = "docs/data.md#the-data-root"


@dataclass
class PrepConfig:
    """Data preparation settings."""

    data_root: str | None = field(
        default=None,
        metadata={"help": f"Folder with the raw datasets. Default: ${DATA_ROOT_ENV}, else ../shared/data."},
    )
    output_dir: str = field(default="runs/prep", metadata={"help": "Where records and the manifest go."})
    datasets: list[str] = field(
        default_factory=lambda: list(DATASETS), metadata={"help": f"Which of {list(DATASETS)} to prepare."}
    )
    skip_invalid: bool = field(
        default=False, metadata={"help": "Skip (log and count) malformed records instead of stopping at the first."}
    )
    seed: int = field(default=13, metadata={"help": "Seed of the hash split."})
    train_fraction: float = field(default=0.7, metadata={"help": "Share of groups in the train split."})
    calib_fraction: float = field(default=0.1, metadata={"help": "Share in the calibrator's held-out slice."})
    dev_fraction: float = field(default=0.2, metadata={"help": "Share in the evaluation split."})
    fever_wiki_pages: str | None = field(
        default=None, metadata={"help": "A FEVER wiki-pages folder to resolve evidence pointers against."}
    )
    hub: list[str] = field(
        default_factory=list, metadata={"help": "Full hub datasets as name:split, e.g. tals/vitaminc:validation."}
    )

    def __post_init__(self) -> None:
        unknown = [d for d in self.datasets if d not in DATASETS]
        if unknown:
            raise ValueError(f"unknown dataset(s) {unknown}; choose from {list(DATASETS)}")
        self.split_spec()  # validates the fractions early

    def split_spec(self) -> SplitSpec:
        return SplitSpec(seed=self.seed, train=self.train_fraction, calib=self.calib_fraction, dev=self.dev_fraction)


class DataRootError(InputError, FileNotFoundError):
    """No data root: none configured that exists, and none of the defaults."""


def resolve_data_root(configured: str | None) -> Path:
    """The configured root, else ``$VERACITY_DATA_ROOT``, else ``../shared/data`` (or ``shared/data``) beside the
    working directory. A root that is named but is no folder is an error naming where it was named."""
    env = os.environ.get(DATA_ROOT_ENV)
    named = f"--data_root {configured}" if configured else f"${DATA_ROOT_ENV} {env}" if env else None
    candidates = [configured or env] if named else list(DEFAULT_DATA_ROOTS)
    for candidate in candidates:
        if Path(candidate).is_dir():
            return Path(candidate).resolve()
    if named:
        raise DataRootError(f"{named}: no such folder (the datasets, where to get them and the layout veracity prep "
                            f"reads: {DATA_DOCS})")
    raise DataRootError(f"no data root: neither of {list(DEFAULT_DATA_ROOTS)} is a folder here; pass --data_root DIR "
                        f"or set ${DATA_ROOT_ENV} (the datasets, where to get them and their layout: {DATA_DOCS})")


def summarize(name: str, records: list[Record], ctx: LoadContext, digest: str,
              input_hashes: dict[Path, str]) -> dict[str, object]:
    labels = Counter(getattr(r, "label", "-") for r in records)
    splits = Counter(getattr(r, "split", "-") for r in records)
    inputs = sorted({p for p in ctx.inputs.get(name, [])})
    return {
        "kind": records[0].kind if records else "",
        "file": f"{name}.jsonl",
        "records": len(records),
        "sha256": digest,
        "labels": dict(sorted(labels.items())),
        "splits": dict(sorted(splits.items())),
        "events": dict(sorted(ctx.events.get(name, Counter()).items())),
        "label_variants": dict(sorted(ctx.label_variants.get(name, Counter()).items())),
        "inputs": [{"path": ctx.origin(p, 0).rsplit(":", 1)[0], "sha256": _hash_once(p, input_hashes)}
                   for p in inputs if p.is_file()],
    }


def _hash_once(path: Path, known: dict[Path, str]) -> str:
    if path not in known:
        known[path] = sha256_file(path)
    return known[path]


def prepare(config: PrepConfig) -> dict[str, object]:
    """Load, validate and write every configured dataset; splits are assigned over connected groups of all
    loaded records (see the module docstring). Returns the manifest."""
    return write_prepared(config, *load_all(config))


def load_all(config: PrepConfig) -> tuple[dict[str, list[Record]], LoadContext, dict[str, object]]:
    """Read and validate every configured dataset, nothing written: (outputs, context, split groups summary).

    Raises:
        DataError: the first bad record or unreadable file (without ``skip_invalid``).
        DataRootError: no data root (a FileNotFoundError).
    """
    data_root = resolve_data_root(config.data_root)
    ctx = LoadContext(data_root=data_root, splits=config.split_spec(), policy=ErrorPolicy(config.skip_invalid))
    outputs: dict[str, list[Record]] = {}
    for name in config.datasets:
        logger.info("loading %s from %s", name, data_root)
        outputs.update(DATASETS[name](ctx, config))
    if config.hub:
        for spec in config.hub:
            wiki = Path(config.fever_wiki_pages) if config.fever_wiki_pages else None
            outputs.update(load_hub(ctx, spec, wiki))
    enforce_limits(outputs, ctx)
    # Only now, with every record of the run known, can a claim's group (and so its split) be complete.
    groups = assign_group_splits(outputs, ctx.splits, ctx.group_namespaces)
    return outputs, ctx, groups


def write_prepared(config: PrepConfig, outputs: dict[str, list[Record]], ctx: LoadContext,
                   groups: dict[str, object]) -> dict[str, object]:
    """Write the validated outputs, ``skipped.jsonl`` and the manifest; remove outputs of an earlier run into the
    same folder that this run does not write (the manifest is the list of outputs)."""
    out_dir = Path(config.output_dir)
    previous = _previous_outputs(out_dir)
    manifest: dict[str, object] = {
        "split": {"seed": config.seed, "train": config.train_fraction, "calib": config.calib_fraction,
                  "dev": config.dev_fraction, "groups": groups},
        "skipped_invalid": len(ctx.policy.skipped),
        "outputs": {},
    }
    input_hashes: dict[Path, str] = {}
    for name, records in sorted(outputs.items()):
        _, digest = write_jsonl(out_dir / f"{name}.jsonl", (r.to_dict() for r in records))
        manifest["outputs"][name] = summarize(name, records, ctx, digest, input_hashes)  # type: ignore[index]
    skipped_path = out_dir / "skipped.jsonl"
    if ctx.policy.skipped:
        ordered = sorted(ctx.policy.skipped, key=lambda e: (e.path, e.line or 0))
        write_jsonl(skipped_path, (e.as_record() for e in ordered))
    elif skipped_path.exists():
        skipped_path.unlink()
    write_json(out_dir / MANIFEST, manifest)
    for name in sorted(set(previous) - set(outputs)):  # after the new manifest: a crash leaves them unlisted
        stale = out_dir / previous[name]
        if stale.is_file():
            logger.info("removing %s: an output of an earlier run that this run does not write", stale)
            stale.unlink()
    return manifest


def _previous_outputs(out_dir: Path) -> dict[str, str]:
    """Output name → file of the manifest already in ``out_dir`` (none, or unreadable: nothing to remove)."""
    try:
        listed = json.loads((out_dir / MANIFEST).read_text(encoding="utf-8"))["outputs"]
        return {name: Path(info.get("file", f"{name}.jsonl")).name for name, info in listed.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def format_summary(manifest: dict[str, object]) -> str:
    """A plain table: records, labels and splits per output."""
    lines = [f"{'output':32} {'records':>8}  labels | splits | events"]
    for name, info in manifest["outputs"].items():  # type: ignore[union-attr]
        labels = ", ".join(f"{k}={v}" for k, v in info["labels"].items() if k != "-")
        splits = ", ".join(f"{k}={v}" for k, v in info["splits"].items())
        events = ", ".join(f"{k}={v}" for k, v in [*info["events"].items(), *info["label_variants"].items()])
        lines.append(f"{name:32} {info['records']:>8}  {labels or '-'} | {splits} | {events or '-'}")
    lines.append(f"skipped invalid records: {manifest['skipped_invalid']}")
    return "\n".join(lines)


def make_parser() -> Any:
    return parser_for((PrepConfig,), "veracity prep")


def main(argv: Sequence[str] | None = None) -> dict[str, object]:
    """``veracity prep``.

    Raises:
        DataError: the first bad record or unreadable file (``veracity.cli`` prints it and exits with status 2).
        DataRootError: no data root (the same).
    """
    (config,) = parse_config(make_parser(), argv)
    loaded = load_all(config)
    # validated: the run record and the outputs are written together, so they always describe the same run
    write_run_config(config.output_dir, config, job="prep")
    manifest = write_prepared(config, *loaded)
    print(format_summary(manifest))
    print(f"wrote {len(manifest['outputs'])} outputs and manifest.json to {config.output_dir}")  # type: ignore[arg-type]
    return manifest


if __name__ == "__main__":
    from veracity.logs import setup_logging

    setup_logging()
    main()
