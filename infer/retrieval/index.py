"""Self-describing retrieval index folders: BM25 and/or FAISS over a corpus of ``CorpusDocument`` records.

Folder layout::

    index_meta.json   format, corpus path + sha256 + count, text settings, sparse/dense parameters, model id
                      and fingerprint
    doc_ids.json      row → doc_id
    bm25/             bm25s arrays (no pickle)
    dense.faiss       FAISS index
    embeddings/       the document vectors (float32, L2-normalized) in shards of ``shard_size`` rows, reusable for
                      another FAISS configuration (format 1: one embeddings.npy; still read)
    texts.bin         the indexed texts, with text_offsets.npy (format 1: read back from the corpus)

Loading checks the corpus hash and the encoder fingerprint: an index built from another corpus or model is an
error, not a silent mismatch.

The build streams: the corpus is read ``stream_batch`` documents at a time and no document text is kept. Each
batch goes to the BM25 builder (compact term statistics; ``bm25_build``), to the text store on disk, and through
``dense.embed_shard`` to the shard writer, which saves every ``shard_size`` rows and adds them to FAISS. Memory
holds the BM25 statistics, the FAISS index and one shard of vectors, never the corpus (bench/scale.py measures it).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from veracity.data_prep.errors import DataError, InputError
from veracity.data_prep.readers import read_jsonl
from veracity.infer.retrieval.analyzers import Analyzer
from veracity.infer.retrieval.dense import (
    DenseEncoder,
    DenseIndex,
    EncoderSpec,
    FaissParams,
    embed_shard,
    new_faiss_index,
)
from veracity.infer.retrieval.sparse import BM25Index, BM25Params
from veracity.infer.retrieval.store import (
    TEXTS,
    DocTexts,
    DocTextWriter,
    EmbeddingReader,
    ShardWriter,
    clear_embeddings,
)
from veracity.io import atomic_writer, sha256_file

logger = logging.getLogger(__name__)
FORMAT_VERSION = 2  # 2: embeddings in shards, texts stored; format 1 folders still load
READABLE_FORMATS = (1, 2)


class IndexMismatchError(InputError):
    """The index was built from another corpus or with another model than the one given (rebuild it)."""


class IndexFileNotFoundError(InputError, FileNotFoundError):
    """A folder without a complete index (no ``index_meta.json``), or the corpus it is checked against is not there:
    a user's error (exit 2, one line), and still a FileNotFoundError to the jobs that then build the index."""


