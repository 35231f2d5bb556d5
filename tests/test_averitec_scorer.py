"""The old AVeriTeC score (FEVER-8 definition): METEOR, Hungarian matching, threshold, cut, dedup, id join, I/O."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from fever8_files import write_fever8_csv

from veracity import cli
from veracity.data_prep.averitec import flat_pairs, format_fever8_evidence, parse_fever8_evidence, qa_pair
from veracity.data_prep.errors import DataError
from veracity.data_prep.schema import QAAnswer, QAPair
from veracity.infer.eval.averitec import main, read_claims
from veracity.infer.eval.averitec_score import (
    aggregate,
    counts_for_averitec,
    hungarian_score,
    meteor,
    pairwise_scores,
    question_answer_score,
    question_only_score,
    score_claim,
)
from veracity.models.nltk_data import LEXNAMES, NLTKDataError, ensure_nltk_data, lexnames_text


@pytest.fixture(scope="session")
def nltk_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A veracity cache with ``nltk_data`` built once (WordNet from Debian's packages, see scripts/setup.sh)."""
    cache = tmp_path_factory.mktemp("veracity_cache")
    ensure_nltk_data(cache / "nltk_data")
    return cache


def exact(candidate: str, reference: str) -> float:
    """A stand-in metric: 1 for equal strings, else 0, so matchings can be checked by hand."""
    return float(candidate == reference)


def pairs(*questions: str, answer: str = "a") -> list[QAPair]:
    return [qa_pair(q, answer) for q in questions]


# --- METEOR -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("candidate", "reference"), [
    ("Who wrote the letter? Scoopertino did.", "Who wrote the letter to Steve Jobs? It was Scoopertino."),
    ("Did the dogs bark loudly at night?", "Was the dog barking at night"),
    ("The unemployment rate fell to 3.5% in 2019.", "In 2019 unemployment was 3.5 percent"),
    ("completely unrelated words here", "Where was the claim first published"),
])
def test_meteor_is_nltk_single_meteor_score_reference_first(nltk_cache: Path, candidate: str,
                                                            reference: str) -> None:
    from nltk import word_tokenize
    from nltk.translate.meteor_score import single_meteor_score

    expected = single_meteor_score(word_tokenize(reference), word_tokenize(candidate))
    assert meteor(candidate, reference) == pytest.approx(expected, abs=1e-12)


def test_meteor_argument_order_matters(nltk_cache: Path) -> None:
    short, long = "the dog barked", "the dog barked at the mailman all night long"
    assert meteor(short, long) != pytest.approx(meteor(long, short))
    # recall-weighted (alpha 0.9): a short candidate inside a long reference scores low, not the reverse
    assert meteor(short, long) < meteor(long, short)


def test_meteor_identical_strings_hand_checked(nltk_cache: Path) -> None:
    text = "The quick brown fox jumps over the lazy dog near the old river bank"  # 14 tokens, one chunk
    # precision = recall = 1, so Fmean = 1; penalty = 0.5 * (chunks / matches) ** 3 = 0.5 / 14 ** 3
    assert meteor(text, text) == pytest.approx(1 - 0.5 / 14**3, abs=1e-9)
    assert meteor(text, text) > 0.9998


def test_meteor_uses_wordnet_synonyms(nltk_cache: Path) -> None:
    # nltk matches a candidate word's WordNet synonyms against the *stemmed* reference words: "auto" has the
    # synonym "car", whose Porter stem is itself, so all 4 words match in one chunk: 1 - 0.5 * (1/4) ** 3
    assert meteor("the auto is red", "the car is red") == pytest.approx(1 - 0.5 / 4**3)
    # no synonym: 3 of 4 words in 2 chunks, Fmean 0.75 times 1 - 0.5 * (2/3) ** 3 (hand-checked)
    assert meteor("the banana is red", "the car is red") == pytest.approx(0.75 * (1 - 0.5 * (2 / 3) ** 3))
    # "automobile" stems to "automobil", which no synonym of "car" equals (a quirk of nltk's METEOR, kept)
    assert meteor("the car is red", "the automobile is red") == pytest.approx(0.75 * (1 - 0.5 * (2 / 3) ** 3))


def test_tokenization_is_the_2025_scorers(nltk_cache: Path) -> None:
    # nltk >= 3.9.3 splits at dashes ("2025", "—", "the"); the FEVER-8 scorer ran an older nltk, and the split
    # moves the shipped dev scores in the 4th decimal, hence the pin nltk<3.9.3 (pyproject.toml)
    from nltk import word_tokenize

    assert word_tokenize("in 2025—the highest, 1–2 times") == ["in", "2025—the", "highest", ",", "1–2", "times"]


# --- matching ---------------------------------------------------------------------------------------------


