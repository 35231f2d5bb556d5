"""Deterministic, seeded hash splits, decided over connected groups of records.

A record's split is a pure function of (seed, its connected component): records are connected when they share
a normalized claim or a case/group id (VitaminC cases, FEVER-Symmetric cases, FEVER claim ids), across every
output of one preparation run. So a claim lands in one split in every dataset, paired claims never straddle
train and evaluation, and a claim tied to nothing keeps ``SplitSpec.assign(claim)``.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SPLIT_NAMES: tuple[str, ...] = ("train", "calib", "dev")


def normalize_claim(text: str) -> str:
    """NFKD, accents dropped, lower-cased, only ``[a-z0-9]`` kept (the rule the shared data was sliced by)."""
    decomposed = unicodedata.normalize("NFKD", text)
    ascii_only = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return re.sub(r"[^a-z0-9]", "", ascii_only.lower())


def hash_int(text: str) -> int:
    """A stable 48-bit integer from ``text`` (sha256): seeded orderings and picks that never depend on the run."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:12], 16)


def hash_unit(key: str, seed: int) -> float:
    """Map ``key`` to a uniform number in [0, 1) with a seeded sha256."""
    digest = hashlib.sha256(f"{seed}\x00{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass(frozen=True)
class SplitSpec:
    """Fractions of the seeded hash split.

    ``calib`` is the held-out slice the R2VC calibrator trains on (docs/data.md#splits); it is disjoint from ``dev``
    (evaluation) and from ``train`` by construction.
    """

    seed: int = 13
    train: float = 0.7
    calib: float = 0.1
    dev: float = 0.2

    def __post_init__(self) -> None:
        fractions = (self.train, self.calib, self.dev)
        if any(f < 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-9:
            raise ValueError(f"split fractions must be >= 0 and sum to 1, got {fractions}")

    def assign(self, group_key: str) -> str:
        """Split name for a group key (a group id, or a claim, which is normalized first)."""
        unit = hash_unit(normalize_claim(group_key) or group_key, self.seed)
        if unit < self.train:
            return "train"
        if unit < self.train + self.calib:
            return "calib"
        return "dev"


# --- Splits over connected groups -------------------------------------------------------------------------
#
# A claim reaches the prepared outputs through several datasets (a FEVER dev claim is in paper_dev, in
# FEVER-Symmetric and in the RTE view of FEVER dev), and a contrastive case ties several claims together. Hashing
# each record's own key puts one claim in train through one dataset and in dev through another, so the split is
# decided once per connected component of "shares a claim or a case id" over every record of a run.

CLAIM_PREFIX = "claim:"
GROUP_PREFIX = "group:"
# Which field holds the claim, per record kind; records of other kinds (corpus documents, reference articles)
# have no claim and keep the split their loader gave them.
CLAIM_FIELDS: dict[str, str] = {
    "claim_example": "claim",
    "nli_pair": "hypothesis",
    "averitec_claim": "claim",
    "article_item": "claim",
    "retrieval_query": "text",
}


def claim_group_text(text: str) -> str:
    """The normalized claim, or the stripped text where nothing survives normalization (a claim in another
    script must not share the empty key with every other such claim)."""
    return normalize_claim(text) or text.strip()


def claim_key(text: str) -> str:
    """Union-find key of a claim: ``claim:<normalized claim>``."""
    return CLAIM_PREFIX + claim_group_text(text)


def group_key(namespace: str, group_id: str) -> str:
    """Union-find key of a case or group id, namespaced by its id space: ``group:<namespace>:<id>``."""
    return f"{GROUP_PREFIX}{namespace}:{group_id}"


def record_claim(record: object) -> str | None:
    """The claim text of a record, or None for kinds that carry no claim."""
    name = CLAIM_FIELDS.get(getattr(record, "kind", ""))
    return getattr(record, name) if name else None


def record_keys(record: object, namespace: str) -> list[str]:
    """A record's union-find keys: its claim, and its ``group_id`` (if any) in ``namespace``. [] without claim."""
    claim = record_claim(record)
    if claim is None:
        return []
    keys = [claim_key(claim)]
    group_id = getattr(record, "group_id", "")
    if group_id:
        keys.append(group_key(namespace, group_id))
    return keys


def component_representatives(key_sets: Sequence[Sequence[str]]) -> list[str | None]:
    """For each item, the smallest key of its connected component (items sharing a key are connected).

    Union-find over the keys; the representative is a function of the component alone, never of the item
    order. An item without keys gets None.
    """
    parent: dict[str, str] = {}

    def find(key: str) -> str:
        root = key
        while parent[root] != root:
            root = parent[root]
        while parent[key] != root:  # path compression keeps later finds flat
            parent[key], key = root, parent[key]
        return root

    for keys in key_sets:
        for key in keys:
            parent.setdefault(key, key)
        for key in keys[1:]:
            a, b = find(keys[0]), find(key)
            if a != b:
                # The smaller key becomes the root, so each root is its component's minimum.
                parent[max(a, b)] = min(a, b)
    return [find(keys[0]) if keys else None for keys in key_sets]


def component_split(representative: str, spec: SplitSpec) -> str:
    """Split of a component from its smallest key.

    A claim key is hashed as the claim itself, so a claim connected to nothing keeps the split ``spec.assign``
    always gave it; only claims tied to others move.
    """
    return spec.assign(representative.removeprefix(CLAIM_PREFIX))


def group_splits(key_sets: Sequence[Sequence[str]], spec: SplitSpec) -> list[str | None]:
    """The split of each item's connected component (None for items without keys)."""
    return [None if rep is None else component_split(rep, spec) for rep in component_representatives(key_sets)]


def assign_group_splits(
    outputs: Mapping[str, Sequence[Any]], spec: SplitSpec, namespaces: Mapping[str, str] | None = None
) -> dict[str, int]:
    """Set ``split`` of every record with a claim to the split of its connected component, in place.

    Args:
        outputs: output name -> records, all outputs of one run (components span outputs).
        spec: the seeded split.
        namespaces: output name -> id space of its ``group_id`` s (default: the output name), so that outputs
            with the same ids (local and hub VitaminC cases, FEVER claim ids) are joined by them.

    Returns:
        Counts for the manifest: records grouped, components, records of the largest component, and records
        whose split differs from the one their own claim alone would get.
    """
    namespaces = namespaces or {}
    items = [(record, record_keys(record, namespaces.get(name, name)))
             for name, records in outputs.items() for record in records]
    items = [(record, keys) for record, keys in items if keys]
    representatives = component_representatives([keys for _, keys in items])
    moved = 0
    for (record, keys), rep in zip(items, representatives, strict=True):
        record.split = component_split(rep, spec)  # type: ignore[arg-type]
        moved += record.split != spec.assign(keys[0].removeprefix(CLAIM_PREFIX))
    sizes = Counter(representatives)
    return {"records": len(items), "components": len(sizes), "largest_component": max(sizes.values(), default=0),
            "moved_with_their_group": moved}
