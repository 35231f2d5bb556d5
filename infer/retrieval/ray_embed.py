"""A corpus embedded on Ray (``veracity index build --executor ray --workers K``): the document vectors of an index,
computed by Ray Data actors that each load the encoder once, then one index built from them.

1. The driver cuts the (already checked) corpus into tasks of ``docs_per_task`` documents at line ends — the
   build's ``stream_batch``, so that each task embeds the very batch a local build embeds and the vectors agree
   (:func:`corpus_tasks`: byte offset and document count, one pass over the file; no text goes through Ray).
2. ``map_batches`` runs :class:`EmbedWorker` on ``--workers`` actors: each reads its tasks' documents from the
   corpus (:func:`read_task`, the project's JSONL parser), embeds them with :func:`~.dense.embed_shard` (the local
   build's own function) and saves one ``.npy`` per task under ``<output_dir>/ray_embeddings/embeddings/``. A task
   whose file is there with its row count is skipped: a killed build resumes where it stopped (``key.json``: the
   corpus by hash, the encoder by content and the cut those files belong to; another starts over).
3. :func:`~.index.build_index` then builds BM25, the text store and FAISS as locally, taking the vectors from those
   files in corpus order instead of an encoder (the driver loads no model), and the files are removed.

The encoder is named by the actors (``describe()``: spec, content fingerprint, dimension); they must all agree.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from veracity.infer.executors import MAX_RESTARTS, ExecutorConfig, connect, forwarded_env
from veracity.infer.retrieval.dense import EncoderSpec, encoder_id
from veracity.infer.retrieval.store import SHARD_DIR, EmbeddingReader
from veracity.io import parse_jsonl, sha256_file

STAGING = "ray_embeddings"  # inside the index folder while it is built: a killed build resumes from it


def corpus_tasks(path: Path, docs_per_task: int) -> list[dict[str, int]]:
    """``[{"task", "offset", "count"}, ...]``: the corpus in runs of at least ``docs_per_task`` documents (fewer
    for the last), each starting at the byte after an LF, so that :func:`read_task` reads exactly its documents.
    A document is a non-blank line as :func:`veracity.io.jsonl_lines` splits them (a lone CR ends one too)."""
    tasks: list[dict[str, int]] = []
    offset = start = count = 0
    with open(path, "rb") as handle:
        for number, chunk in enumerate(handle):  # a binary file iterates at LF, the only place a task may start
            if count >= docs_per_task:
                tasks.append({"task": len(tasks), "offset": start, "count": count})
                start, count = offset, 0
            body = chunk.removesuffix(b"\n").removesuffix(b"\r")
            if number == 0:
                body = body.removeprefix(b"\xef\xbb\xbf")
            count += sum(1 for piece in body.split(b"\r") if piece.strip())
            offset += len(chunk)
    if count:
        tasks.append({"task": len(tasks), "offset": start, "count": count})
    return tasks


def read_task(path: Path, offset: int, count: int) -> Iterator[dict[str, Any]]:
    """The ``count`` documents from byte ``offset`` of a checked corpus (:func:`corpus_tasks`' cuts)."""
    with open(path, "rb") as handle:
        handle.seek(offset)
        left = count
        for _, row, problem in parse_jsonl(handle):
            if problem is not None or not isinstance(row, dict):
                raise ValueError(f"{path}: a record after byte {offset} changed since the corpus was checked")
            yield row
            left -= 1
            if not left:
                return
    if left:
        raise ValueError(f"{path}: {left} documents missing after byte {offset}: the corpus changed")


def task_file(staging: Path, task: int) -> Path:
    """Where task ``task``'s vectors go: named so that :class:`~.store.EmbeddingReader` reads them in task order."""
    return staging / SHARD_DIR / f"shard-{task:07d}.npy"


class EmbedWorker:
    """One Ray actor: the encoder loaded once; a batch of tasks in, their vectors on disk, the encoder named out."""

    def __init__(self, spec: EncoderSpec, corpus: str, staging: str, include_title: bool, cwd: str, device: str):
        from veracity.infer.retrieval.dense import DenseEncoder  # lazy: the actor's import, not the driver's

        if Path(cwd).is_dir():
            os.chdir(cwd)  # a relative corpus or model path means what it means to the driver
        self.encoder = DenseEncoder(spec, device=device)  # the ONNX backends run on the CPU whatever it says
        self.corpus, self.staging, self.include_title = Path(corpus), Path(staging), include_title

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[Any]]:
        from veracity.infer.retrieval.dense import embed_shard
        from veracity.infer.retrieval.index import document_text

        done = []
        for task, offset, count in zip(batch["task"], batch["offset"], batch["count"], strict=True):
            target = task_file(self.staging, int(task))
            if not (target.exists() and len(np.load(target, mmap_mode="r")) == count):
                texts = [document_text(doc, self.include_title)
                         for doc in read_task(self.corpus, int(offset), int(count))]
                tmp = target.with_suffix(f".{os.getpid()}.tmp")
                with open(tmp, "wb") as handle:
                    np.save(handle, embed_shard(self.encoder, texts))
                os.replace(tmp, target)
            done.append(int(task))
        return {"task": done, "encoder": [json.dumps(self.encoder.describe())] * len(done)}


