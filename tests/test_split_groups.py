"""Splits over connected groups: a claim, and every claim tied to it by a case id, has one split in every output."""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

import pytest
from fixture_data import add_cross_dataset_links

from veracity.data_prep import hub
from veracity.data_prep.fever import symmetric_case_id
from veracity.data_prep.prepare import DATASETS, PrepConfig, prepare
from veracity.data_prep.readers import read_jsonl
from veracity.data_prep.schema import RECORD_TYPES, ClaimExample, CorpusDocument, NLIPair, ReferenceArticle
from veracity.data_prep.splits import (
    SplitSpec,
    assign_group_splits,
    claim_group_text,
    claim_key,
    component_representatives,
    group_key,
    group_splits,
    record_claim,
)

SPEC = SplitSpec()


def claims_in_distinct_splits(count: int) -> list[str]:
    """``count`` claims that, each taken alone, fall into pairwise different splits (so joining them matters)."""
    found: dict[str, str] = {}
    for i in range(1000):
        claim = f"Claim number {i} ."
        found.setdefault(SPEC.assign(claim), claim)
        if len(found) == count:
            return list(found.values())
    raise AssertionError("no such claims")


# --- the pure core ------------------------------------------------------------------------------------------


def test_records_sharing_a_claim_across_datasets_share_a_split() -> None:
    a, b = claims_in_distinct_splits(2)
    keys = [[claim_key(a)], [claim_key(b)], [claim_key(a.upper().replace(" .", "!"))]]  # 3rd: a, other spelling
    splits = group_splits(keys, SPEC)
    assert splits[0] == splits[2] == SPEC.assign(a)
    assert splits[1] == SPEC.assign(b) != splits[0]


def test_a_case_id_joins_its_claims_and_the_smallest_key_decides() -> None:
    a, b = sorted(claims_in_distinct_splits(2), key=claim_key)
    case = group_key("vitaminc", "c1")
    keys = [[claim_key(b), case], [claim_key(a), case]]
    assert component_representatives(keys) == [claim_key(a)] * 2
    assert group_splits(keys, SPEC) == [SPEC.assign(a)] * 2


def test_transitive_chains_form_one_component() -> None:
    a, b, c = claims_in_distinct_splits(3)
    d = "Unrelated claim ."
    keys = [
        [claim_key(a), group_key("fever", "1")],  # a -case 1- b
        [claim_key(b), group_key("fever", "1")],
        [claim_key(b)],  # b again, through another dataset
        [claim_key(c), group_key("fever_symmetric", "7")],  # c -case 7- ... -claim- b
        [claim_key(b), group_key("fever_symmetric", "7")],
        [claim_key(d)],
        [],  # no claim: no split
    ]
    splits = group_splits(keys, SPEC)
    smallest = min(claim_key(x) for x in (a, b, c))
    assert splits[:5] == [SPEC.assign(smallest.removeprefix("claim:"))] * 5
    assert splits[5] == SPEC.assign(d) and splits[6] is None


def test_components_do_not_depend_on_the_order_of_records() -> None:
    rng = random.Random(0)
    claims = [f"c{i}" for i in range(60)]
    keys = [[claim_key(rng.choice(claims)), group_key("g", str(rng.randrange(40)))] for _ in range(80)]
    keys += [[claim_key(rng.choice(claims))] for _ in range(40)]

    def rep_of_key(key_sets: list[list[str]]) -> dict[str, str | None]:
        return {k: rep for ks, rep in zip(key_sets, component_representatives(key_sets), strict=True) for k in ks}

    expected = rep_of_key(keys)
    assert len(set(expected.values())) > 5  # several components, not one
    for _ in range(5):
        order = [list(reversed(k)) if rng.random() < 0.5 else k for k in keys]  # key order within a record too
        rng.shuffle(order)
        assert rep_of_key(order) == expected