def test_hungarian_on_hand_made_2x3_matrix() -> None:
    scores = np.array([[0.9, 0.8, 0.1],
                       [0.85, 0.2, 0.3]])  # 2 predicted × 3 gold
    # greedy would take 0.9 then 0.3 (1.2); the optimum pairs p0-g1 and p1-g0: 0.8 + 0.85 = 1.65, over 3 gold
    assert hungarian_score(scores) == pytest.approx(1.65 / 3)
    # 3 predicted × 2 gold: divided by the 2 gold items, one prediction left unmatched
    assert hungarian_score(scores.T) == pytest.approx(1.65 / 2)
    with pytest.raises(ValueError, match="no gold"):
        hungarian_score(np.zeros((2, 0)))


def test_pairwise_scores_rows_are_predictions_columns_gold() -> None:
    calls = []
    scores = pairwise_scores(["p0", "p1"], ["g0", "g1", "g2"], lambda c, r: calls.append((c, r)) or 0.5)
    assert scores.shape == (2, 3)
    assert calls[:3] == [("p0", "g0"), ("p0", "g1"), ("p0", "g2")]


def test_no_predicted_pairs_scores_zero() -> None:
    assert question_answer_score([], pairs("q1", "q2"), exact) == 0.0
    assert question_only_score([], pairs("q1"), exact) == 0.0


def test_qa_strings_are_question_space_answer() -> None:
    seen = []
    question_answer_score([qa_pair("Who?", "Bob.")], [qa_pair("Q", "A")], lambda c, r: seen.append((c, r)) or 0.0)
    assert seen == [("Who? Bob.", "Q A")]


def test_predictions_cut_to_first_ten_gold_not() -> None:
    gold = pairs("target")
    filler = [f"other {i}" for i in range(9)]
    assert question_answer_score(pairs(*filler, "target"), gold, exact) == 1.0  # 10th pair: kept
    assert question_answer_score(pairs(*filler, "x", "target"), gold, exact) == 0.0  # 11th: cut
    # gold is never cut: 12 gold pairs, the 12th matched by the one prediction
    many_gold = pairs(*[f"g{i}" for i in range(12)])
    assert question_answer_score(pairs("g11"), many_gold, exact) == pytest.approx(1 / 12)


def test_question_only_deduplicates_gold_questions_qa_does_not() -> None:
    gold = [qa_pair("Who said it?", "A"), qa_pair("Who said it?", "B"), qa_pair("When?", "C")]
    predicted = [qa_pair("Who said it?", "A"), qa_pair("When?", "C")]
    assert question_only_score(predicted, gold, exact) == 1.0  # 2 distinct gold questions, both matched
    assert question_answer_score(predicted, gold, exact) == pytest.approx(2 / 3)  # 3 gold pairs, 2 matched
    # predicted questions are not deduplicated: a repeat can match nothing more
    assert question_only_score(pairs("Who said it?", "Who said it?"), gold, exact) == pytest.approx(1 / 2)


def test_a_question_with_several_answers_is_one_pair_per_answer() -> None:
    """The one QAPair (data_prep.schema) holds a question with its answers; the scorers, the judge's text and the
    evi string read it as FEVER-8 flattens it: one (question, answer) pair per answer, none for no answer."""
    nested = [QAPair("Who said it?", [QAAnswer("A"), QAAnswer("B")]), QAPair("Unanswered?"), qa_pair("When?", "C")]
    flat = [qa_pair("Who said it?", "A"), qa_pair("Who said it?", "B"), qa_pair("When?", "C")]
    predicted = [qa_pair("Who said it?", "B"), qa_pair("Unanswered?", "x")]
    for score in (question_only_score, question_answer_score):
        assert score(predicted, nested, exact) == score(predicted, flat, exact)
    assert format_fever8_evidence(nested) == format_fever8_evidence(flat)
    assert parse_fever8_evidence(format_fever8_evidence(nested)) == flat


# --- the old AVeriTeC criterion -------------------------------------------------------------------------------


def test_threshold_is_strict() -> None:
    assert not counts_for_averitec(0.25, "Refuted", "Refuted")
    assert counts_for_averitec(0.25 + 1e-9, "Refuted", "Refuted")
    assert not counts_for_averitec(0.9, "Supported", "Refuted")
    assert not counts_for_averitec(0.9, None, "Refuted")


def test_score_claim_gates_on_qa_not_question_only() -> None:
    gold = [qa_pair("q", "gold answer"), qa_pair("q", "another"), qa_pair("q2", "x"), qa_pair("q3", "y")]
    predicted = [qa_pair("q", "gold answer")]
    claim = score_claim("7", "Refuted", gold, "Refuted", predicted, exact)
    assert claim.q_only == pytest.approx(1 / 3) and claim.qa == pytest.approx(1 / 4)  # Q-only > 0.25, Q+A = 0.25
    assert not claim.counted
    claim = score_claim("7", "Refuted", gold[:3], "Refuted", predicted, exact)
    assert claim.qa == pytest.approx(1 / 3) and claim.counted


