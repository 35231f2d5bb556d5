"""Loaders on hand-made fixtures: golden {count, sha256} per output, plus the meaning of the records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from veracity.data_prep.prepare import DATASETS, PrepConfig, main, prepare, resolve_data_root
from veracity.data_prep.readers import read_jsonl
from veracity.data_prep.schema import RECORD_TYPES, ClaimExample

# Regenerate deliberately (and review the diff of the records) when a loader's output is meant to change.
GOLDEN: dict[str, tuple[int, str]] = {
    "averitec_dev": (2, "f1d6c1a5aa73762ec611f353ffb4a02b205d07d38aa974849a1462473102648a"),
    "averitec_fever8_gold_dev": (2, "4d4b30542723813a3e2f30e5e20d0e4fa13c3932970737260cd4ebba3bf7c133"),
    "averitec_fever8_hero_dev": (2, "ad276861416197f6396e373326eb4470321093525492e6136d7112985faf19cd"),
    "averitec_fever8_mmr_qwen3_dev": (2, "8c1e12ea79d0b87c3f6e4c75df1213260084714b0720784f5b150d05ac73fcdf"),
    "averitec_task3_dev": (2, "b7fac39ae4b0bf67339fec8a673f6f7dd61a83679e6b525db9a1a37eeb40d6a6"),
    "averitec_task3_train": (2, "dc256b143a1fe8889f4ca2ca74668887cc84bab38aba49d0d348d655c12ad45b"),
    "averitec_train": (2, "483ed241510fb99f07cccfd0b20bf286484a3bf1acd50da67993c51b875399bc"),
    "checkthat4b_queries": (4, "b2d0f4835d95649073ab75ea830aa21a534a5b94cdbfde896dadd0b2d136c0c7"),
    "climate_fever_claims": (1, "8d9a845af80feff3a1bb9e9735017b0a06a162b50aa8a718e7b2862c071b85ed"),
    "climate_fever_corpus": (2, "44d2f68b0efafd29ed6af81a0eee2aada75a6368d5e08264c3c6b02f31a6e646"),
    "climate_fever_evidence": (3, "7e9f16113dac7e30aacb3e7e0d6490f867fdf191b8dad6a14a1d95db0a10bfa8"),
    "climate_fever_queries": (2, "fc7f1f7d6d27b9d190535da58da0f7926c2a5cd8c1abf0431b8e01a38de0e80e"),
    "fever_evidence_corpus": (4, "83ed039f1e622deb1c1ad0990945a21d37af29abecc4fd71ea11157da8216db8"),
    "fever_evidence_queries": (4, "97925933fc6494ba591f3215b4eb8a874c8c58ab3e374a82e4648790d9f2e7ea"),
    "fever_paper_dev": (3, "fc16d2945f92afd913a0b82177b4a785cdee655deac694e0fc199ffb9c96feb3"),
    "fever_symmetric": (4, "9549b887958743e66a11b208e691ac85bd035e80a7c48733f7d820a7057c1cbc"),
    "fever_wiki_paragraphs": (1, "137448e5172b89d4fe7f04415899031eb406ff29ae513ddf8b5fc4a75743110c"),
    "nli_fever_dev_rte": (2, "39defd0a6da04cffa45c535d88d75b0af1453fabedffb045f9402fece4ef69cb"),
    "nli_sick": (2, "7745faa62a88e65014cc90330ee2502349faedc63dd63ef1f6033c4304b6bdb4"),
    "sufficient_facts_fever": (4, "be0b8ccbc3c9bed908802d6d1489c4018f572235ea1a323c58d44f7fac334383"),
    "sufficient_facts_vitaminc": (2, "47c97435e827e0e9adbe648d8a825f08315f96def35eb443c3068c062f0a4339"),
    "vitaminc": (7, "6da482cfd0c243cceaa8c1605c81dd239d1906b476eb8d13b6cfd243d3bf8c60"),
    "watclaimcheck_articles": (2, "970fdfd88b4735b38a59eb39f25158cabf7a4b627bb52bcc7eae305423e5b985"),
}


@pytest.fixture(scope="module")
def prepared(data_root: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("prep")
    return out, prepare(PrepConfig(data_root=str(data_root), output_dir=str(out)))


def records(out: Path, name: str) -> list[dict]:
    return [row for _, row in read_jsonl(out / f"{name}.jsonl")]


def test_golden_counts_and_hashes(prepared: tuple[Path, dict]) -> None:
    _, manifest = prepared
    got = {name: (info["records"], info["sha256"]) for name, info in manifest["outputs"].items()}
    assert got == GOLDEN


def test_every_output_round_trips_through_its_record_type(prepared: tuple[Path, dict]) -> None:
    out, manifest = prepared
    for name, info in manifest["outputs"].items():
        cls = RECORD_TYPES[info["kind"]]
        for row in records(out, name):
            assert cls.from_dict(row).to_dict() == row


def test_same_command_twice_is_byte_identical(data_root: Path, tmp_path: Path) -> None:
    for run in ("a", "b"):
        main(["--data_root", str(data_root), "--output_dir", str(tmp_path / run)])
    files = sorted(p.name for p in (tmp_path / "a").iterdir() if p.name != "run_config.yaml")
    assert "manifest.json" in files and len(files) > 20
    for name in files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_fever_paper_dev(prepared: tuple[Path, dict]) -> None:
    out, manifest = prepared
    rows = {r["id"]: r for r in records(out, "fever_paper_dev")}
    assert set(rows) == {"fever-1", "fever-2", "fever-3"}  # the whitespace-only claim is filtered
    assert manifest["outputs"]["fever_paper_dev"]["events"] == {"filtered:empty_claim": 1}
    assert rows["fever-1"]["evidence_sets"] == [["Soul_Food:0"], ["Soul_Food:0", "Fox:2"]]
    assert [p["passage_id"] for p in rows["fever-1"]["evidence"]] == ["Soul_Food:0", "Fox:2"]
    assert rows["fever-1"]["evidence_text"] == "Soul Food is a film released by Fox 2000 Pictures ."
    assert rows["fever-2"]["label"] == "REFUTES"
    assert rows["fever-3"]["label"] == "NOT ENOUGH INFO" and rows["fever-3"]["evidence_sets"] == []
    assert rows["fever-1"]["origin"] == "fever/paper_dev.shared.jsonl:1"


def test_fever_evidence_resolves_against_wiki_pages(data_root: Path, tmp_path: Path) -> None:
    wiki = tmp_path / "wiki-pages"
    wiki.mkdir()
    pages = [
        {"id": "Soul_Food", "text": "", "lines": "0\tSoul Food is a 1997 film .\tFilm\n1\tIt was a hit ."},
        {"id": "Fox", "text": "", "lines": "0\tFox is a studio .\n1\t\n2\tFox released Soul Food ."},
        {"id": "Unrelated", "text": "", "lines": "0\tNothing ."},
    ]
    (wiki / "wiki-001.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pages))
    config = PrepConfig(data_root=str(data_root), output_dir=str(tmp_path / "o"), datasets=["fever"],
                        fever_wiki_pages=str(wiki))
    prepare(config)
    rows = {r["id"]: r for r in records(tmp_path / "o", "fever_paper_dev")}
    assert rows["fever-1"]["evidence_text"] == "Soul Food is a 1997 film ."  # first complete set
    assert [p["text"] for p in rows["fever-1"]["evidence"]] == ["Soul Food is a 1997 film .",
                                                                 "Fox released Soul Food ."]
    assert rows["fever-2"]["evidence_text"] == ""  # Telemundo page absent from this dump
    assert rows["fever-1"]["meta"]["evidence_resolved_by"] == "wiki-pages"


def test_fever_symmetric_cases_share_a_split(prepared: tuple[Path, dict]) -> None:
    out, _ = prepared
    rows = records(out, "fever_symmetric")
    assert [r["id"] for r in rows] == ["fs-dev-54-1", "fs-dev-540000001-1", "fs-test-54-1",
                                      "fs-test-540000001-1"]
    assert len({r["split"] for r in rows}) == 1


def test_sufficient_facts_gives_original_and_reduced_views(prepared: tuple[Path, dict]) -> None:
    out, _ = prepared
    rows = records(out, "sufficient_facts_fever")
    by_variant = {(r["claim"], r["meta"]["variant"]): r for r in rows}
    orig = by_variant[("Hezbollah got training from Iran.", "original")]
    reduced = by_variant[("Hezbollah got training from Iran.", "reduced")]
    assert orig["label"] == "SUPPORTS" and orig["evidence_text"] == "Hezbollah gets training from Iran ."
    assert reduced["label"] == "NOT ENOUGH INFO" and reduced["evidence_text"] == "Hezbollah gets training"
    # Both views carry the article title: a title only on the reduced view would tell a verifier the label.
    assert [e["title"] for e in orig["evidence"]] == [e["title"] for e in reduced["evidence"]] == ["Page"]
    # "ENOUGH -- IRRELEVANT": the removed part did not matter, the label stays
    assert by_variant[("Gray Matters is a horror film.", "reduced")]["label"] == "REFUTES"
    assert orig["split"] == reduced["split"]


def test_sufficient_facts_original_splits_at_each_title() -> None:
    from veracity.data_prep.fever import original_passages

    passages = original_passages('[[Alvin (film)]] It had <span style="color:red;">three</span> sequels . '
                                 "[[Fox]] Fox released it .")
    assert [(p.title, p.text) for p in passages] == [("Alvin (film)", "It had three sequels ."),
                                                     ("Fox", "Fox released it .")]
    assert [p.text for p in original_passages("no title here")] == ["no title here"]


def test_react_paragraphs_drop_misses_and_duplicates(prepared: tuple[Path, dict]) -> None:
    out, manifest = prepared
    rows = records(out, "fever_wiki_paragraphs")
    assert [(r["title"], r["text"]) for r in rows] == [("Soul Food", "Soul Food is a 1997 film.")]
    assert rows[0]["url"] == "https://en.wikipedia.org/wiki/Soul_Food"
    assert manifest["outputs"]["fever_wiki_paragraphs"]["events"] == {
        "filtered:api_miss_or_lookup": 1, "filtered:duplicate_paragraph": 1}


def test_vitaminc_labels_and_cases(prepared: tuple[Path, dict]) -> None:
    out, _ = prepared
    rows = {r["id"]: r for r in records(out, "vitaminc")}
    assert rows["vitc-case1_1"]["label"] == "NOT ENOUGH INFO" and rows["vitc-case1_2"]["label"] == "REFUTES"
    assert rows["vitc-case1_1"]["split"] == rows["vitc-case1_2"]["split"]  # contrastive pair kept together
    assert rows["vitc-case10_1"]["source_split"] == "train" and rows["vitc-case1_1"]["source_split"] == "test"
    assert len(rows) == 7


def test_climate_fever_outputs(prepared: tuple[Path, dict]) -> None:
    out, manifest = prepared
    claims = records(out, "climate_fever_claims")
    assert [c["id"] for c in claims] == ["cf-0"]  # DISPUTED excluded and counted
    assert manifest["outputs"]["climate_fever_claims"]["events"] == {"filtered:excluded_label_DISPUTED": 1}
    pairs = records(out, "climate_fever_evidence")
    assert [(p["id"], p["label"], p["meta"]["votes"]) for p in pairs] == [  # empty votes dropped, labels ternary
        ("cf-0-0", "SUPPORTS", ["SUPPORTS", "SUPPORTS"]),
        ("cf-0-1", "NOT ENOUGH INFO", ["SUPPORTS", "NOT ENOUGH INFO"]),
        ("cf-1-0", "REFUTES", [])]
    corpus = records(out, "climate_fever_corpus")
    assert [d["doc_id"] for d in corpus] == ["Global warming:14", "Bees:1"]
    queries = records(out, "climate_fever_queries")
    assert [(q["query_id"], q["gold_ids"]) for q in queries] == [
        ("cf-0", ["Global warming:14"]), ("cf-1", ["Global warming:14"])]


def test_averitec_outputs(prepared: tuple[Path, dict]) -> None:
    out, manifest = prepared
    dev = records(out, "averitec_dev")
    assert [c["id"] for c in dev] == ["dev-0", "dev-2"]  # official ids: position in file, empty claim filtered
    assert dev[0]["questions"][0]["answers"][1]["answer_type"] == "Extractive"
    assert dev[0]["origin"] == "averitec/dev.json:2"
    assert manifest["outputs"]["averitec_dev"]["events"] == {"filtered:empty_claim": 1}
    gold = records(out, "averitec_fever8_gold_dev")
    assert [(q["question"], q["answers"][0]["answer"]) for q in gold[0]["questions"]] == [
        ("Where?", "On a satire site."), ("Who?", "Nobody.")]
    assert gold[1]["questions"] == []
    task3 = records(out, "averitec_task3_dev")
    assert task3[0]["evidence"] == [{"text": "On a satire site. It says so on its about page.",
                                     "url": "https://a.example/1", "title": "", "passage_id": ""}]
    assert task3[0]["reference_article"] == "Satire." and task3[1]["claimant"] == "A politician"



def test_outputs_only_the_golden_hashes_covered(prepared: tuple[Path, dict]) -> None:
    """The golden hashes above are regenerated from the loaders, so they only say "unchanged". These outputs had
    no other check: their content, written down by hand from tests/fixture_data.py."""
    out, manifest = prepared
    train = records(out, "averitec_train")
    assert [(c["id"], c["claim"], c["label"], c["source_split"], c["speaker"]) for c in train] == [
        ("train-0", "Sean Connery wrote to Steve Jobs (train).", "Refuted", "train", ""),  # null reads as ""
        ("train-2", "Billie Eilish is destroying the country.", "Conflicting Evidence/Cherrypicking", "train",
         "A politician")]  # train-1, the empty claim, is dropped and keeps its position in the numbering
    assert train[0]["origin"] == "averitec/train_first1158.json:2" and train[0]["claim_date"] == "31-10-2020"
    assert [a["answer_type"] for a in train[0]["questions"][0]["answers"]] == ["Abstractive", "Extractive"]
    assert manifest["outputs"]["averitec_train"]["events"] == {"filtered:empty_claim": 1}
    task3 = records(out, "averitec_task3_train")
    assert [(t["id"], t["claimant"], t["reference_article"]) for t in task3] == [
        ("train-0", "", "Satire."), ("train-2", "A politician", "")]
    assert task3[0]["evidence"] == [{"text": "On a satire site. It says so on its about page.",
                                     "url": "https://a.example/1", "title": "", "passage_id": ""}]
    assert task3[1]["evidence"] == []
    for name in ("averitec_fever8_hero_dev", "averitec_fever8_mmr_qwen3_dev"):  # the fixture's CSV, as gold
        rows = records(out, name)
        assert [(c["id"], c["claim"], c["label"], c["source_split"]) for c in rows] == [
            ("dev-0", "Sean Connery wrote to Jobs.", "Refuted", "gold"), ("dev-1", "Billie Eilish.", "Supported",
                                                                          "gold")], name
        assert [(q["question"], [a["answer"] for a in q["answers"]]) for q in rows[0]["questions"]] == [
            ("Where?", ["On a satire site."]), ("Who?", ["Nobody."])], name
        assert rows[1]["questions"] == [] and {c["source"] for c in rows} == {name}
    views = {r["meta"]["variant"]: r for r in records(out, "sufficient_facts_vitaminc")}
    assert set(views) == {"original", "reduced"}
    assert (views["original"]["label"], views["original"]["evidence_text"]) == (
        "SUPPORTS", "UNESCO runs it since 2004 .")
    assert (views["reduced"]["label"], views["reduced"]["evidence_text"]) == ("NOT ENOUGH INFO", "UNESCO runs it")
    assert views["original"]["claim"] == views["reduced"]["claim"] == "UNESCO launched it in 2004 ."
    assert views["original"]["split"] == views["reduced"]["split"]

def test_fever8_evidence_round_trip() -> None:
    from veracity.data_prep.averitec import format_fever8_evidence, parse_fever8_evidence

    packed = "Q1?\t\t\nA1.\t\t\n\nQ2?\t\t\nA2.\t\t\n\n"
    assert format_fever8_evidence(parse_fever8_evidence(packed)) == packed


def test_checkthat_queries(prepared: tuple[Path, dict]) -> None:
    out, _ = prepared
    rows = records(out, "checkthat4b_queries")
    assert [(r["query_id"], r["gold_ids"], r["source_split"]) for r in rows] == [
        ("16", ["uidtrain1"], "train"), ("69", ["uidtrain2"], "train"),
        ("17", ["uiddev1"], "dev"), ("70", ["uiddev2"], "dev")]
    assert rows[1]["text"] == '"quoted" tweet, with comma'


def test_watclaimcheck_and_nli(prepared: tuple[Path, dict]) -> None:
    out, _ = prepared
    articles = records(out, "watclaimcheck_articles")
    assert [(a["id"], a["label"], len(a["paragraphs"])) for a in articles] == [
        ("wat-19", "correct", 2), ("wat-20", "partly false", 1)]
    sick = records(out, "nli_sick")
    assert [(p["id"], p["label"]) for p in sick] == [("nli_sick/sick:1", "entailment"), ("nli_sick/sick:2", "neutral")]
    rte = records(out, "nli_fever_dev_rte")
    assert {p["label"] for p in rte} == {"entailment", "contradiction"}


def test_claim_split_is_consistent_across_datasets(prepared: tuple[Path, dict]) -> None:
    out, _ = prepared
    paper = {r["claim"]: r["split"] for r in records(out, "fever_paper_dev")}
    rte = {r["hypothesis"]: r["split"] for r in records(out, "nli_fever_dev_rte")}
    shared = set(paper) & set(rte)
    assert shared and all(paper[c] == rte[c] for c in shared)


def test_yaml_config_and_cli_override(data_root: Path, tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"data_root: {data_root}\noutput_dir: {tmp_path / 'from_yaml'}\ndatasets: [checkthat]\n")
    manifest = main(["--config", str(config), "--datasets", "watclaimcheck"])
    assert list(manifest["outputs"]) == ["watclaimcheck_articles"]  # the CLI flag overrides the YAML
    assert (tmp_path / "from_yaml" / "run_config.yaml").exists()


def test_data_root_resolution(monkeypatch: pytest.MonkeyPatch, data_root: Path, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VERACITY_DATA_ROOT", str(data_root))
    assert resolve_data_root(None) == data_root.resolve()
    monkeypatch.delenv("VERACITY_DATA_ROOT")
    with pytest.raises(FileNotFoundError, match="--data_root"):
        resolve_data_root(None)
    with pytest.raises(ValueError, match="unknown dataset"):
        PrepConfig(datasets=["nope"])


def test_every_dataset_is_prepared(prepared: tuple[Path, dict]) -> None:
    _, manifest = prepared
    sources = {info["inputs"][0]["path"].split("/")[0] for info in manifest["outputs"].values()}
    assert sources == {"fever", "fever_symmetric", "vitaminc", "climate_fever", "averitec",
                       "checkthat_2025_task4b", "watclaimcheck_flawcheck", "nli"}
    assert set(DATASETS) == {"fever", "vitaminc", "climate_fever", "averitec", "checkthat", "watclaimcheck", "nli"}


def test_claim_example_type() -> None:
    example = ClaimExample(id="x", claim="c", label="SUPPORTS", evidence_text="e", source="s", split="dev",
                           origin="f:1")
    assert ClaimExample.from_dict(example.to_dict()) == example


def test_fever_evidence_retrieval_benchmark(prepared: tuple[Path, dict]) -> None:
    out, _ = prepared
    corpus = {d["doc_id"]: d["text"] for d in records(out, "fever_evidence_corpus")}
    queries = records(out, "fever_evidence_queries")
    assert len(corpus) == 4  # 2 distinct FEVER-Symmetric evidence sentences (shared by dev and test) + 2 originals
    by_claim = {q["text"]: [corpus[g] for g in q["gold_ids"]] for q in queries}
    assert by_claim["Daggering is death metal ."] == ["Evidence one .", "Evidence two ."]
    assert by_claim["Hezbollah got training from Iran."] == ["Hezbollah gets training from Iran ."]