@dataclass
class IndexSettings:
    """How to index a corpus: the flat face of the BM25, encoder and FAISS parameter classes, whose defaults it
    takes (fields double as the ``veracity index build`` options)."""

    sparse: bool = field(default=True, metadata={"help": "Build the BM25 index."})
    dense: bool = field(default=True, metadata={"help": "Build the FAISS index."})
    include_title: bool = field(default=True, metadata={"help": "Index 'title. text' rather than the text alone."})
    analyzer: str = field(default="default", metadata={"help": "BM25 analyzer: default or social."})
    stem: bool = field(default=False, metadata={"help": "Snowball-stem BM25 tokens."})
    k1: float = field(default=BM25Params.k1, metadata={"help": "BM25 term-frequency saturation k1."})
    b: float = field(default=BM25Params.b, metadata={"help": "BM25 document-length normalisation b."})
    embedder: str = field(default=EncoderSpec.model, metadata={
        "help": "Encoder: 'embedded', 'real', a path or hub id."})
    query_prefix: str = field(default=EncoderSpec.query_prefix, metadata={
        "help": "Text put before each query for the encoder (e.g. 'query: ' for E5)."})
    doc_prefix: str = field(default=EncoderSpec.doc_prefix, metadata={
        "help": "Text put before each document for the encoder (e.g. 'passage: ' for E5)."})
    max_length: int = field(default=EncoderSpec.max_length, metadata={"help": "Encoder input length, tokens."})
    encode_batch_size: int = field(default=EncoderSpec.batch_size, metadata={"help": "Texts encoded per batch."})
    encoder_backend: str = field(default=EncoderSpec.backend, metadata={
        "help": "Encoder runtime on the CPU: torch, onnx (fp32 graph) or onnx_int8 (bench/encoder.py)."})
    faiss_kind: str = field(default=FaissParams.kind, metadata={"help": "flat (exact) or hnsw."})
    hnsw_m: int = field(default=FaissParams.m, metadata={"help": "HNSW: links per node (faiss_kind hnsw)."})
    ef_construction: int = field(default=FaissParams.ef_construction, metadata={
        "help": "HNSW: candidate list size while building."})
    ef_search: int = field(default=FaissParams.ef_search, metadata={"help": "HNSW: candidate list size per query."})
    stream_batch: int = field(default=2048, metadata={"help": "Documents read and encoded per batch."})
    shard_size: int = field(default=65536, metadata={
        "help": "Document vectors per embeddings/ shard file (each shard is added to FAISS as it is written)."})
    reuse_embeddings: str | None = field(
        default=None,
        metadata={"help": "An index folder built from the same corpus and encoder: reuse its embeddings "
                  "instead of encoding again (e.g. to try other FAISS parameters)."},
    )
    progress: bool = field(default=True, metadata={"help": "Show a progress bar while indexing."})

    def __post_init__(self) -> None:
        if self.stream_batch < 1 or self.shard_size < 1:
            raise ValueError(f"stream_batch and shard_size must be >= 1, got {self.stream_batch}, {self.shard_size}")

    def analyzer_obj(self) -> Analyzer:
        return Analyzer(self.analyzer, self.stem)

    def bm25_params(self) -> BM25Params:
        return BM25Params(self.k1, self.b)

    def encoder_spec(self) -> EncoderSpec:
        return EncoderSpec(self.embedder, self.query_prefix, self.doc_prefix, self.max_length, self.encode_batch_size,
                           self.encoder_backend)

    def faiss_params(self) -> FaissParams:
        return FaissParams(self.faiss_kind, self.hnsw_m, self.ef_construction, self.ef_search)


def document_text(doc: dict[str, object], include_title: bool) -> str:
    text, title = str(doc.get("text", "")), str(doc.get("title", "") or "")
    return f"{title}. {text}" if include_title and title else text


def iter_corpus(path: Path, batch: int) -> Iterator[list[dict[str, object]]]:
    """Batches of corpus records; a record without ``doc_id``/``text`` is an error naming file and line."""
    chunk: list[dict[str, object]] = []
    for line, row in read_jsonl(path):
        for name in ("doc_id", "text"):
            if not isinstance(row.get(name), str):
                raise DataError(path, line, "missing or not a string", field=name)
        chunk.append(row)
        if len(chunk) >= batch:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def check_corpus(path: str | Path) -> int:
    """Read the whole corpus once before anything is written: every record has a string ``doc_id`` and ``text``
    and no ``doc_id`` repeats. Returns the number of documents; a bad record is a DataError naming file and line
    (a repeated id also the line it was first on), and so is a corpus without documents."""
    first: dict[str, int] = {}
    for line, row in read_jsonl(path):
        for name in ("doc_id", "text"):
            if not isinstance(row.get(name), str):
                raise DataError(path, line, "missing or not a string", field=name)
        doc_id = row["doc_id"]
        if doc_id in first:
            raise DataError(path, line, f"duplicate doc_id {doc_id!r} (first on line {first[doc_id]})",
                            field="doc_id")
        first[doc_id] = line
    if not first:
        raise DataError(path, None, "no documents: the corpus is empty")
    return len(first)


def _reusable_embeddings(folder: Path, corpus_sha: str, encoder: DenseEncoder) -> EmbeddingReader:
    meta = json.loads((folder / "index_meta.json").read_text())
    if meta["corpus"]["sha256"] != corpus_sha or not meta["dense"]:
        raise IndexMismatchError(f"{folder}: embeddings were computed for another corpus (or none were)")
    if meta["dense"]["encoder"]["fingerprint"] != encoder.fingerprint:
        raise IndexMismatchError(f"{folder}: embeddings were computed with another encoder")
    return EmbeddingReader(folder)