def test_a_lone_claim_keeps_its_old_split_and_group_ids_are_namespaced() -> None:
    for claim in claims_in_distinct_splits(3):
        assert group_splits([[claim_key(claim)]], SPEC) == [SPEC.assign(claim)]
    assert group_key("vitaminc", "1") != group_key("fever", "1")
    assert claim_key("Tilda Swinton is a vegan.") == claim_key("tilda swinton is a VEGAN")
    assert claim_key("Tilda Swinton is a vegan.") == "claim:tildaswintonisavegan"
    # Claims in another script normalize to nothing: they must not all fall into one group.
    assert claim_group_text("東京は首都だ") != claim_group_text("北京是首都")


def test_assign_group_splits_on_records() -> None:
    a, b = claims_in_distinct_splits(2)
    example = ClaimExample(id="x", claim=a, label="SUPPORTS", evidence_text="e", source="vitc", split="?",
                           origin="f:1", group_id="case1")
    partner = ClaimExample(id="y", claim=b, label="REFUTES", evidence_text="e", source="hub_vitc", split="?",
                           origin="f:2", group_id="case1")
    other_ids = ClaimExample(id="z", claim=b + " again", label="REFUTES", evidence_text="e", source="fever",
                             split="?", origin="f:3", group_id="case1")
    pair = NLIPair(id="p", premise="e", hypothesis=a.lower(), label="entailment", source="nli", split="?",
                   origin="f:4")
    doc = CorpusDocument(doc_id="d", title="", url="", text=a, source="corpus", origin="f:5")
    article = ReferenceArticle(id="w", label="correct", paragraphs=["p"], source="wat", split="calib", origin="f:6")
    stats = assign_group_splits(
        {"vitc": [example], "hub_vitc": [partner], "fever": [other_ids], "nli": [pair], "corpus": [doc],
         "wat": [article]},
        SPEC, {"vitc": "vitaminc", "hub_vitc": "vitaminc"},
    )
    smallest = min(a, b, key=claim_key)
    assert example.split == partner.split == pair.split == SPEC.assign(smallest)
    assert other_ids.split == SPEC.assign(other_ids.claim)  # same id, other id space: not joined
    assert article.split == "calib" and record_claim(doc) is None  # no claim: left as the loader set it
    assert stats == {"records": 4, "components": 2, "largest_component": 3, "moved_with_their_group": 1}


def test_fever_symmetric_case_ids() -> None:
    assert symmetric_case_id("54253") == "54253"
    assert symmetric_case_id("542530000002") == symmetric_case_id("542530000004") == "54253"
    assert symmetric_case_id("2043610000003") == "204361"
    assert symmetric_case_id("12345678") == "12345678"  # not the synthetic pattern


# --- the whole prepared set ---------------------------------------------------------------------------------


def prepared_records(out: Path, manifest: dict) -> dict[str, list]:
    return {name: [RECORD_TYPES[info["kind"]].from_dict(r) for _, r in read_jsonl(out / info["file"])]
            for name, info in manifest["outputs"].items()}


def claim_splits(outputs: dict[str, list]) -> dict[str, set[str]]:
    splits: dict[str, set[str]] = defaultdict(set)
    for records in outputs.values():
        for record in records:
            claim = record_claim(record)
            if claim is not None:
                splits[claim_group_text(claim)].add(record.split)
    return splits


@pytest.fixture(scope="module")
def linked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict[str, list]]:
    from fixture_data import build_data_root

    base = tmp_path_factory.mktemp("linked")
    root = add_cross_dataset_links(build_data_root(base / "data"))
    manifest = prepare(PrepConfig(data_root=str(root), output_dir=str(base / "out")))
    return base, manifest, prepared_records(base / "out", manifest)


def test_no_claim_is_in_two_splits_of_any_output(data_root: Path, tmp_path: Path, linked: tuple) -> None:
    plain = prepare(PrepConfig(data_root=str(data_root), output_dir=str(tmp_path / "plain")))
    _, manifest, outputs = linked
    for records in (prepared_records(tmp_path / "plain", plain), outputs):
        leaks = {claim: s for claim, s in claim_splits(records).items() if len(s) > 1}
        assert not leaks
    # The links did tie claims whose own splits differ (else this test would prove nothing).
    assert manifest["split"]["groups"]["moved_with_their_group"] > 0


