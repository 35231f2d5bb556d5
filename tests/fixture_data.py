"""Tiny hand-made datasets in the layout of ../shared/data, one or two rows per case a loader must handle."""

from __future__ import annotations

import json
from pathlib import Path

from veracity.infer.pipelines.r2vc.prompt import format_answer


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _sufficient(claim: str, before: str, after: str, kept: str, removed: str) -> dict:
    return {
        "claim": claim, "evidence": [["Page", kept]], "label_before": before, "label_after": after,
        "agreement": "all_nei", "type": "PP", "removed": [removed],
        "text_orig": f'[[Page]] {kept} <span style="color:red;">{removed}</span> .',
    }


def build_data_root(root: Path) -> Path:
    """Write every dataset the loaders know, small, under ``root``."""
    _jsonl(root / "fever/paper_dev.shared.jsonl", [
        {"id": 1, "verifiable": "VERIFIABLE", "label": "SUPPORTS", "claim": "Soul Food was released by Fox.",
         "evidence": [[[10, 100, "Soul_Food", 0]], [[11, 101, "Soul_Food", 0], [11, 102, "Fox", 2]]]},
        {"id": 2, "verifiable": "VERIFIABLE", "label": "REFUTES", "claim": "Telemundo is English-language.",
         "evidence": [[[12, 103, "Telemundo", 0]]]},
        {"id": 3, "verifiable": "NOT VERIFIABLE", "label": "NOT ENOUGH INFO", "claim": "Tilda Swinton is a vegan.",
         "evidence": [[[13, None, None, None]]]},
        {"id": 4, "verifiable": "NOT VERIFIABLE", "label": "NOT ENOUGH INFO", "claim": "  ",
         "evidence": [[[14, None, None, None]]]},
    ])
    _jsonl(root / "nli/fever_dev_rte/rte_fever_dev.part0.jsonl", [
        {"line": 0, "paper_dev_shared_ids": [1], "premise": "Soul Food is a film released by Fox 2000 Pictures .",
         "hypothesis": "Soul Food was released by Fox.", "label": "entailment"},
    ])
    _jsonl(root / "nli/fever_dev_rte/rte_fever_dev.part1.jsonl", [
        {"line": 1, "paper_dev_shared_ids": [2], "premise": "Telemundo is a Spanish-language network .",
         "hypothesis": "Telemundo is English-language.", "label": "contradiction"},
    ])
    _jsonl(root / "nli/sick/sick.jsonl", [
        {"pair_ID": 1, "premise": "A man is playing a guitar.", "hypothesis": "A person plays music.",
         "label": "entailment"},
        {"pair_ID": 2, "premise": "A dog runs.", "hypothesis": "The dog is sleeping.", "label": "neutral"},
    ])
    for split, claim in (("dev", "Daggering is death metal ."), ("test", "Colombiana is a French film .")):
        _jsonl(root / f"fever_symmetric/fever_symmetric_{split}.shared.jsonl", [
            {"id": "54", "claim": claim, "evidence": "Evidence one .", "label": "REFUTES", "gold_label": "REFUTES"},
            {"id": "540000001", "claim": claim, "evidence": "Evidence two .", "label": "SUPPORTS",
             "gold_label": "SUPPORTS"},  # a contrast of case 54: the case id followed by 000000 and the pair
        ])
    _jsonl(root / "fever/sufficient_facts_fever.shared.jsonl", [
        _sufficient("Hezbollah got training from Iran.", "SUPPORTS", "NOT ENOUGH", "Hezbollah gets training",
                    "from Iran"),
        _sufficient("Gray Matters is a horror film.", "REFUTES", "ENOUGH -- IRRELEVANT", "It is a comedy", "2006"),
    ])
    _jsonl(root / "fever/react_wikipedia_observations.shared.jsonl", [
        {"paper_dev_line": 0, "fever_id": 1, "claim": "Soul Food was released by Fox.", "label": "SUPPORTS",
         "observations": [
             {"action": "Search[Soul Food]", "observation": "Soul Food is a 1997 film."},
             {"action": "Search[Fox 2000]", "observation": "Could not find [Fox 2000]. Similar: []"},
             {"action": "Search[Soul Food film]", "observation": "Soul Food is a 1997 film."},
         ]},
    ])
    vitc = "vitaminc/lifelong_icl_sample"
    _jsonl(root / f"{vitc}/test.shared.jsonl", [
        {"claim": "Nigeria traced patients .", "evidence": "Nigeria traced 4,370 cases .", "label": "not enough info",
         "id": "case1_1"},
        {"claim": "Nigeria traced no patients .", "evidence": "Nigeria traced 4,370 cases .", "label": "refutes",
         "id": "case1_2"},
    ])
    for i in range(5):
        _jsonl(root / f"{vitc}/train_{i}.shared.jsonl", [
            {"claim": f"Claim {i} .", "evidence": f"Evidence {i} .", "label": "supports", "id": f"case{10 + i}_1"},
        ])
    _jsonl(root / "vitaminc/sufficient_facts_vitaminc.shared.jsonl", [
        _sufficient("UNESCO launched it in 2004 .", "SUPPORTS", "NOT ENOUGH", "UNESCO runs it", "since 2004"),
    ])
    ev = {"entropy": 0.0}
    _jsonl(root / "climate_fever/climate-fever.shared.jsonl", [
        {"claim_id": "0", "claim": "Global warming drives polar bears to extinction", "claim_label": "SUPPORTS",
         "evidences": [
             {"evidence_id": "Global warming:14", "evidence_label": "SUPPORTS", "article": "Global warming",
              "evidence": "Impacts include extinction of species.", "votes": ["SUPPORTS", "SUPPORTS", None], **ev},
             {"evidence_id": "Bees:1", "evidence_label": "NOT_ENOUGH_INFO", "article": "Bees",
              "evidence": "Bees are insects.", "votes": ["SUPPORTS", "NOT_ENOUGH_INFO"], **ev},
         ]},
        {"claim_id": "1", "claim": "Sea level rise is disputed", "claim_label": "DISPUTED",
         "evidences": [
             {"evidence_id": "Global warming:14", "evidence_label": "REFUTES", "article": "Global warming",
              "evidence": "Impacts include extinction of species.", "votes": [], **ev},
         ]},
    ])
    qa = [{"question": "Where was it published?", "answers": [
        {"answer": "On a satire site.", "answer_type": "Abstractive", "source_url": "https://a.example/1",
         "source_medium": "Web text"},
        {"answer": "It says so on its about page.", "answer_type": "Extractive", "source_url": "https://a.example/1"},
    ]}]
    for split in ("dev", "train"):
        name = "dev.json" if split == "dev" else "train_first1158.json"
        _text(root / f"averitec/{name}", json.dumps([
            {"claim": f"Sean Connery wrote to Steve Jobs ({split}).", "label": "Refuted", "justification": "Satire.",
             "speaker": None, "claim_date": "31-10-2020", "questions": qa},
            {"claim": "", "label": "Supported", "questions": []},
            {"claim": "Billie Eilish is destroying the country.", "label": "Conflicting Evidence/Cherrypicking",
             "speaker": "A politician", "questions": []},
        ], indent=4))
    csv_text = 'id,claim,evi,label,split\n0,"Sean Connery wrote to Jobs.","Where?\t\t\nOn a satire site.\t\t\n\n' \
               'Who?\t\t\nNobody.\t\t\n\n",Refuted,gold\n1,Billie Eilish.,,Supported,gold\n'
    for name in ("solution_dev.csv", "baseline_hero_submission_dev.csv", "heruberuto_mmr_qwen3_submission_dev.csv"):
        _text(root / f"averitec/fever8_leaderboard_format/{name}", csv_text)
    for split, (first, second) in (("train", (16, 69)), ("dev", (17, 70))):  # post ids are unique across splits
        _text(root / f"checkthat_2025_task4b/subtask4b_query_tweets_{split}.tsv",
              f"post_id\ttweet_text\tcord_uid\n{first}\tcovid {split} study: masks work\tuid{split}1\n"
              f'{second}\t"""quoted"" tweet, with comma"\tuid{split}2\n')
    _jsonl(root / "watclaimcheck_flawcheck/review_articles_train_sample500.shared.jsonl", [
        {"wat_id": 19, "flawcheck_split": "train", "label": "correct", "review_article": ["Para one.", "Para two."]},
        {"wat_id": 20, "flawcheck_split": "train", "label": "partly false", "review_article": ["Only one."]},
    ])
    return root