def build_index(corpus: str | Path, output_dir: str | Path, settings: IndexSettings,
                encoder: DenseEncoder | None = None, checked: int | None = None, device: str = "auto",
                embedded: tuple[EmbeddingReader, dict[str, Any]] | None = None) -> Path:
    """Build the configured indexes for ``corpus`` into ``output_dir``; returns the folder.

    The corpus is checked first (:func:`check_corpus`; ``checked``: the document count of a check the caller
    already made), so a bad record stops the build before anything is written. Documents are then read
    ``stream_batch`` at a time and never kept: BM25 keeps term statistics, texts go to ``texts.bin``, vectors to
    ``embeddings/`` shards that are added to FAISS one by one. ``embedded``: the documents' vectors in corpus order
    and the encoder's ``describe()``, computed elsewhere (``ray_embed.embed_on_ray``): no encoder is loaded.
    """
    from tqdm.auto import tqdm  # lazy: 0.08 s, only a build needs it

    corpus, out = Path(corpus), Path(output_dir)
    if not (settings.sparse or settings.dense):
        raise ValueError("nothing to build: enable sparse and/or dense")
    total = check_corpus(corpus) if checked is None else checked
    if settings.dense and encoder is None and embedded is None:
        encoder = DenseEncoder(settings.encoder_spec(), device=device)  # device: where it embeds, if none is given
    corpus_sha = sha256_file(corpus)
    out.mkdir(parents=True, exist_ok=True)
    (out / "index_meta.json").unlink(missing_ok=True)  # the folder is incomplete until the end
    reuse, described = embedded if embedded is not None else (None, encoder.describe() if encoder else None)
    if settings.dense and encoder is not None and settings.reuse_embeddings:
        reuse = _reusable_embeddings(Path(settings.reuse_embeddings), corpus_sha, encoder)
    clear_embeddings(out)
    bm25 = BM25Index.builder(settings.analyzer_obj(), settings.bm25_params()) if settings.sparse else None
    faiss_index = shards = None
    if settings.dense and described is not None:
        faiss_index = new_faiss_index(int(described["dim"]), settings.faiss_params())
        shards = ShardWriter(out, settings.shard_size, on_shard=faiss_index.add)
    texts_out = DocTextWriter(out)
    doc_ids: list[str] = []
    seen: set[str] = set()
    bar = tqdm(total=total, unit="doc", desc=f"indexing {corpus.name}", disable=not settings.progress)
    for chunk in iter_corpus(corpus, settings.stream_batch):
        texts = [document_text(d, settings.include_title) for d in chunk]
        start = len(doc_ids)
        for doc in chunk:
            doc_id = str(doc["doc_id"])
            if doc_id in seen:  # checked before the build; the file changed since
                raise ValueError(f"{corpus}: duplicate doc_id {doc_id!r}")
            seen.add(doc_id)
            doc_ids.append(doc_id)
        del chunk
        texts_out.add(texts)
        if bm25 is not None:
            bm25.add(texts)
        if shards is not None:
            shards.add(reuse.rows(start, len(doc_ids)) if reuse is not None else embed_shard(encoder, texts))
        bar.update(len(texts))
    bar.close()
    texts_out.close()
    del seen
    meta: dict[str, object] = {
        "format_version": FORMAT_VERSION,
        "corpus": {"path": str(corpus.resolve()), "sha256": corpus_sha, "documents": len(doc_ids)},
        "include_title": settings.include_title,
        "sparse": None,
        "dense": None,
    }
    if bm25 is not None:
        BM25Index(settings.analyzer_obj(), settings.bm25_params(), bm25.finish(), doc_ids).save(out / "bm25")
        meta["sparse"] = {**settings.analyzer_obj().to_dict(), **asdict(settings.bm25_params())}
    if faiss_index is not None and shards is not None:
        count = shards.close()
        DenseIndex(faiss_index, settings.faiss_params(), doc_ids).save(out / "dense.faiss")
        meta["dense"] = {"encoder": described, "faiss": asdict(settings.faiss_params()),
                         "embeddings": {"shards": count, "shard_size": settings.shard_size}}
    with atomic_writer(out / "doc_ids.json") as handle:
        json.dump(doc_ids, handle)
    with atomic_writer(out / "index_meta.json") as handle:  # written last: its presence marks a complete index
        json.dump(meta, handle, indent=2, sort_keys=True)
    return out


