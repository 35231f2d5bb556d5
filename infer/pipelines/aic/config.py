"""Settings of the AIC CTU FEVER-8 pipeline (docs/pipelines/aic.md#how-it-works). The generator engine is an
:class:`~veracity.models.engine.EngineConfig`, parsed beside this one."""

from __future__ import annotations

from dataclasses import dataclass, field

DISTRACTOR_MODES = ("bm25", "random")
THINKING = ("default", "on", "off")


@dataclass
class AICConfig:
    """What to run AIC on and how (fields double as ``veracity infer aic`` options)."""

    # --- claims and stores --------------------------------------------------------------------------------
    prepared_dir: str = field(default="runs/prep", metadata={"help": "Output folder of veracity prep."})
    claims_source: str = field(default="averitec_dev", metadata={"help": "Prepared AveritecClaim output to verify."})
    train_source: str = field(default="averitec_train", metadata={"help": "Prepared train claims for few-shot."})
    max_examples: int | None = field(default=None, metadata={
        "help": "Verify the first N claims (official id order: dev-0, dev-1, …)."})
    knowledge_store: str | None = field(default=None, metadata={
        "help": "A real AVeriTeC knowledge store: a folder of <claim_id>.json (JSON lines {url, url2text}) or one "
                "JSONL with claim_id per line. None: build the proxy store from the prepared claims."})
    proxy_own_documents: bool = field(default=True, metadata={
        "help": "Proxy store: include each claim's own QA answer documents (false: distractors only, the floor)."})
    proxy_distractor_claims: int = field(default=10, metadata={
        "help": "Proxy store: how many other claims lend their documents as distractors."})
    proxy_distractors: str = field(default="bm25", metadata={
        "help": f"Proxy distractors: one of {DISTRACTOR_MODES} (bm25 = the most similar other claims)."})
    proxy_seed: int = field(default=13, metadata={"help": "Seeds the shuffled order of the proxy store's documents."})
    # --- retrieval ----------------------------------------------------------------------------------------
    chunk_chars: int = field(default=2048, metadata={"help": "Maximum chunk length in characters (whole sentences)."})
    embedder: str = field(default="embedded", metadata={"help": "embedder role: 'embedded', 'real' (mxbai), path."})
    embed_max_length: int = field(default=512, metadata={"help": "Encoder input tokens (mxbai: 512)."})
    embed_batch_size: int = field(default=32, metadata={"help": "Chunks per encoder batch."})
    embed_backend: str = field(default="torch", metadata={
        "help": "Encoder runtime on the CPU: torch, onnx (fp32 graph) or onnx_int8 (bench/encoder.py)."})
    index_cache: str | None = field(default=None, metadata={
        "help": "Where per-claim FAISS indexes are cached (default: <output_dir>/index_cache)."})
    k: int = field(default=40, metadata={"help": "Nearest chunks retrieved per claim."})
    mmr_lambda: float = field(default=0.75, metadata={"help": "MMR trade-off: λ·similarity − (1−λ)·redundancy."})
    sources: int = field(default=10, metadata={"help": "l: sources kept after MMR and put in the prompt."})
    source_context_chars: int | None = field(default=None, metadata={
        "help": "Cap on each context before/after in the prompt (None: the full neighbouring chunks, as the paper)."})
    few_shot: int = field(default=10, metadata={"help": "Few-shot train claims picked by BM25."})
    # --- generation ---------------------------------------------------------------------------------------
    thinking: str = field(default="default", metadata={
        "help": f"One of {THINKING}: on/off append Qwen3's /think or /no_think to the claim; default adds nothing."})
    constrained: bool = field(default=True, metadata={
        "help": "Constrain decoding to the answer's schema where the engine can (the parser stays the final check); "
                "max_new_tokens is then the longest answer the schema admits. Not with thinking 'on': a thinking "
                "block cannot come before constrained JSON, so such runs decode unconstrained."})
    answer_prefix: str = field(default="", metadata={
        "help": "Text the answer is made to start with (the chat template rendered, then this prefix; transformers "
                "engine only). Small models need it to enter the JSON format unconstrained; not used under a "
                "constraint (the grammar starts the JSON). '' for real-scale models."})
    max_questions: int = field(default=10, metadata={
        "help": "Questions kept per answer (the scorer reads 10); constrained, the most the answer may hold."})
    question_chars: int = field(default=200, metadata={
        "help": "Constrained: the longest question text the answer schema admits (characters)."})
    answer_chars: int = field(default=300, metadata={
        "help": "Constrained: the longest answer text the answer schema admits (characters)."})
    temperature: float = field(default=0.0, metadata={"help": "Sampling temperature of the answer (0: greedy)."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling of the answer."})
    max_new_tokens: int = field(default=2048, metadata={
        "help": "New tokens of an unconstrained answer (constrained: sized to the longest answer the schema admits)."})
    seed: int = field(default=13, metadata={"help": "Sampling seed of the answer."})
    parse_retries: int = field(default=1, metadata={
        "help": "Retries of a claim whose answer does not parse (another seed, sampled at retry_temperature)."})
    retry_temperature: float = field(default=0.7, metadata={
        "help": "Sampling temperature of a retry after an answer that does not parse."})
    claims_per_call: int = field(default=4, metadata={"help": "Claims per generator call."})
    # --- run ----------------------------------------------------------------------------------------------
    output_dir: str = field(default="runs/aic", metadata={"help": "Run directory."})
    shard: str | None = field(default=None, metadata={"help": "i/n: this machine's share of the claims."})
    retry_errors: bool = field(default=False, metadata={"help": "Re-run the claims whose last record is an error."})
    evaluate: bool = field(default=True, metadata={"help": "Unsharded runs end with `veracity eval averitec`."})
    progress: bool = field(default=True, metadata={"help": "Show a progress bar."})

    def __post_init__(self) -> None:
        if self.proxy_distractors not in DISTRACTOR_MODES:
            raise ValueError(f"proxy_distractors must be one of {DISTRACTOR_MODES}, got {self.proxy_distractors!r}")
        if self.thinking not in THINKING:
            raise ValueError(f"thinking must be one of {THINKING}, got {self.thinking!r}")
        if not 0.0 <= self.mmr_lambda <= 1.0:
            raise ValueError(f"mmr_lambda must be in [0, 1], got {self.mmr_lambda}")
        if not 1 <= self.sources <= self.k:
            raise ValueError(f"need 1 <= sources (l) <= k, got l={self.sources}, k={self.k}")
        if self.chunk_chars < 1:
            raise ValueError(f"chunk_chars must be >= 1, got {self.chunk_chars}")
        if self.parse_retries < 0:
            raise ValueError(f"parse_retries must be >= 0, got {self.parse_retries}")
        if self.max_questions < 1 or self.question_chars < 1 or self.answer_chars < 0:
            raise ValueError("need max_questions >= 1, question_chars >= 1 and answer_chars >= 0, got "
                             f"{self.max_questions}, {self.question_chars}, {self.answer_chars}")

    @property
    def constrains(self) -> bool:
        """Whether answers are constrained to the schema: ``constrained``, unless thinking is on (a constrained
        answer is the JSON alone, so a thinking block could not come first)."""
        return self.constrained and self.thinking != "on"