def add_cross_dataset_links(root: Path) -> Path:
    """Append rows that tie claims together across datasets, as the real data does (a FEVER-Symmetric contrast
    of case 54, the same claim as an NLI hypothesis, a VitaminC case reusing a FEVER paper_dev claim)."""

    def append(relative: str, rows: list[dict]) -> None:
        path = root / relative
        path.write_text(path.read_text(encoding="utf-8") + "".join(json.dumps(r) + "\n" for r in rows),
                        encoding="utf-8")

    append("fever_symmetric/fever_symmetric_dev.shared.jsonl", [
        {"id": "540000002", "claim": "Daggering is dancehall .", "evidence": "Evidence one .", "label": "SUPPORTS",
         "gold_label": "SUPPORTS"},
    ])
    append("nli/sick/sick.jsonl", [
        {"pair_ID": 3, "premise": "Daggering is a dance.", "hypothesis": "Daggering is dancehall.",
         "label": "entailment"},
    ])
    vitc = "vitaminc/lifelong_icl_sample"
    append(f"{vitc}/train_0.shared.jsonl", [
        {"claim": "Telemundo is English-language .", "evidence": "Telemundo is Spanish .", "label": "refutes",
         "id": "case20_1"},
        {"claim": "Telemundo is a Spanish network .", "evidence": "Telemundo is Spanish .", "label": "supports",
         "id": "case20_2"},
    ])
    append("climate_fever/climate-fever.shared.jsonl", [
        {"claim_id": "2", "claim": "Telemundo is a Spanish network", "claim_label": "SUPPORTS", "evidences": [
            {"evidence_id": "Telemundo:0", "evidence_label": "SUPPORTS", "article": "Telemundo",
             "evidence": "Telemundo is a Spanish-language network.", "votes": ["SUPPORTS"], "entropy": 0.0}]},
    ])
    return root


