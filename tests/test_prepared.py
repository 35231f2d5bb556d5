"""read_prepared: the one reader of prepared records, checked against manifest.json."""

from __future__ import annotations

from pathlib import Path

import pytest

from veracity.data_prep.prepare import PrepConfig, prepare
from veracity.data_prep.prepared import PreparedDataError, prepared_names, read_prepared
from veracity.data_prep.schema import ClaimExample, NLIPair


@pytest.fixture()
def prepared(data_root: Path, tmp_path: Path) -> Path:
    prepare(PrepConfig(data_root=str(data_root), output_dir=str(tmp_path / "prep"), datasets=["vitaminc", "nli"]))
    return tmp_path / "prep"


def test_read_prepared_types_and_filters_by_split(prepared: Path) -> None:
    everything = read_prepared(prepared, "vitaminc")
    assert everything and all(isinstance(r, ClaimExample) for r in everything)
    dev = read_prepared(prepared, "vitaminc", ["dev"])
    assert [r.id for r in dev] == [r.id for r in everything if r.split == "dev"]
    nli_names = prepared_names(prepared, "nli_")
    assert nli_names and all(isinstance(r, NLIPair) for r in read_prepared(prepared, nli_names[0]))


def test_read_prepared_errors_name_the_problem(prepared: Path, tmp_path: Path) -> None:
    with pytest.raises(PreparedDataError, match="run `veracity prep"):
        read_prepared(tmp_path / "nowhere", "vitaminc")
    with pytest.raises(PreparedDataError, match="no output 'climate_fever_claims'"):
        read_prepared(prepared, "climate_fever_claims")
    path = prepared / "vitaminc.jsonl"
    path.write_text(path.read_text() + "\n", encoding="utf-8")  # changed after prep wrote it
    with pytest.raises(PreparedDataError, match="vitaminc.jsonl: sha256 .* differs from the manifest"):
        read_prepared(prepared, "vitaminc")
    path.unlink()
    with pytest.raises(PreparedDataError, match="missing"):
        read_prepared(prepared, "vitaminc")
