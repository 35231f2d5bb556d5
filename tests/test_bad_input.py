"""Every kind of bad input is an error that names file, line and field; --skip_invalid counts and logs instead."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from veracity import cli
from veracity.data_prep.errors import DataError
from veracity.data_prep.prepare import DATASETS, main
from veracity.data_prep.readers import read_delimited, read_json_array, read_jsonl

PAPER_DEV = "fever/paper_dev.shared.jsonl"


def _append_line(path: Path, raw: bytes) -> int:
    data = path.read_bytes()
    path.write_bytes(data + raw + b"\n")
    return data.count(b"\n") + 1


def _args(root: Path, out: Path, datasets: list[str], skip: bool = False) -> list[str]:
    return ["--data_root", str(root), "--output_dir", str(out), "--datasets", *datasets] + (
        ["--skip_invalid", "true"] if skip else [])


def _prep(root: Path, out: Path, datasets: list[str], skip: bool = False) -> dict:
    """``veracity prep`` as a user runs it (its main), returning the manifest."""
    return main(_args(root, out, datasets, skip))


def _prep_fails(root: Path, out: Path, datasets: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``veracity prep``, expect exit code 2 and one error line on stderr; return that line without
    ``error: ``."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        cli.main(["prep", *_args(root, out, datasets)])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    return err.removeprefix("error: ")


BAD_ROWS = {
    "malformed_json": (b'{"id": 9, "claim": "x", ', None, "malformed JSON"),
    "missing_field": (json.dumps({"id": 9, "label": "SUPPORTS", "evidence": []}).encode(), "claim", "missing"),
    "wrong_type": (json.dumps({"id": 9, "label": "SUPPORTS", "claim": 5, "evidence": []}).encode(), "claim",
                   "expected a string"),
    "unknown_label": (json.dumps({"id": 9, "label": "MAYBE", "claim": "x", "evidence": []}).encode(), "label",
                      "unknown label 'MAYBE'"),
    "non_utf8": (b'{"id": 9, "label": "SUPPORTS", "claim": "caf\xe9", "evidence": []}', None, "not valid UTF-8"),
    "bad_pointer": (json.dumps({"id": 9, "label": "SUPPORTS", "claim": "x", "evidence": [[["a"]]]}).encode(),
                    "evidence", "expected [ann, ev, page, sentence]"),
}


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_bad_row_names_file_line_and_field(mutable_data_root: Path, tmp_path: Path, case: str, capsys) -> None:
    raw, field, message = BAD_ROWS[case]
    path = mutable_data_root / PAPER_DEV
    line = _append_line(path, raw)
    error = _prep_fails(mutable_data_root, tmp_path / "out", ["fever"], capsys)
    assert error.startswith(f"{path}:{line}: " + (f"field '{field}': " if field else "")), error
    assert message in error
    assert not (tmp_path / "out").exists(), "nothing may be written when validation fails, not even run_config.yaml"


def test_skip_invalid_counts_logs_and_keeps_the_rest(mutable_data_root: Path, tmp_path: Path) -> None:
    path = mutable_data_root / PAPER_DEV
    bad_lines = [_append_line(path, raw) for raw, _, _ in BAD_ROWS.values()]
    manifest = _prep(mutable_data_root, tmp_path / "out", ["fever"], skip=True)
    assert manifest["skipped_invalid"] == len(BAD_ROWS)
    skipped = [row for _, row in read_jsonl(tmp_path / "out" / "skipped.jsonl")]
    assert [s["line"] for s in skipped] == bad_lines
    assert all(s["path"] == str(path) for s in skipped)
    assert manifest["outputs"]["fever_paper_dev"]["records"] == 3  # the 3 good non-empty claims survive


def test_failed_run_keeps_previous_outputs_and_run_record(mutable_data_root: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    _prep(mutable_data_root, out, ["fever"])
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert "run_config.yaml" in before
    _append_line(mutable_data_root / PAPER_DEV, b"{not json")
    _prep_fails(mutable_data_root, out, ["fever", "vitaminc"], capsys)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before, "the record still describes the good run"


def test_unknown_label_in_nested_field(mutable_data_root: Path, tmp_path: Path, capsys) -> None:
    path = mutable_data_root / "climate_fever/climate-fever.shared.jsonl"
    row = {"claim_id": "9", "claim": "c", "claim_label": "SUPPORTS", "evidences": [
        {"evidence_id": "A:1", "evidence_label": "PERHAPS", "article": "A", "evidence": "t"}]}
    line = _append_line(path, json.dumps(row).encode())
    error = _prep_fails(mutable_data_root, tmp_path / "out", ["climate_fever"], capsys)
    assert re.search(rf":{line}: field 'evidences\[0\]\.evidence_label': unknown label 'PERHAPS'", error)


@pytest.mark.parametrize(("votes", "message"), [
    (["SUPPORTS", "MAYBE"], r"field 'evidences\[0\]\.votes': unknown label 'MAYBE'"),
    ("SUPPORTS", r"field 'evidences\[0\]\.votes': evidence 0: 'votes' is not a list of labels"),
])
def test_bad_annotator_votes(mutable_data_root: Path, tmp_path: Path, votes: object, message: str, capsys) -> None:
    path = mutable_data_root / "climate_fever/climate-fever.shared.jsonl"
    row = {"claim_id": "9", "claim": "c", "claim_label": "SUPPORTS", "evidences": [
        {"evidence_id": "A:1", "evidence_label": "SUPPORTS", "article": "A", "evidence": "t", "votes": votes}]}
    line = _append_line(path, json.dumps(row).encode())
    assert re.search(rf":{line}: {message}", _prep_fails(mutable_data_root, tmp_path / "out", ["climate_fever"],
                                                          capsys))


def test_json_array_reports_the_line_of_the_bad_record(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text('[\n  {"a": 1},\n  {"a": 2},\n  {"a": \n')
    rows = read_json_array(path)
    assert next(rows) == (2, {"a": 1})
    assert next(rows) == (3, {"a": 2})
    with pytest.raises(DataError, match=r"a.json:5: malformed JSON"):
        next(rows)


def test_json_array_averitec_wrong_type(mutable_data_root: Path, tmp_path: Path, capsys) -> None:
    path = mutable_data_root / "averitec/dev.json"
    records = json.loads(path.read_text())
    records[2]["label"] = ["Refuted"]
    path.write_text(json.dumps(records, indent=4))
    lines = path.read_text().splitlines()
    start = [i for i, text in enumerate(lines, 1) if text == "    {"][2]
    error = _prep_fails(mutable_data_root, tmp_path / "out", ["averitec"], capsys)
    assert error.startswith(f"{path}:{start}: field 'label': ")


def test_csv_multiline_records_keep_their_starting_line(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text('id,evi\n0,"a\nb\nc"\n1,"d"\n2,x,extra\n')
    rows = read_delimited(path, ",", required=("id", "evi"))
    assert next(rows) == (2, {"id": "0", "evi": "a\nb\nc"})
    assert next(rows) == (5, {"id": "1", "evi": "d"})
    with pytest.raises(DataError, match=r"x.csv:6: expected 2 columns, got 3"):
        next(rows)


def test_tsv_missing_column_names_the_header(tmp_path: Path) -> None:
    path = tmp_path / "q.tsv"
    path.write_text("post_id\ttext\n1\thello\n")
    with pytest.raises(DataError, match=r"q.tsv:1: field 'tweet_text': header lacks"):
        list(read_delimited(path, "\t", required=("post_id", "tweet_text")))


def test_non_object_jsonl_line(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n[1, 2]\n')
    with pytest.raises(DataError, match=r"x.jsonl:2: expected a JSON object, got list"):
        list(read_jsonl(path))


def test_missing_input_file_names_the_data_root(mutable_data_root: Path, tmp_path: Path, capsys) -> None:
    path = mutable_data_root / "checkthat_2025_task4b/subtask4b_query_tweets_dev.tsv"
    path.unlink()
    help_ = "(where each dataset comes from and the layout veracity prep reads: docs/data.md#the-data-root; " \
            "--datasets prepares only the ones you have)"
    assert _prep_fails(mutable_data_root, tmp_path / "out", ["checkthat"], capsys) == \
        f"{path}: not found under data root {mutable_data_root}: its checkthat_2025_task4b/ lacks this file {help_}"
    shutil.rmtree(mutable_data_root / "checkthat_2025_task4b")
    first = path.with_name("subtask4b_query_tweets_train.tsv")  # the first file of the dataset, now missing too
    assert _prep_fails(mutable_data_root, tmp_path / "out", ["checkthat"], capsys) == \
        f"{first}: not found under data root {mutable_data_root}: it has no checkthat_2025_task4b/ {help_}"


def test_a_data_root_without_the_data_says_what_is_missing_there(tmp_path: Path, capsys) -> None:
    """`prep --data_root DIR` on a folder without the data: what DIR lacks and where the data comes from — not
    "pass --data_root" to someone who just did. One line, exit 2, nothing written."""
    empty = tmp_path / "empty"
    empty.mkdir()
    first = empty / "fever_symmetric" / "fever_symmetric_dev.shared.jsonl"  # the first file `prep` reads
    error = _prep_fails(empty, tmp_path / "out", list(DATASETS), capsys)
    assert error == (f"{first}: not found under data root {empty}: the folder is empty (where each dataset comes "
                     "from and the layout veracity prep reads: docs/data.md#the-data-root; --datasets prepares only "
                     "the ones you have)")
    assert "pass --data_root" not in error and not (tmp_path / "out").exists()


def test_cli_error_exit_code_and_message(mutable_data_root: Path, tmp_path: Path, capsys) -> None:
    line = _append_line(mutable_data_root / PAPER_DEV, b"{oops")
    with pytest.raises(DataError, match=f"paper_dev.shared.jsonl:{line}: malformed JSON"):  # the job raises it
        main(["--data_root", str(mutable_data_root), "--output_dir", str(tmp_path / "o"), "--datasets", "fever"])
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:  # the command prints it, one line, and exits 2
        cli.main(["prep", "--data_root", str(mutable_data_root), "--output_dir", str(tmp_path / "o"), "--datasets",
                  "fever"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert f"paper_dev.shared.jsonl:{line}: malformed JSON" in err
    assert not (tmp_path / "o").exists(), "nothing is written when the input is bad"


def test_no_data_root_is_one_line_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """A root that is named and is no folder is named back with where it was named; "pass --data_root" only when
    none was named and no default exists."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("VERACITY_DATA_ROOT", raising=False)
    docs = "the datasets, where to get them and the layout veracity prep reads: docs/data.md#the-data-root"

    def fails(argv: list[str]) -> str:
        with pytest.raises(SystemExit) as info:
            cli.main(["prep", *argv, "--output_dir", str(tmp_path / "o")])
        assert info.value.code == 2 and not (tmp_path / "o").exists()
        return capsys.readouterr().err

    nowhere = tmp_path / "nowhere"
    assert fails(["--data_root", str(nowhere)]) == f"error: --data_root {nowhere}: no such folder ({docs})\n"
    monkeypatch.setenv("VERACITY_DATA_ROOT", str(nowhere))
    assert fails([]) == f"error: $VERACITY_DATA_ROOT {nowhere}: no such folder ({docs})\n"
    monkeypatch.delenv("VERACITY_DATA_ROOT")
    assert fails([]) == ("error: no data root: neither of ['../shared/data', 'shared/data'] is a folder here; pass "
                         "--data_root DIR or set $VERACITY_DATA_ROOT (the datasets, where to get them and their "
                         "layout: docs/data.md#the-data-root)\n")


