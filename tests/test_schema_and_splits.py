"""Label mapping and seeded hash splits."""

from __future__ import annotations

import pytest

from veracity.data_prep.schema import NOT_ENOUGH_INFO, REFUTES, SUPPORTS, to_nli, to_ternary
from veracity.data_prep.splits import SplitSpec, normalize_claim


@pytest.mark.parametrize(
    ("raw", "label"),
    [
        ("supports", SUPPORTS), ("SUPPORTED", SUPPORTS), ("Supported", SUPPORTS), (" SUPPORTS ", SUPPORTS),
        ("refutes", REFUTES), ("REFUTED", REFUTES),
        ("NEI", NOT_ENOUGH_INFO), ("NOT_ENOUGH_INFO", NOT_ENOUGH_INFO), ("not enough info", NOT_ENOUGH_INFO),
        ("Not Enough Evidence", NOT_ENOUGH_INFO), ("NOT-ENOUGH-INFO", NOT_ENOUGH_INFO),
    ],
)
def test_ternary_variants(raw: str, label: str) -> None:
    assert to_ternary(raw) == label


@pytest.mark.parametrize("raw", ["DISPUTED", "Conflicting Evidence/Cherrypicking", "entailment", "", None, 1])
def test_non_ternary_values_are_rejected(raw: object) -> None:
    assert to_ternary(raw) is None


def test_nli_labels() -> None:
    assert to_nli("Entailment") == "entailment" and to_nli("neutral") == "neutral"
    assert to_nli("not_entailment") is None and to_nli(None) is None


def test_verifier_premise_with_and_without_titles() -> None:
    from veracity.data_prep.schema import ClaimExample, EvidencePassage

    example = ClaimExample(id="x", claim="c", label="SUPPORTS", evidence_text="It had three sequels . Fox made it .",
                           source="s", split="dev", origin="o",
                           evidence=[EvidencePassage("It had three sequels .", title="Alvin_-LRB-film-RRB-"),
                                     EvidencePassage("Fox made it .")])
    assert example.premise() == example.premise(titles=False) == example.evidence_text
    assert example.premise(titles=True) == "Alvin (film): It had three sequels . Fox made it ."
    untitled = ClaimExample.from_dict({**example.to_dict(), "evidence": [{"text": "It had three sequels ."}]})
    assert untitled.premise(titles=True) == untitled.evidence_text


def test_normalize_claim_matches_the_slicing_rule() -> None:
    assert normalize_claim("Café, Zürich — 2019!") == "cafezurich2019"


def test_split_is_deterministic_seeded_and_proportional() -> None:
    spec = SplitSpec(seed=13)
    keys = [f"claim number {i}" for i in range(5000)]
    first = [spec.assign(k) for k in keys]
    assert first == [SplitSpec(seed=13).assign(k) for k in keys]
    shares = {name: first.count(name) / len(keys) for name in ("train", "calib", "dev")}
    assert shares["train"] == pytest.approx(0.7, abs=0.03)
    assert shares["calib"] == pytest.approx(0.1, abs=0.02)
    assert shares["dev"] == pytest.approx(0.2, abs=0.02)
    other_seed = [SplitSpec(seed=14).assign(k) for k in keys]
    assert sum(a != b for a, b in zip(first, other_seed, strict=True)) > 1000


def test_split_ignores_case_and_punctuation_of_the_claim() -> None:
    spec = SplitSpec()
    assert spec.assign("Tilda Swinton is a vegan.") == spec.assign("tilda swinton is a VEGAN")


def test_calibration_slice_is_disjoint_from_evaluation() -> None:
    spec = SplitSpec(train=0.0, calib=0.5, dev=0.5)
    assigned = {spec.assign(f"k{i}") for i in range(200)}
    assert assigned == {"calib", "dev"}


@pytest.mark.parametrize("fractions", [(0.5, 0.5, 0.5), (1.2, -0.1, -0.1)])
def test_bad_fractions(fractions: tuple[float, float, float]) -> None:
    with pytest.raises(ValueError, match="sum to 1"):
        SplitSpec(train=fractions[0], calib=fractions[1], dev=fractions[2])
