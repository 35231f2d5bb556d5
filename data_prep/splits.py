"""Deterministic, seeded hash splits.

A record's split is a pure function of (seed, group key): the same claim lands in the same split in every
dataset and on every run. The key is the contrastive group id when a dataset has one (VitaminC cases,
FEVER-Symmetric cases) so paired claims never straddle train and evaluation; otherwise the normalized claim.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass

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

    ``calib`` is the held-out slice the R2VC calibrator trains on (SPEC §1); it is disjoint from ``dev``
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