def test_linked_claims_and_cases_share_one_split(linked: tuple) -> None:
    _, _, outputs = linked
    split_of = {claim_group_text(c): next(iter(s)) for c, s in claim_splits(outputs).items()}
    # FEVER-Symmetric case 54: dev pairs, its synthetic contrast, the test pairs, and the NLI pair of the contrast.
    case = [r for r in outputs["fever_symmetric"] if r.group_id == "54"]
    assert len(case) == 5 and len({r.split for r in case}) == 1
    assert split_of[claim_group_text("Daggering is dancehall.")] == case[0].split
    # paper_dev -claim- RTE -claim- VitaminC case20 -case- its other claim -claim- CLIMATE-FEVER claim 2.
    chain = ["Telemundo is English-language.", "Telemundo is a Spanish network ."]
    assert len({split_of[claim_group_text(c)] for c in chain}) == 1
    climate = [r for name in ("climate_fever_claims", "climate_fever_evidence", "climate_fever_queries")
               for r in outputs[name] if "Telemundo" in (getattr(r, "claim", "") or getattr(r, "text", ""))]
    assert len(climate) == 3 and {r.split for r in climate} == {split_of[claim_group_text(chain[0])]}


def test_retrieval_queries_never_mix_splits(linked: tuple) -> None:
    _, _, outputs = linked
    docs = {d.doc_id: d.text for d in outputs["fever_evidence_corpus"]}
    examples = outputs["fever_symmetric"] + [e for e in outputs["sufficient_facts_fever"]
                                             if e.meta.get("variant") == "original"]
    for query in outputs["fever_evidence_queries"]:
        gold = [e for e in examples if claim_group_text(e.claim) == claim_group_text(query.text)]
        assert gold and {docs[g] for g in query.gold_ids} == {e.evidence_text for e in gold}
        assert {e.split for e in gold} == {query.split}, query.text


def test_splits_do_not_depend_on_the_order_of_datasets(tmp_path: Path, linked: tuple) -> None:
    base, manifest, _ = linked
    reordered = prepare(PrepConfig(data_root=str(base / "data"), output_dir=str(tmp_path),
                                   datasets=list(reversed(list(DATASETS)))))
    assert reordered["outputs"] == manifest["outputs"]


def test_hub_records_join_the_local_groups(monkeypatch: pytest.MonkeyPatch, data_root: Path, tmp_path: Path) -> None:
    rows = {
        # case1 is also a local VitaminC case (fixture test file); this claim is new
        "tals/vitaminc": [{"unique_id": "case1_3", "case_id": "case1", "claim": "Nigeria traced many patients .",
                           "evidence": "Nigeria traced 4,370 cases .", "label": "SUPPORTS", "page": "Nigeria"}],
        # FEVER id 1 and its claim are in the local paper_dev
        "fever": [{"id": 1, "label": "SUPPORTS", "claim": "Soul Food was released by Fox.",
                   "evidence_annotation_id": 1, "evidence_id": 10, "evidence_wiki_url": "Soul_Food",
                   "evidence_sentence_id": 0}],
    }
    monkeypatch.setattr(hub, "_load_dataset", lambda name, config, split: rows[name])
    manifest = prepare(PrepConfig(data_root=str(data_root), output_dir=str(tmp_path), datasets=["fever", "vitaminc"],
                                  hub=["tals/vitaminc:validation", "fever:labelled_dev"]))
    outputs = prepared_records(tmp_path, manifest)
    local_case = {r.split for r in outputs["vitaminc"] if r.group_id == "case1"}
    assert len(local_case) == 1 and outputs["hub_tals_vitaminc_validation"][0].split in local_case
    paper_dev = {r.group_id: r.split for r in outputs["fever_paper_dev"]}
    assert outputs["hub_fever_labelled_dev"][0].split == paper_dev["1"]
    assert not {c: s for c, s in claim_splits(outputs).items() if len(s) > 1}