# --- byte order marks and line endings ----------------------------------------------------------------------

BOM = b"\xef\xbb\xbf"
ENDINGS = {"lf": b"\n", "crlf": b"\r\n", "cr": b"\r"}


def _rewrite(root: Path, ending: bytes, bom: bool) -> None:
    """Every raw file with ``ending`` for its line ends (CSV too, unless a quoted field spans lines) and a BOM."""
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if path.suffix != ".csv":  # the FEVER-8 CSV has newlines inside quoted fields: they are data
            data = data.replace(b"\r\n", b"\n").replace(b"\n", ending)
        path.write_bytes(BOM + data if bom else data)


def _outputs(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.jsonl"))}


@pytest.mark.parametrize(("ending", "bom"), [("lf", True), ("crlf", False), ("crlf", True), ("cr", False),
                                             ("cr", True)])
def test_bom_and_line_endings_load_exactly_like_plain_lf(data_root: Path, mutable_data_root: Path, tmp_path: Path,
                                                         ending: str, bom: bool) -> None:
    main(["--data_root", str(data_root), "--output_dir", str(tmp_path / "plain")])
    _rewrite(mutable_data_root, ENDINGS[ending], bom)
    main(["--data_root", str(mutable_data_root), "--output_dir", str(tmp_path / "other")])
    plain, other = _outputs(tmp_path / "plain"), _outputs(tmp_path / "other")
    assert len(plain) > 20 and other == plain  # same records, and the same line numbers in every origin


def test_json_error_reads_at_column_once(mutable_data_root: Path, tmp_path: Path) -> None:
    line = _append_line(mutable_data_root / PAPER_DEV, b'{"id": 9, "claim": "never closed')
    with pytest.raises(DataError) as info:
        main(["--data_root", str(mutable_data_root), "--output_dir", str(tmp_path / "o"), "--datasets", "fever"])
    err = str(info.value)
    assert f"paper_dev.shared.jsonl:{line}: malformed JSON (Unterminated string starting at column 20)" in err
    assert "at at" not in err


def test_cr_only_file_reports_the_line_an_editor_shows(mutable_data_root: Path, tmp_path: Path) -> None:
    path = mutable_data_root / PAPER_DEV
    line = _append_line(path, b"{oops")
    path.write_bytes(BOM + path.read_bytes().replace(b"\n", b"\r"))
    with pytest.raises(DataError) as info:
        main(["--data_root", str(mutable_data_root), "--output_dir", str(tmp_path / "o"), "--datasets", "fever"])
    assert f"paper_dev.shared.jsonl:{line}: malformed JSON (Expecting property name enclosed in double quotes " \
           "at column 2)" in str(info.value)


@pytest.mark.parametrize("ending", [b"\r\n", b"\r"])
def test_whole_file_readers_number_lines_across_endings(tmp_path: Path, ending: bytes) -> None:
    array = tmp_path / "a.json"
    array.write_bytes(BOM + ending.join([b"[", b'  {"a": 1},', b'  {"a": "unterminated', b"]"]))
    rows = read_json_array(array)
    assert next(rows) == (2, {"a": 1})
    with pytest.raises(DataError, match=r"a.json:3: malformed JSON \(Invalid control character at column 22\)"):
        next(rows)
    bad = tmp_path / "b.tsv"
    bad.write_bytes(BOM + ending.join([b"post_id\ttweet_text", b"1\tfine", b"2\tcaf\xe9", b""]))
    with pytest.raises(DataError, match=r"b.tsv:3: not valid UTF-8"):
        list(read_delimited(bad, "\t", required=("post_id", "tweet_text")))


# --- files that cannot be read, empty files -----------------------------------------------------------------


def test_unreadable_file_is_one_line_exit_2(mutable_data_root: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    from veracity.data_prep import readers

    path = mutable_data_root / PAPER_DEV
    real_open = open

    def no_permission(file, *args, **kwargs):  # tests run as root, who can read a chmod 000 file anyway
        if Path(file) == path:
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(readers, "open", no_permission, raising=False)
    assert _prep_fails(mutable_data_root, tmp_path / "out", ["fever"], capsys) == \
        f"{path}: permission denied (not readable by this user)"
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod 000 file anyway (the monkeypatched test covers it)")
def test_chmod_000_file_is_one_line_exit_2(mutable_data_root: Path, tmp_path: Path, capsys) -> None:
    path = mutable_data_root / PAPER_DEV
    path.chmod(0)
    assert _prep_fails(mutable_data_root, tmp_path / "out", ["fever"], capsys) == \
        f"{path}: permission denied (not readable by this user)"


def test_symlink_loop_and_directory_are_named_not_not_found(mutable_data_root: Path, tmp_path: Path, capsys) -> None:
    path = mutable_data_root / PAPER_DEV
    path.unlink()
    path.symlink_to(path)  # a loop at the fixed path: once reported as "not found"
    assert _prep_fails(mutable_data_root, tmp_path / "out", ["fever"], capsys) == \
        f"{path}: a symlink loop (too many levels of symbolic links)"
    path.unlink()
    path.mkdir()
    assert _prep_fails(mutable_data_root, tmp_path / "out", ["fever"], capsys) == \
        f"{path}: is a directory, expected a file"
    nli = mutable_data_root / "nli"
    os.rename(nli, tmp_path / "nli_moved")
    nli.write_text("")  # a file where the nli folder is expected
    assert _prep_fails(mutable_data_root, tmp_path / "out", ["nli"], capsys) == \
        f"{nli}: is a file, expected a directory"
    assert not (tmp_path / "out").exists()


def test_empty_input_file_is_a_warning_with_the_path(mutable_data_root: Path, tmp_path: Path, caplog) -> None:
    path = mutable_data_root / "watclaimcheck_flawcheck/review_articles_train_sample500.shared.jsonl"
    path.write_bytes(b"")
    with caplog.at_level("WARNING"):
        manifest = _prep(mutable_data_root, tmp_path / "out", ["watclaimcheck"])
    assert f"{path}: empty input file" in caplog.text
    info = manifest["outputs"]["watclaimcheck_articles"]
    assert info["records"] == 0 and info["events"] == {"warning:empty_input_file": 1}


def test_an_empty_csv_or_json_array_file_is_an_error(mutable_data_root: Path, tmp_path: Path, capsys) -> None:
    path = mutable_data_root / "checkthat_2025_task4b/subtask4b_query_tweets_dev.tsv"
    path.write_bytes(b"")
    assert _prep_fails(mutable_data_root, tmp_path / "out", ["checkthat"], capsys) == \
        f"{path}:1: empty file (expected a header line)"


# --- size limits, duplicate ids, label variants ----------------------------------------------------------------


def test_oversized_claim_is_rejected_with_file_line_and_field(mutable_data_root: Path, tmp_path: Path,
                                                              capsys) -> None:
    from veracity.data_prep.limits import CLAIM_LIMIT

    path = mutable_data_root / PAPER_DEV
    row = {"id": 9, "label": "NOT ENOUGH INFO", "claim": "x" * (CLAIM_LIMIT + 1), "evidence": []}
    line = _append_line(path, json.dumps(row).encode())
    assert _prep_fails(mutable_data_root, tmp_path / "out", ["fever"], capsys) == (
        f"{path}:{line}: field 'claim': 100,001 characters, over the 100,000-character limit of this field "
        "(see data_prep/limits.py)")
    assert not (tmp_path / "out").exists()
    manifest = _prep(mutable_data_root, tmp_path / "out", ["fever"], skip=True)
    info = manifest["outputs"]["fever_paper_dev"]
    assert info["records"] == 3 and info["events"]["skipped:oversized_claim"] == 1
    assert manifest["skipped_invalid"] == 1
    row["claim"] = "x" * CLAIM_LIMIT  # at the limit: kept
    path.write_text(path.read_text().splitlines(keepends=True)[0] + json.dumps(row) + "\n")
    assert _prep(mutable_data_root, tmp_path / "o2", ["fever"])["outputs"]["fever_paper_dev"]["records"] == 2


def test_oversized_evidence_text_is_rejected(mutable_data_root: Path, tmp_path: Path, capsys) -> None:
    from veracity.data_prep.limits import TEXT_LIMIT

    path = mutable_data_root / "fever_symmetric/fever_symmetric_dev.shared.jsonl"
    row = {"id": "77", "claim": "A short claim .", "evidence": "e" * (TEXT_LIMIT + 1), "label": "SUPPORTS"}
    line = _append_line(path, json.dumps(row).encode())
    error = _prep_fails(mutable_data_root, tmp_path / "out", ["fever"], capsys)
    assert error.startswith(f"{path}:{line}: field 'evidence_text': 1,000,001 characters, over the 1,000,000")


@pytest.mark.parametrize(("dataset", "relative", "field", "other"), [
    ("fever", PAPER_DEV, "claim", "Another claim."),
    ("fever", "fever_symmetric/fever_symmetric_dev.shared.jsonl", "evidence", "Other evidence ."),
    ("fever", "fever/sufficient_facts_fever.shared.jsonl", "label_before", "REFUTES"),  # id: hash of claim + text
    ("vitaminc", "vitaminc/lifelong_icl_sample/test.shared.jsonl", "evidence", "Other evidence ."),
    ("climate_fever", "climate_fever/climate-fever.shared.jsonl", "claim_label", "REFUTES"),
    ("watclaimcheck", "watclaimcheck_flawcheck/review_articles_train_sample500.shared.jsonl", "review_article",
     ["Other text."]),
])
def test_one_duplicate_rule_for_every_loader(mutable_data_root: Path, tmp_path: Path, capsys, dataset: str,
                                             relative: str, field: str, other: object) -> None:
    path = mutable_data_root / relative
    original = path.read_text()
    row = json.loads(original.splitlines()[0])
    clean = _prep(mutable_data_root, tmp_path / "clean", [dataset])
    # identical duplicate: dropped and counted, the outputs otherwise unchanged
    _append_line(path, json.dumps(row).encode())
    manifest = _prep(mutable_data_root, tmp_path / "identical", [dataset])
    counts = {n: i["records"] for n, i in manifest["outputs"].items()}
    assert counts == {n: i["records"] for n, i in clean["outputs"].items()}
    assert sum(i["events"].get("filtered:duplicate_identical", 0) for i in manifest["outputs"].values()) == 1
    # the same id with other content: an error naming both lines
    path.write_text(original)
    changed = {**row, field: other}
    line = _append_line(path, json.dumps(changed).encode())
    error = _prep_fails(mutable_data_root, tmp_path / "conflict", [dataset], capsys)
    assert error.startswith(f"{path}:{line}: duplicate id ") and error.endswith(
        f"with other content than {path}:1"), error
    # --skip_invalid: the second row is skipped and logged, the first kept
    manifest = _prep(mutable_data_root, tmp_path / "skipped", [dataset], skip=True)
    assert manifest["skipped_invalid"] == 1
    assert {n: i["records"] for n, i in manifest["outputs"].items()} == \
        {n: i["records"] for n, i in clean["outputs"].items()}
    assert [s["line"] for _, s in read_jsonl(tmp_path / "skipped" / "skipped.jsonl")] == [line]


def test_normalized_label_variants_are_counted_in_the_manifest(data_root: Path, tmp_path: Path) -> None:
    manifest = _prep(data_root, tmp_path / "out", ["vitaminc", "climate_fever"])
    assert manifest["outputs"]["vitaminc"]["label_variants"] == {
        "not enough info → NOT ENOUGH INFO": 1, "refutes → REFUTES": 1, "supports → SUPPORTS": 5}
    # each variant counted under the output its label goes to: the claims' labels, the evidence pairs' labels and
    # their annotators' votes apart — not all of one file's label values under the claims (issue #63). The fixture:
    # no claim labelled NOT_ENOUGH_INFO; one evidence sentence ("Bees:1") and one vote for it
    claims, evidence = (manifest["outputs"][f"climate_fever_{name}"] for name in ("claims", "evidence"))
    assert claims["label_variants"] == {} and "NOT ENOUGH INFO" not in claims["labels"]
    assert evidence["label_variants"] == {"NOT_ENOUGH_INFO → NOT ENOUGH INFO": 1,
                                          "votes: NOT_ENOUGH_INFO → NOT ENOUGH INFO": 1}


# --- the manifest is the list of outputs -----------------------------------------------------------------------


def test_rerun_with_other_datasets_leaves_no_stale_output(data_root: Path, tmp_path: Path) -> None:
    from veracity.data_prep.prepared import PreparedDataError, prepared_names, read_prepared
    from veracity.train.nli import NLIDataArgs, training_pairs

    out = tmp_path / "out"
    _prep(data_root, out, ["fever", "nli"])
    stale = (out / "nli_sick.jsonl").read_bytes()
    (out / "notes.jsonl").write_text("{}\n")  # not ours: left alone
    manifest = _prep(data_root, out, ["fever"])
    on_disk = {p.stem for p in out.glob("*.jsonl")}
    assert on_disk == set(manifest["outputs"]) | {"notes"}, "outputs of the earlier run that this one lacks go"
    assert prepared_names(out, "nli_") == []
    (out / "nli_sick.jsonl").write_bytes(stale)  # a stray file (copied back by hand) is never read
    with pytest.raises(PreparedDataError, match="no output 'nli_sick'"):
        read_prepared(out, "nli_sick")
    pairs, _ = training_pairs(NLIDataArgs(prepared_dir=str(out), claim_sources=[]))
    assert pairs == []
    _prep(data_root, out, ["fever", "nli"])  # and back: the nli outputs are listed and read again
    pairs, counts = training_pairs(NLIDataArgs(prepared_dir=str(out), claim_sources=[]))
    assert len(pairs) == 2 and {b.split("/")[0] for b in counts["by_bucket"]} == {"nli_fever_dev_rte", "nli_sick"}