@dataclass
class LoadedIndex:
    folder: Path
    meta: dict[str, object]
    doc_ids: list[str]
    sparse: BM25Index | None
    dense: DenseIndex | None
    encoder: DenseEncoder | None

    def texts(self) -> Mapping[str, str]:
        """doc_id → indexed text, for rerankers and MMR: read from the index's text store on demand, or (format 1)
        all at once from the (hash-checked) corpus."""
        if (self.folder / TEXTS).exists():
            return DocTexts(self.folder, self.doc_ids)
        corpus = self.meta["corpus"]  # type: ignore[index]
        include_title = bool(self.meta["include_title"])
        return {str(d["doc_id"]): document_text(d, include_title)
                for chunk in iter_corpus(Path(corpus["path"]), 4096) for d in chunk}  # type: ignore[index]


def read_meta(folder: Path) -> dict[str, Any]:
    """``index_meta.json`` of an index folder (written last: a folder without it is no index)."""
    meta_path = folder / "index_meta.json"
    if not meta_path.exists():
        raise IndexFileNotFoundError(f"{folder} is not a complete index (no index_meta.json)")
    return json.loads(meta_path.read_text())


def built_encoder(meta: dict[str, Any]) -> EncoderSpec | None:
    """The encoder an index embedded its documents with (from its meta); None for a BM25-only index."""
    if not meta["dense"]:
        return None
    built = meta["dense"]["encoder"]
    fields = ("model", "query_prefix", "doc_prefix", "max_length", "batch_size")
    return EncoderSpec(**{k: built[k] for k in fields}, backend=built.get("backend", "torch"))


def load_index(folder: str | Path, corpus: str | Path | None = None, embedder: str | None = None,
               encoder: DenseEncoder | None = None, ef_search: int | None = None,
               device: str = "auto") -> LoadedIndex:
    """Load an index folder, checking it against the corpus and encoder it will be used with (``device``: where
    the query encoder runs when none is given)."""
    folder = Path(folder)
    meta = read_meta(folder)
    if meta.get("format_version") not in READABLE_FORMATS:
        raise IndexMismatchError(f"{folder}: index format {meta.get('format_version')}, expected one of "
                                 f"{READABLE_FORMATS}")
    corpus_meta = meta["corpus"]
    corpus_path = Path(corpus) if corpus else Path(corpus_meta["path"])
    if corpus_path.exists():
        digest = sha256_file(corpus_path)
        if digest != corpus_meta["sha256"]:
            raise IndexMismatchError(
                f"{folder} was built from a corpus with sha256 {corpus_meta['sha256'][:12]}…, but {corpus_path} "
                f"has {digest[:12]}…: rebuild the index (veracity index build) for this corpus"
            )
    elif corpus:
        raise IndexFileNotFoundError(f"corpus {corpus_path} not found")
    meta["corpus"]["path"] = str(corpus_path.resolve())
    doc_ids = json.loads((folder / "doc_ids.json").read_text())
    sparse = BM25Index.load(folder / "bm25", doc_ids) if meta["sparse"] else None
    dense = None
    spec = built_encoder(meta)
    if spec is not None:
        built = meta["dense"]["encoder"]
        if embedder is not None and embedder != spec.model:
            spec = replace(spec, model=embedder)
        encoder = encoder or DenseEncoder(spec, device=device)
        if encoder.fingerprint != built["fingerprint"]:
            raise IndexMismatchError(
                f"{folder} was built with encoder {built['model']!r} (fingerprint {built['fingerprint']}), but the "
                f"encoder given is {encoder.spec.model!r} (fingerprint {encoder.fingerprint}): rebuild the index"
            )
        given = (encoder.spec.doc_prefix, encoder.spec.max_length, encoder.spec.backend)
        if given != (built["doc_prefix"], built["max_length"], spec.backend):
            raise IndexMismatchError(
                f"{folder} encoded documents with prefix {built['doc_prefix']!r}, max_length {built['max_length']} "
                f"and backend {spec.backend}, the encoder given uses {given[0]!r}, {given[1]} and {given[2]}: rebuild"
            )
        params = FaissParams(**meta["dense"]["faiss"])
        if ef_search is not None:
            params = FaissParams(params.kind, params.m, params.ef_construction, ef_search)
        dense = DenseIndex.load(folder / "dense.faiss", params, doc_ids)
    return LoadedIndex(folder, meta, doc_ids, sparse, dense, encoder if dense else None)