def staging_key(corpus: Path, spec: EncoderSpec, include_title: bool, docs_per_task: int) -> dict[str, Any]:
    """What a build's task files were computed from (``key.json``): a build under another corpus (by content),
    encoder (by content), encoder settings, document text (titles in or out) or cut starts again."""
    return {"corpus_sha256": sha256_file(corpus), "encoder": encoder_id(spec), "spec": asdict(spec),
            "include_title": include_title, "docs_per_task": docs_per_task}


def embed_on_ray(corpus: Path, output_dir: Path, spec: EncoderSpec, include_title: bool, executor: ExecutorConfig,
                 docs_per_task: int, device: str = "auto") -> tuple[EmbeddingReader, dict[str, Any]]:
    """Embed every document of the checked ``corpus`` on Ray into ``output_dir/ray_embeddings``; the vectors in
    corpus order and the encoder's description (what ``index_meta.json`` records)."""
    connect(executor)
    from ray import data as ray_data

    staging = output_dir / STAGING
    key = staging_key(corpus, spec, include_title, docs_per_task)
    if not (staging / "key.json").exists() or json.loads((staging / "key.json").read_text()) != key:
        shutil.rmtree(staging, ignore_errors=True)
    (staging / SHARD_DIR).mkdir(parents=True, exist_ok=True)
    (staging / "key.json").write_text(json.dumps(key, sort_keys=True))
    tasks = corpus_tasks(corpus, docs_per_task)
    for stale in (staging / SHARD_DIR).glob("shard-*.npy"):  # files of a longer corpus built here before
        if int(stale.stem.split("-")[1]) >= len(tasks):
            stale.unlink()
    ray_data.DataContext.get_current().enable_progress_bars = False
    dataset = ray_data.from_items(tasks).map_batches(
        EmbedWorker, fn_constructor_args=(spec, str(corpus.resolve()), str(staging.resolve()), include_title,
                                          os.getcwd(), device),
        batch_size=1, compute=ray_data.ActorPoolStrategy(size=executor.workers),
        num_gpus=executor.num_gpus_per_worker or None, runtime_env={"env_vars": forwarded_env()},
        max_restarts=MAX_RESTARTS, max_task_retries=MAX_RESTARTS)
    described = {row["encoder"] for row in dataset.iter_rows()}
    if len(described) != 1:
        raise RuntimeError(f"the actors loaded different encoders: {sorted(described)}")
    description = json.loads(described.pop())
    if {k: description[k] for k in asdict(spec)} != asdict(spec):
        raise RuntimeError(f"an actor's encoder {description} is not the one asked for ({asdict(spec)})")
    return EmbeddingReader(staging), description