def write_tiny_training_sets(folder: Path, records: int = 12, numbered: bool = False) -> tuple[Path, Path]:
    """``sft.jsonl`` and ``dpo.jsonl`` in ``folder``: ``records`` R2VC answers over three facts in turn (gold answer
    as the SFT completion and DPO chosen, a wrong label as rejected); ``numbered`` puts the record's number in its
    prompt, so each tokenized example names one record."""
    facts = [("Paris is in France.", "Paris is the capital of France.", "SUPPORTS", "NOT ENOUGH INFO"),
             ("Oslo is in Peru.", "Oslo is the capital of Norway.", "REFUTES", "SUPPORTS"),
             ("Bob likes tea.", "Bob was born in 1970.", "NOT ENOUGH INFO", "REFUTES")]
    sft, dpo = [], []
    for number in range(records):
        claim, evidence, label, wrong = facts[number % len(facts)]
        prompt = [{"role": "user", "content": f"Claim{f' {number}' if numbered else ''}: {claim}\n[1] {evidence}"}]
        good = format_answer(label, f"[1] says {evidence}", [] if label == "NOT ENOUGH INFO" else [1])
        bad = format_answer(wrong, f"[1] says {evidence}", [1])
        sft.append({"prompt": prompt, "completion": [{"role": "assistant", "content": good}]})
        dpo.append({"prompt": prompt, "chosen": [{"role": "assistant", "content": good}],
                    "rejected": [{"role": "assistant", "content": bad}]})
    paths = folder / "sft.jsonl", folder / "dpo.jsonl"
    for path, rows in zip(paths, (sft, dpo), strict=True):
        _jsonl(path, rows)
    return paths
