"""Settings of the SciClaimSeekers source-retrieval pipeline (docs/pipelines/sciclaimseekers.md#how-it-works).
The LLM reranker's engine is an :class:`~veracity.models.engine.EngineConfig`, parsed beside this one."""

from __future__ import annotations

from dataclasses import dataclass, field

from veracity.infer.pipelines.sciclaimseekers.prompt import SCORE_MAX_NEW_TOKENS
from veracity.infer.retrieval.dense import E5_INSTRUCT_QUERY_PREFIX
from veracity.infer.retrieval.fusion import DEFAULT_ALPHA, DEFAULT_RRF_K

RERANKERS = ("llm", "cross_encoder", "none")
UNCONSTRAINED_MAX_NEW_TOKENS = 8  # a free 0–10 answer: room for "Score: 7" or "**8**"


@dataclass
class SciClaimConfig:
    """What to retrieve for and how (fields double as ``veracity infer sciclaim`` options)."""

    # --- inputs -------------------------------------------------------------------------------------------
    posts: str | None = field(default=None, metadata={
        "help": "Posts TSV (post_id, tweet_text[, cord_uid]); the CheckThat 4b files load as they are."})
    collection: str | None = field(default=None, metadata={
        "help": "Paper collection: JSONL, Parquet or CSV with a key, title, abstract (convert the official pickle "
                "first with `veracity prep sciclaim-collection`)."})
    task: str | None = field(default=None, metadata={
        "help": "Instead of --posts/--collection: a task built from prepared records (climate_fever, "
                "fever_evidence), written under <output_dir>/task first."})
    prepared_dir: str = field(default="runs/prep", metadata={"help": "Output folder of veracity prep (--task)."})
    split: str = field(default="dev", metadata={"help": "Split of the built task's posts (--task)."})
    max_examples: int | None = field(default=None, metadata={"help": "Only the first N posts (file order)."})
    output_dir: str = field(default="runs/sciclaim", metadata={"help": "Run directory."})
    index_dir: str | None = field(default=None, metadata={
        "help": "Where the collection is indexed (reused while collection and encoder match); "
                "default <output_dir>/index."})
    posts_per_call: int = field(default=16, metadata={
        "help": "Posts per batch (first stage retrieved together; a kill loses at most one batch)."})
    shard: str | None = field(default=None, metadata={"help": "i/n: this machine's share of the posts."})
    retry_errors: bool = field(default=False, metadata={"help": "Re-run the posts whose last record is an error."})
    progress: bool = field(default=True, metadata={"help": "Show a progress bar."})
    # --- first stage: BM25 + dense → RRF (docs/pipelines/sciclaimseekers.md#how-it-works) -----------------
    analyzer: str = field(default="social", metadata={
        "help": "BM25 analyzer: social (drop @mentions/URLs, split #hashtags, drop punctuation and stopwords)."})
    stem: bool = field(default=False, metadata={"help": "Snowball-stem BM25 tokens (the paper does not)."})
    embedder: str = field(default="embedded", metadata={"help": "Dense encoder: 'embedded', 'real', path, hub id."})
    query_prefix: str = field(default=E5_INSTRUCT_QUERY_PREFIX, metadata={
        "help": "Instruction before each post (the paper's multilingual-e5-large-instruct prefix)."})
    max_length: int = field(default=512, metadata={"help": "Encoder tokens per text."})
    encode_batch_size: int = field(default=64, metadata={"help": "Texts per encoder batch."})
    encoder_backend: str = field(default="torch", metadata={
        "help": "Encoder runtime on the CPU: torch, onnx (fp32 graph) or onnx_int8 (bench/encoder.py)."})
    candidates: int = field(default=100, metadata={"help": "Hits per retriever before fusion."})
    rrf_k: int = field(default=DEFAULT_RRF_K, metadata={"help": "RRF constant k."})
    fusion_depth: int = field(default=50, metadata={"help": "Fused candidates kept for the reranker."})
    top_k: int = field(default=5, metadata={"help": "Papers submitted per post."})
    alpha: float = field(default=DEFAULT_ALPHA, metadata={"help": "BM25 weight of the α-fusion row of the ablation."})
    # --- rerank -------------------------------------------------------------------------------------------
    reranker: str = field(default="llm", metadata={"help": f"One of {RERANKERS}."})
    rerank_fusion: bool = field(default=False, metadata={
        "help": "true: the reranker's order joins BM25's and dense's as a third ranking, fused by RRF k."})
    rerank_dense_weight: float = field(default=0.0, metadata={
        "help": "Final score = reranker + this × dense + rerank_bm25_weight × BM25, each min–max normalized per post "
                "(0 and 0: the reranker's order alone, the paper's)."})
    rerank_bm25_weight: float = field(default=0.0, metadata={"help": "BM25's weight in that sum."})
    cross_encoder: str = field(default="embedded", metadata={"help": "Cross-encoder: 'embedded', 'real', path."})
    cross_encoder_batch_size: int = field(default=32, metadata={"help": "Pairs per cross-encoder batch."})
    max_new_tokens: int | None = field(default=None, metadata={
        "help": "Tokens the LLM may write for a 0–10 answer the engine does not hold to the format (none: 8); an "
                "answer it holds gets enough for the longest (6), as in every pipeline."})
    constrained: bool = field(default=True, metadata={
        "help": "Constrain decoding to the answer's format where the engine can (the LLM rerank: an integer 0–10); "
                "the parser stays the final check. false: the model answers freely."})
    abstract_max_words: int | None = field(default=None, metadata={
        "help": "Shorten abstracts in the LLM prompt to this many words (none: the whole abstract)."})
    # --- ablation -----------------------------------------------------------------------------------------
    ablation: bool = field(default=False, metadata={
        "help": "Score every configuration (BM25, dense, RRF, α-fusion, RRF + cross-encoder, RRF + LLM) on the "
                "posts' gold ids: <output_dir>/metrics.json rows and one submission TSV per configuration."})
    ablation_llm_posts: int | None = field(default=None, metadata={
        "help": "Ablation: LLM-rerank only the first N posts (slow models); the other configurations are also "
                "reported on those N posts beside their full-split rows."})

    def rerank_new_tokens(self, enforced: bool) -> int:
        """``max_new_tokens`` of an LLM rerank request (the engines' one rule, ``models.engine.answer_budget``):
        the longest 0–10 answer when the engine enforces the regex, else ``max_new_tokens`` (none: 8)."""
        if enforced:
            return SCORE_MAX_NEW_TOKENS
        return self.max_new_tokens if self.max_new_tokens is not None else UNCONSTRAINED_MAX_NEW_TOKENS

    @property
    def interpolates(self) -> bool:
        """Whether the reranker's scores are summed with the first stage's (``rerank_*_weight``)."""
        return bool(self.rerank_dense_weight or self.rerank_bm25_weight)

    def __post_init__(self) -> None:
        if self.posts_per_call < 1:
            raise ValueError(f"posts_per_call must be >= 1, got {self.posts_per_call}")
        if self.reranker not in RERANKERS:
            raise ValueError(f"reranker must be one of {RERANKERS}, got {self.reranker!r}")
        if self.rerank_dense_weight < 0 or self.rerank_bm25_weight < 0:
            raise ValueError("rerank_dense_weight and rerank_bm25_weight must be >= 0")
        if self.rerank_fusion and self.interpolates:
            raise ValueError("rerank_fusion (RRF with the first stage) and rerank_*_weight (a weighted sum) are two "
                             "ways of combining the reranker with the first stage: choose one")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not 1 <= self.top_k <= self.fusion_depth <= self.candidates * 2:
            raise ValueError(f"need 1 <= top_k ({self.top_k}) <= fusion_depth ({self.fusion_depth}) <= "
                             f"2 × candidates ({self.candidates})")