def test_aggregate_label_accuracy_and_macro_f1_over_four_verdicts() -> None:
    claims = [score_claim(str(i), g, pairs("q"), p, pairs("q"), exact) for i, (g, p) in enumerate(
        [("Supported", "Supported"), ("Refuted", "Refuted"), ("Refuted", "Supported"), ("Refuted", None)])]
    metrics = aggregate(claims)
    assert metrics["n"] == 4 and metrics["n_missing_predictions"] == 1
    assert metrics["label_accuracy"] == pytest.approx(0.5)
    assert metrics["old_averitec_score"] == pytest.approx(0.5)
    # F1 = 2tp / (2tp + fp + fn): Supported 2/3 (tp 1, fp 1), Refuted 1/2 (tp 1, fn 2), NEE and Conflicting 0:
    # labels absent from gold and predictions still count in the mean, as in the 2024 scorer (labels=verdicts)
    assert metrics["label_f1"]["Supported"] == pytest.approx(2 / 3)
    assert metrics["label_f1"]["Refuted"] == pytest.approx(1 / 2)
    assert metrics["macro_f1"] == pytest.approx((2 / 3 + 1 / 2) / 4)


# --- the CSV format and the job --------------------------------------------------------------------------


def test_evi_parse_and_format_round_trip() -> None:
    evi = "Where was it published\t\t\nOn Scoopertino\t\t\n\nWho runs it?\t\t\nNobody, it's satire.\t\t\n\n"
    parsed = parse_fever8_evidence(evi)
    assert parsed == [qa_pair("Where was it published", "On Scoopertino"),
                      qa_pair("Who runs it?", "Nobody, it's satire.")]
    assert format_fever8_evidence(parsed) == evi
    assert parse_fever8_evidence("") == []
    assert parse_fever8_evidence("q\t\t\n\t\t\n\n") == [qa_pair("q", "")]  # an empty answer is still a pair
    with pytest.raises(ValueError, match="separators"):
        parse_fever8_evidence("a question with no answer separator\t\t\n\n")


GOLD = [("0", "claim zero", [qa_pair("Who wrote the letter to Steve Jobs?", "A satirical website did.")], "Refuted"),
        ("1", "claim one", [qa_pair("When was the bill passed?", "In March 2020.")], "Supported"),
        ("2", "claim two", [qa_pair("Is the photo real?", "No, it is edited.")], "Refuted")]


def test_read_claims_round_trip_from_csv(tmp_path: Path) -> None:
    records = read_claims(write_fever8_csv(tmp_path / "gold.csv", GOLD, "gold"), "gold")
    assert list(records) == ["0", "1", "2"]
    assert records["1"].pairs == GOLD[1][2] and records["1"].label == "Supported"


