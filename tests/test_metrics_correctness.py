"""Correctness at the edges (issue #24): the risk–coverage curve and AURC when confidences tie, and the project's
one JSONL reader on records holding the characters ``str.splitlines`` would cut them at."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from veracity.infer.metrics import aurc, risk_coverage

# --- risk–coverage and AURC with ties ------------------------------------------------------------------------------


def test_aurc_does_not_depend_on_record_order_within_a_tie() -> None:
    # the case: two ties, each holding one right and one wrong claim; input order used to decide the value
    # (0.333 one way, 0.667 the other). One step per tie group: 2/4 · 1/2 + 2/4 · 2/4 = 0.5 either way
    p = [1.0, 1.0, 0.5, 0.5]
    assert aurc(p, [True, False, True, False]) == pytest.approx(0.5)
    assert aurc(p, [False, True, False, True]) == pytest.approx(0.5)
    for correct in ([True, False, True, False], [False, True, False, True]):
        coverage, risk = risk_coverage(p, correct)
        np.testing.assert_allclose(coverage, [0.5, 1.0])  # one point per tie group, not one per record
        np.testing.assert_allclose(risk, [0.5, 0.5])


def test_aurc_by_hand_with_a_tie() -> None:
    # confidences .9 .9 .6 .3, right/wrong T F T F. Answering p ≥ .9: 2 claims, 1 error (risk 1/2, width 2/4);
    # p ≥ .6: 3 claims, 1 error (1/3, width 1/4); all: 4 claims, 2 errors (1/2, width 1/4)
    conf, right = [0.9, 0.6, 0.9, 0.3], [True, True, False, False]
    coverage, risk = risk_coverage(conf, right)
    np.testing.assert_allclose(coverage, [0.5, 0.75, 1.0])
    np.testing.assert_allclose(risk, [0.5, 1 / 3, 0.5])
    assert aurc(conf, right) == pytest.approx(2 / 4 * 1 / 2 + 1 / 4 * 1 / 3 + 1 / 4 * 1 / 2)  # 0.458333…
    # every claim at one confidence (e.g. all abstentions at 0.0): one step, the plain error rate
    assert aurc([0.0] * 5, [True, False, False, True, False]) == pytest.approx(3 / 5)
    assert aurc([], []) == 0.0


def test_aurc_without_ties_is_the_mean_over_the_n_coverage_levels() -> None:
    conf, right = [0.9, 0.8, 0.6, 0.3], [True, False, True, False]
    assert aurc(conf, right) == pytest.approx((0 + 0.5 + 1 / 3 + 0.5) / 4)
    np.testing.assert_allclose(risk_coverage(conf, right)[0], [0.25, 0.5, 0.75, 1.0])


def test_curve_and_aurc_are_invariant_to_any_permutation() -> None:
    rng = np.random.default_rng(0)
    conf = rng.choice([0.0, 0.25, 0.5, 0.5, 0.75, 1.0], size=60)  # many ties
    right = rng.random(60) < 0.6
    reference = (risk_coverage(conf, right), aurc(conf, right))
    for _ in range(20):
        order = rng.permutation(60)
        (coverage, risk), area = risk_coverage(conf[order], right[order]), aurc(conf[order], right[order])
        np.testing.assert_allclose(coverage, reference[0][0])
        np.testing.assert_allclose(risk, reference[0][1])
        assert area == pytest.approx(reference[1])


# --- the one JSONL reader ------------------------------------------------------------------------------------------

SEPARATORS = ("\u2028", "\u2029", "\u0085")


def test_read_jsonl_keeps_records_whole_across_unicode_line_separators(tmp_path: Path) -> None:
    from veracity.data_prep.readers import read_jsonl

    rows = [{"id": str(k), "text": f"before{sep}after"} for k, sep in enumerate(SEPARATORS)]
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    assert all(sep in path.read_text(encoding="utf-8") for sep in SEPARATORS)  # written raw, as the writers do
    assert len(path.read_text(encoding="utf-8").splitlines()) == 6  # what the old AIC reader split on
    assert list(read_jsonl(path)) == list(enumerate(rows, start=1))


def test_read_jsonl_line_numbers_endings_and_errors(tmp_path: Path) -> None:
    from veracity.data_prep.errors import DataError, ErrorPolicy
    from veracity.data_prep.readers import read_jsonl as read_numbered

    path = tmp_path / "x.jsonl"
    # BOM, CRLF, a lone CR, a blank line, a record holding U+2028: lines numbered as an editor does
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}\r\n{"a": 2}\r{"a": "x\xe2\x80\xa8y"}\n\n{"a": 4}\n')
    assert list(read_numbered(path)) == [(1, {"a": 1}), (2, {"a": 2}), (3, {"a": "x\u2028y"}), (5, {"a": 4})]
    path.write_bytes(b'{"a": 1}\n{"a": \xe2\x80\xa8\n[1]\n{"a": 4}\n')  # U+2028 raw between tokens is not JSON
    with pytest.raises(DataError, match=r"x.jsonl:2: malformed JSON"):
        list(read_numbered(path))
    policy = ErrorPolicy(skip_invalid=True)
    assert list(read_numbered(path, policy)) == [(1, {"a": 1}), (4, {"a": 4})]
    assert [(e.line, e.message) for e in policy.skipped][1] == (3, "expected a JSON object, got list")
