"""``veracity index build --executor ray`` (infer/retrieval/ray_embed.py) on a local Ray cluster of 2 CPUs: the index
equals the local build's (vectors to 1e-5, BM25 and the text store byte for byte), the driver loads no encoder, the
corpus is cut at line ends whatever they are, and a build resumes from the tasks already embedded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from veracity.infer.retrieval.ray_embed import corpus_tasks, read_task

DOCS = [{"doc_id": f"d{i}", "title": f"Title {i % 4}",
         "text": f"Document {i} says the river {i % 3} is long " * (i % 5 + 1)} for i in range(23)]


def _corpus(path: Path, docs: list[dict[str, Any]] = DOCS) -> Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path


def test_tasks_cut_at_line_ends_and_read_back_every_document(tmp_path: Path) -> None:
    """A BOM, CRLF, a lone CR between two records, blank lines: each task starts after an LF and reads its own."""
    lines = [json.dumps(d).encode() for d in DOCS[:9]]
    raw = (b"\xef\xbb\xbf" + lines[0] + b"\r\n" + lines[1] + b"\r" + lines[2] + b"\n\n" + lines[3] + b"\n   \n"
           + b"\n".join(lines[4:]) + b"\n")
    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(raw)
    for per_task in (1, 2, 4, 100):
        tasks = corpus_tasks(corpus, per_task)
        read = [doc["doc_id"] for t in tasks for doc in read_task(corpus, t["offset"], t["count"])]
        assert read == [d["doc_id"] for d in DOCS[:9]], per_task
        assert [t["task"] for t in tasks] == list(range(len(tasks)))
        assert all(t["count"] >= per_task for t in tasks[:-1])


def test_the_ray_build_equals_the_local_one(ray_cluster: Any, tmp_path: Path, tiny_encoder_dir: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from veracity.infer.retrieval import index as index_module
    from veracity.infer.retrieval.index_build import main
    from veracity.infer.retrieval.store import read_embeddings

    corpus = _corpus(tmp_path / "corpus.jsonl")
    common = ["--corpus", str(corpus), "--embedder", str(tiny_encoder_dir), "--faiss_kind", "flat",
              "--shard_size", "8", "--stream_batch", "5", "--progress", "false"]
    local = main([*common, "--output_dir", str(tmp_path / "local")])

    class NoEncoderHere:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise AssertionError("the driver of a Ray build loads no encoder")

    monkeypatch.setattr(index_module, "DenseEncoder", NoEncoderHere)
    built = main([*common, "--output_dir", str(tmp_path / "ray"), "--executor", "ray", "--workers", "2"])
    np.testing.assert_allclose(read_embeddings(built), read_embeddings(local), atol=1e-5)
    for name in ("doc_ids.json", "texts.bin", "text_offsets.npy"):
        assert (built / name).read_bytes() == (local / name).read_bytes(), name
    for part in sorted(p.relative_to(local) for p in (local / "bm25").rglob("*") if p.is_file()):
        assert (built / part).read_bytes() == (local / part).read_bytes(), part
    meta, local_meta = (json.loads((f / "index_meta.json").read_text()) for f in (built, local))
    assert meta["dense"] == local_meta["dense"] and meta["sparse"] == local_meta["sparse"]
    assert not (built / "ray_embeddings").exists(), "the task files go once the index holds the vectors"


def test_a_build_resumes_from_the_tasks_already_embedded(ray_cluster: Any, tmp_path: Path,
                                                         tiny_encoder_dir: Path) -> None:
    from veracity.infer.executors import ExecutorConfig
    from veracity.infer.retrieval.dense import EncoderSpec
    from veracity.infer.retrieval.ray_embed import embed_on_ray, task_file

    corpus, out = _corpus(tmp_path / "corpus.jsonl"), tmp_path / "index"
    spec, executor = EncoderSpec(str(tiny_encoder_dir)), ExecutorConfig(executor="ray", workers=2)
    reader, described = embed_on_ray(corpus, out, spec, True, executor, 6)
    assert len(reader) == len(DOCS) and described["dim"] == reader.all().shape[1]
    staging = out / "ray_embeddings"
    kept = task_file(staging, 1)
    before = kept.stat().st_mtime_ns
    task_file(staging, 2).unlink()  # a build killed before this task finished
    reader, _ = embed_on_ray(corpus, out, spec, True, executor, 6)
    assert kept.stat().st_mtime_ns == before and task_file(staging, 2).exists() and len(reader) == len(DOCS)
    _corpus(corpus, DOCS[:10])  # another corpus: nothing of the first one is reused
    reader, _ = embed_on_ray(corpus, out, spec, True, executor, 6)
    assert len(reader) == 10 and kept.stat().st_mtime_ns != before


def test_the_staging_key_changes_with_everything_the_vectors_depend_on(tmp_path: Path,
                                                                        tiny_encoder_dir: Path) -> None:
    """A resumed build reuses task files only under the same key: each of corpus, encoder weights, encoder
    settings, titles and cut changes it (dropping one from the key would reuse vectors made otherwise)."""
    import dataclasses

    from safetensors.torch import load_file, save_file

    from veracity.infer.retrieval.dense import EncoderSpec
    from veracity.infer.retrieval.ray_embed import staging_key

    corpus, encoder = _corpus(tmp_path / "corpus.jsonl"), tmp_path / "encoder"
    shutil.copytree(tiny_encoder_dir, encoder)
    spec = EncoderSpec(str(encoder))
    first = staging_key(corpus, spec, True, 6)
    assert staging_key(corpus, spec, True, 6) == first
    assert staging_key(corpus, spec, False, 6) != first
    assert staging_key(corpus, spec, True, 5) != first
    assert staging_key(corpus, dataclasses.replace(spec, doc_prefix="passage: "), True, 6) != first
    for path in encoder.rglob("*.safetensors"):  # the same folder, other weights (a retrained encoder)
        save_file({k: v + 0.1 for k, v in load_file(path).items()}, path)
    assert staging_key(corpus, spec, True, 6) != first
    retitled = staging_key(corpus, spec, True, 6)
    _corpus(corpus, DOCS[:10])
    assert staging_key(corpus, spec, True, 6) != retitled