def test_command_line_joins_on_id_and_writes_metrics(tmp_path: Path, nltk_cache: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VERACITY_CACHE", str(nltk_cache))
    gold = write_fever8_csv(tmp_path / "gold.csv", GOLD, "gold")
    # predictions in another order, claim 1 missing: id 2 must be scored against gold 2, not by position
    predictions = write_fever8_csv(tmp_path / "pred.csv", [GOLD[2], GOLD[0]], "pred")
    out = tmp_path / "run"
    metrics = main(["--predictions", str(predictions), "--gold", str(gold), "--output_dir", str(out),
                    "--progress", "false"])
    saved = json.loads((out / "metrics.json").read_text())
    assert {"q_only", "qa", "old_averitec_score", "label_accuracy", "macro_f1", "n"} <= set(saved)
    assert saved["n"] == 3 and saved["n_missing_predictions"] == 1
    rows = {r["id"]: r for r in map(json.loads, (out / "per_claim.jsonl").read_text().splitlines())}
    assert rows["2"]["qa"] > 0.99 and rows["2"]["counted"] and rows["0"]["counted"]
    assert rows["1"] == {**rows["1"], "pred_label": None, "qa": 0.0, "q_only": 0.0, "counted": False}
    assert saved["old_averitec_score"] == pytest.approx(2 / 3) == metrics["old_averitec_score"]
    assert saved["label_accuracy"] == pytest.approx(2 / 3)
    assert (out / "run_config.yaml").is_file()


def test_json_predictions_match_csv_predictions(tmp_path: Path, nltk_cache: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VERACITY_CACHE", str(nltk_cache))
    gold = write_fever8_csv(tmp_path / "gold.csv", GOLD, "gold")
    as_json = [{"claim_id": int(i), "claim": c, "pred_label": label,
                "evidence": [{"question": q, "answer": a} for q, a in flat_pairs(qa)]}
               for i, c, qa, label in [GOLD[2], GOLD[0]]]
    (tmp_path / "pred.json").write_text(json.dumps(as_json))
    from_json = main(["--predictions", str(tmp_path / "pred.json"), "--gold", str(gold),
                      "--output_dir", str(tmp_path / "a"), "--progress", "false"])
    from_csv = main(["--predictions", str(write_fever8_csv(tmp_path / "pred.csv", [GOLD[2], GOLD[0]], "pred")),
                     "--gold", str(gold), "--output_dir", str(tmp_path / "b"), "--progress", "false"])
    assert {k: from_json[k] for k in ("q_only", "qa", "old_averitec_score")} == \
        {k: from_csv[k] for k in ("q_only", "qa", "old_averitec_score")}


def test_gold_json_in_the_official_layout(tmp_path: Path) -> None:
    official = [{"claim": "c", "label": "Refuted", "questions": [
        {"question": "Is it true?", "answers": [{"answer": "No", "answer_type": "Boolean",
                                                 "boolean_explanation": "it was staged"}]},
        {"question": "Who?", "answers": [{"answer": "X", "answer_type": "Extractive"},
                                         {"answer": "Y", "answer_type": "Abstractive"}]}]}]
    (tmp_path / "dev.json").write_text(json.dumps(official))
    record = read_claims(tmp_path / "dev.json", "gold")["0"]  # no id: its position, as FEVER-8 numbers dev
    assert record.pairs == [qa_pair("Is it true?", "No. it was staged"), qa_pair("Who?", "X"), qa_pair("Who?", "Y")]


def test_bad_files_exit_2_naming_file_line_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gold = write_fever8_csv(tmp_path / "gold.csv", GOLD, "gold")
    no_evi = tmp_path / "no_evi.csv"
    no_evi.write_text("id,claim,label,split\n0,c,Refuted,pred\n")
    argv = ["--predictions", str(no_evi), "--gold", str(gold), "--output_dir", str(tmp_path / "o")]
    with pytest.raises(DataError) as error:
        main(argv)
    assert str(error.value).startswith(f"{no_evi}:1: field 'evi'")
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:  # through the command: one line, exit status 2
        cli.main(["eval", "averitec", *argv])
    assert info.value.code == 2 and capsys.readouterr().err == f"error: {error.value}\n"

    rows = [*GOLD[:2], ("2", "claim two", [], "Refuted")]
    malformed = write_fever8_csv(tmp_path / "malformed.csv", rows, "pred")
    question = '"When was the bill passed?'
    text = malformed.read_text().replace(question + "\t\t\nIn March 2020.", question)  # answer and separator gone
    malformed.write_text(text)
    with pytest.raises(DataError) as info:
        main(["--predictions", str(malformed), "--gold", str(gold), "--output_dir", str(tmp_path / "o")])
    err = str(info.value)
    # records span several lines (evi holds newlines): the error names the line where id 1's record starts
    line = next(n for n, row in enumerate(text.splitlines(), start=1) if row.startswith("1,claim one,"))
    assert line == 6 and f"{malformed}:{line}: field 'evi'" in err  # header, then id 0 on lines 2-5

    bad_label = write_fever8_csv(tmp_path / "bad_label.csv", [(*GOLD[0][:3], "False")], "pred")
    with pytest.raises(DataError, match="field 'label'"):
        main(["--predictions", str(bad_label), "--gold", str(gold), "--output_dir", str(tmp_path / "o")])
    not_utf8 = tmp_path / "latin1.csv"
    not_utf8.write_bytes("id,claim,label,split,evi\n0,caf\u00e9,Refuted,pred,\n".encode("latin-1"))
    with pytest.raises(DataError, match=f"^{not_utf8}: 'utf-8' codec can't decode"):
        main(["--predictions", str(not_utf8), "--gold", str(gold), "--output_dir", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists(), "nothing is written when the input is bad"


def test_lexnames_is_the_wordnet_30_table() -> None:
    lines = lexnames_text().splitlines()
    assert len(lines) == len(LEXNAMES) == 45
    assert lines[0] == "00\tadj.all\t3" and lines[3] == "03\tnoun.Tops\t1" and lines[44] == "44\tadj.ppl\t3"


def test_missing_wordnet_names_the_apt_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import veracity.models.nltk_data as nltk_data

    monkeypatch.setenv(nltk_data.WORDNET_ENV, str(tmp_path / "empty"))
    monkeypatch.setattr(nltk_data, "DEBIAN_WORDNET_DIR", tmp_path / "nowhere")
    monkeypatch.setattr(nltk_data, "_dpkg_wordnet_dirs", lambda: [])
    with pytest.raises(NLTKDataError, match="apt-get install -y wordnet-base wordnet-sense-index"):
        ensure_nltk_data(tmp_path / "nltk_data")
    assert not (tmp_path / "nltk_data").exists()
