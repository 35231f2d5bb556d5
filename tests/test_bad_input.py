"""Every kind of bad input is an error that names file, line and field; --skip_invalid counts and logs instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from veracity.data_prep.errors import DataError
from veracity.data_prep.prepare import PrepConfig, prepare
from veracity.data_prep.readers import read_delimited, read_json_array, read_jsonl
from veracity.io import read_jsonl as read_output

PAPER_DEV = "fever/paper_dev.shared.jsonl"


def _append_line(path: Path, raw: bytes) -> int:
    data = path.read_bytes()
    path.write_bytes(data + raw + b"\n")
    return data.count(b"\n") + 1


def _prep(root: Path, out: Path, datasets: list[str], skip: bool = False) -> dict:
    return prepare(PrepConfig(data_root=str(root), output_dir=str(out), datasets=datasets, skip_invalid=skip))


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
def test_bad_row_names_file_line_and_field(mutable_data_root: Path, tmp_path: Path, case: str) -> None:
    raw, field, message = BAD_ROWS[case]
    path = mutable_data_root / PAPER_DEV
    line = _append_line(path, raw)
    with pytest.raises(DataError) as info:
        _prep(mutable_data_root, tmp_path / "out", ["fever"])
    error = info.value
    assert error.path == str(path) and error.line == line
    assert error.field == field
    assert message in str(error)
    assert str(error).startswith(f"{path}:{line}: ")
    assert not (tmp_path / "out").exists(), "nothing may be written when validation fails"


def test_skip_invalid_counts_logs_and_keeps_the_rest(mutable_data_root: Path, tmp_path: Path) -> None:
    path = mutable_data_root / PAPER_DEV
    bad_lines = [_append_line(path, raw) for raw, _, _ in BAD_ROWS.values()]
    manifest = _prep(mutable_data_root, tmp_path / "out", ["fever"], skip=True)
    assert manifest["skipped_invalid"] == len(BAD_ROWS)
    skipped = list(read_output(tmp_path / "out" / "skipped.jsonl"))
    assert [s["line"] for s in skipped] == bad_lines
    assert all(s["path"] == str(path) for s in skipped)
    assert manifest["outputs"]["fever_paper_dev"]["records"] == 3  # the 3 good non-empty claims survive


def test_failed_run_keeps_previous_outputs(mutable_data_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    _prep(mutable_data_root, out, ["fever"])
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    _append_line(mutable_data_root / PAPER_DEV, b"{not json")
    with pytest.raises(DataError):
        _prep(mutable_data_root, out, ["fever"])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_unknown_label_in_nested_field(mutable_data_root: Path, tmp_path: Path) -> None:
    path = mutable_data_root / "climate_fever/climate-fever.shared.jsonl"
    row = {"claim_id": "9", "claim": "c", "claim_label": "SUPPORTS", "evidences": [
        {"evidence_id": "A:1", "evidence_label": "PERHAPS", "article": "A", "evidence": "t"}]}
    line = _append_line(path, json.dumps(row).encode())
    with pytest.raises(DataError, match=rf":{line}: field 'evidences\[0\]\.evidence_label': unknown label 'PERHAPS'"):
        _prep(mutable_data_root, tmp_path / "out", ["climate_fever"])


@pytest.mark.parametrize(("votes", "message"), [
    (["SUPPORTS", "MAYBE"], r"field 'evidences\[0\]\.votes': unknown label 'MAYBE'"),
    ("SUPPORTS", r"field 'evidences\[0\]\.votes': evidence 0: 'votes' is not a list of labels"),
])
def test_bad_annotator_votes(mutable_data_root: Path, tmp_path: Path, votes: object, message: str) -> None:
    path = mutable_data_root / "climate_fever/climate-fever.shared.jsonl"
    row = {"claim_id": "9", "claim": "c", "claim_label": "SUPPORTS", "evidences": [
        {"evidence_id": "A:1", "evidence_label": "SUPPORTS", "article": "A", "evidence": "t", "votes": votes}]}
    line = _append_line(path, json.dumps(row).encode())
    with pytest.raises(DataError, match=rf":{line}: {message}"):
        _prep(mutable_data_root, tmp_path / "out", ["climate_fever"])


def test_json_array_reports_the_line_of_the_bad_record(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text('[\n  {"a": 1},\n  {"a": 2},\n  {"a": \n')
    rows = read_json_array(path)
    assert next(rows) == (2, {"a": 1})
    assert next(rows) == (3, {"a": 2})
    with pytest.raises(DataError, match=r"a.json:5: malformed JSON"):
        next(rows)


def test_json_array_averitec_wrong_type(mutable_data_root: Path, tmp_path: Path) -> None:
    path = mutable_data_root / "averitec/dev.json"
    records = json.loads(path.read_text())
    records[2]["label"] = ["Refuted"]
    path.write_text(json.dumps(records, indent=4))
    lines = path.read_text().splitlines()
    start = [i for i, text in enumerate(lines, 1) if text == "    {"][2]
    with pytest.raises(DataError) as info:
        _prep(mutable_data_root, tmp_path / "out", ["averitec"])
    assert info.value.line == start and info.value.field == "label"


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


def test_missing_input_file_names_the_data_root(mutable_data_root: Path, tmp_path: Path) -> None:
    (mutable_data_root / "checkthat_2025_task4b/subtask4b_query_tweets_dev.tsv").unlink()
    with pytest.raises(DataError, match="subtask4b_query_tweets_dev.tsv: not found under data root"):
        _prep(mutable_data_root, tmp_path / "out", ["checkthat"])


def test_cli_error_exit_code_and_message(mutable_data_root: Path, tmp_path: Path, capsys) -> None:
    from veracity.data_prep.prepare import main

    line = _append_line(mutable_data_root / PAPER_DEV, b"{oops")
    with pytest.raises(SystemExit) as info:
        main(["--data_root", str(mutable_data_root), "--output_dir", str(tmp_path / "o"), "--datasets", "fever"])
    assert info.value.code == 2
    assert f"paper_dev.shared.jsonl:{line}: malformed JSON" in capsys.readouterr().err


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
    from veracity.data_prep.prepare import main

    main(["--data_root", str(data_root), "--output_dir", str(tmp_path / "plain")])
    _rewrite(mutable_data_root, ENDINGS[ending], bom)
    main(["--data_root", str(mutable_data_root), "--output_dir", str(tmp_path / "other")])
    plain, other = _outputs(tmp_path / "plain"), _outputs(tmp_path / "other")
    assert len(plain) > 20 and other == plain  # same records, and the same line numbers in every origin


def test_json_error_reads_at_column_once(mutable_data_root: Path, tmp_path: Path, capsys) -> None:
    from veracity.data_prep.prepare import main

    line = _append_line(mutable_data_root / PAPER_DEV, b'{"id": 9, "claim": "never closed')
    with pytest.raises(SystemExit) as info:
        main(["--data_root", str(mutable_data_root), "--output_dir", str(tmp_path / "o"), "--datasets", "fever"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"paper_dev.shared.jsonl:{line}: malformed JSON (Unterminated string starting at column 20)" in err
    assert "at at" not in err


def test_cr_only_file_reports_the_line_an_editor_shows(mutable_data_root: Path, tmp_path: Path, capsys) -> None:
    from veracity.data_prep.prepare import main

    path = mutable_data_root / PAPER_DEV
    line = _append_line(path, b"{oops")
    path.write_bytes(BOM + path.read_bytes().replace(b"\n", b"\r"))
    with pytest.raises(SystemExit) as info:
        main(["--data_root", str(mutable_data_root), "--output_dir", str(tmp_path / "o"), "--datasets", "fever"])
    assert info.value.code == 2
    assert f"paper_dev.shared.jsonl:{line}: malformed JSON (Expecting property name enclosed in double quotes " \
           "at column 2)" in capsys.readouterr().err


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
