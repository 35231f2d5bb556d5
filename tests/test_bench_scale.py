"""bench/scale.py end to end at two tiny sizes, on a hand-made data root (real-looking sentences, no shared data)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from repo_scripts import load_script

SENTENCES = [
    "Polar bears depend on sea ice, which melts earlier as the climate warms.",
    "The polar bear is a large bear native to the Arctic Circle and nearby seas.",
    "Global warming is the long-term rise of the average surface temperature of the Earth.",
    "Sea levels rose about twenty centimetres since 1900 because oceans warm and ice melts.",
    "Coral reefs bleach when ocean temperatures stay high for several weeks in a row.",
    "Carbon dioxide concentrations passed 415 parts per million in the year 2019.",
    "Paris is the capital and the most populous city of France, on the river Seine.",
    "Berlin is the capital of Germany and its largest city by population.",
    "Telemundo is an American Spanish-language terrestrial television network.",
    "Soul Food is a 1997 American comedy-drama film released by Fox 2000 Pictures.",
    "Rising temperatures push bumblebees to the limits of their physiology.",
    "Most mountain glaciers have been retreating since the middle of the 19th century.",
]


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    (root / "nli" / "toy").mkdir(parents=True)
    rows = [{"premise": f"{a} {b}", "hypothesis": f"Claim {i}: {a[:40]}", "label": "entailment"}
            for i, (a, b) in enumerate(zip(SENTENCES, SENTENCES[1:] + SENTENCES[:1], strict=True))]
    (root / "nli" / "toy" / "toy.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def test_corpora_are_seeded_prefixes_and_reused(tmp_path: Path, data_root: Path) -> None:
    bench = load_script("bench/scale.py")
    sentences, claims = bench.harvest(data_root)
    assert sentences == SENTENCES and len(claims) == len(SENTENCES)  # split at sentence ends, deduplicated
    paths = bench.write_corpora(sentences, [30, 80], tmp_path)
    small, large = (paths[n].read_text().splitlines() for n in (30, 80))
    assert len(small) == 30 and large[:30] == small  # one stream: the smaller corpus is a prefix
    doc = json.loads(large[79])
    assert doc["doc_id"] == "p0000079" and 3 <= sum(doc["text"].count(s) for s in SENTENCES) <= 7
    stamp = paths[80].stat().st_mtime_ns
    assert bench.write_corpora(sentences, [30, 80], tmp_path) == paths and paths[80].stat().st_mtime_ns == stamp


def test_scale_bench_runs_end_to_end(tmp_path: Path, data_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_script("bench/scale.py")
    results = bench.main(["--sizes", "200", "500", "--queries", "5", "--work_dir", str(tmp_path),
                          "--data_root", str(data_root), "--minilm_sample", "0"])
    assert list(results) == [200, 500]
    for n, result in results.items():
        assert result["documents"] == n and result["n_queries"] == 5
        assert result["queries"]["bm25_same_scores"] == 5  # ours and bm25s's full scan agree on every query
        for kind in ("bm25", "dense"):
            build = result[kind]
            assert build["seconds"] > 0 and build["peak_mib"] >= build["baseline_mib"] > 10
        for latency in ("bm25_ms", "bm25s_ms", "hnsw_ms", "fused_ms"):
            assert len(result["queries"][latency]) == 5 and min(result["queries"][latency]) > 0
        assert 0.5 <= result["queries"]["hnsw_recall10"] <= 1.0
        assert (tmp_path / f"index_{n}" / "bm25" / "index_meta.json").is_file()
    assert results[500]["postings"] > results[200]["postings"]
    out = capsys.readouterr().out
    assert "machine: " in out and "cores" in out and "RAM" in out
    header = next(line for line in out.splitlines() if line.startswith("documents"))
    assert header.split()[1:] == ["200", "500"]
    for label in ("BM25 build peak RSS (MiB)", "dense HNSW ms/query p50 / p95", "fused (α-fusion"):
        assert label in out
    saved = json.loads((tmp_path / "scale.json").read_text())
    assert set(saved["results"]) == {"200", "500"} and saved["minilm"] is None
