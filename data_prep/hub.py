"""Full datasets from the Hugging Face hub, for users with hub access, through the same converters.

``--hub tals/vitaminc:validation`` downloads with ``datasets.load_dataset`` and converts the rows exactly as the
local sample files are converted. FEVER on the hub is one row per evidence pointer; rows are regrouped into the
raw FEVER shape first. Nothing here runs offline; tests stand in a fake ``load_dataset``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from veracity.data_prep.context import LoadContext
from veracity.data_prep.errors import DataError
from veracity.data_prep.fever import convert_fever_rows
from veracity.data_prep.rows import RawRow
from veracity.data_prep.schema import Record
from veracity.data_prep.vitaminc import convert_vitaminc_rows


def _load_dataset(name: str, config: str | None, split: str) -> Iterable[dict[str, Any]]:
    from datasets import load_dataset  # heavy import, only when the hub is used

    return load_dataset(name, config, split=split)


def _raw_rows(name: str, split: str, data: Iterable[dict[str, Any]]) -> Iterator[RawRow]:
    for index, item in enumerate(data, start=1):
        yield RawRow(path=f"hf:{name}[{split}]", line=index, data=dict(item), origin=f"hf:{name}/{split}:{index}")


def regroup_fever_rows(rows: Iterable[RawRow]) -> list[RawRow]:
    """Hub FEVER (one row per evidence pointer) → raw FEVER rows with nested ``evidence`` sets."""
    grouped: dict[str, RawRow] = {}
    sets: dict[str, dict[Any, list[list[Any]]]] = {}
    for row in rows:
        claim_id = row.id("id")
        if claim_id not in grouped:
            grouped[claim_id] = RawRow(row.path, row.line, {k: row.data.get(k) for k in ("id", "label", "claim")},
                                       row.origin)
            sets[claim_id] = {}
        page = row.data.get("evidence_wiki_url") or None
        sentence = row.data.get("evidence_sentence_id")
        pointer = [row.data.get("evidence_annotation_id"), row.data.get("evidence_id"), page,
                   sentence if page is not None else None]
        sets[claim_id].setdefault(row.data.get("evidence_annotation_id"), []).append(pointer)
    for claim_id, row in grouped.items():
        row.data["evidence"] = list(sets[claim_id].values())
    return list(grouped.values())


HubConverter = Callable[[LoadContext, str, str, list[RawRow], Path | None], list[Record]]


def _vitaminc(ctx: LoadContext, out: str, split: str, rows: list[RawRow], _: Path | None) -> list[Record]:
    return convert_vitaminc_rows(ctx, [(split, r) for r in rows], out)  # type: ignore[return-value]


def _fever(ctx: LoadContext, out: str, split: str, rows: list[RawRow], wiki: Path | None) -> list[Record]:
    return convert_fever_rows(ctx, regroup_fever_rows(rows), out, split, wiki)  # type: ignore[return-value]


# hub name -> (config, converter)
HUB_DATASETS: dict[str, tuple[str | None, HubConverter]] = {
    "tals/vitaminc": (None, _vitaminc),
    "fever": ("v1.0", _fever),
    "fever/fever": ("v1.0", _fever),
}


def parse_hub_spec(spec: str) -> tuple[str, str]:
    """``name:split`` → (name, split); an unknown name or a missing split is a one-line DataError naming the
    ``--hub`` value (the CLI exits 2 with it, before anything is written)."""
    name, _, split = spec.partition(":")
    if name not in HUB_DATASETS:
        raise DataError(f"--hub {spec}", None, f"no converter for hub dataset {name!r}; known: {sorted(HUB_DATASETS)}")
    if not split:
        raise DataError(f"--hub {spec}", None, f"hub spec {spec!r} lacks a split (write {name}:train)")
    return name, split


def load_hub(ctx: LoadContext, spec: str, wiki_pages: Path | None = None) -> dict[str, list[Record]]:
    """Load ``name:split`` (e.g. ``tals/vitaminc:train``) from the hub into records.

    Raises:
        DataError: an unknown dataset, a spec without a split, or a download that failed (named with its cause).
    """
    name, split = parse_hub_spec(spec)
    config, converter = HUB_DATASETS[name]
    out = f"hub_{name.replace('/', '_')}_{split}"
    try:
        rows = list(_raw_rows(name, split, _load_dataset(name, config, split)))
    except Exception as error:  # noqa: BLE001 - any failure of the download is the user's to fix (network, split)
        cause = " ".join(str(error).split())[:300] or type(error).__name__
        raise DataError(f"hf:{name}[{split}]", None, f"cannot load from the hub ({type(error).__name__}: {cause})"
                        ) from None
    return {out: converter(ctx, out, split, rows, wiki_pages)}
