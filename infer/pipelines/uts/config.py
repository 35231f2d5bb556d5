"""Settings of the UTS drafter (docs/pipelines/uts.md#how-it-works); the judge engine is an
:class:`~veracity.models.engine.EngineConfig` parsed beside this one."""

from __future__ import annotations

from dataclasses import dataclass, field

from veracity.infer.eval.citation_judge import DEFAULT_JUDGE_PROMPT, check_prompt
from veracity.infer.pipelines.uts.drafter import FRAMES
from veracity.infer.pipelines.uts.text import MIN_WORDS

JUDGES = ("llm", "nli")


@dataclass
class UTSConfig:
    """What to draft and how (fields double as ``veracity infer uts`` options)."""

    # --- inputs -------------------------------------------------------------------------------------------
    prepared_dir: str = field(default="runs/prep", metadata={"help": "Output folder of veracity prep."})
    source: str = field(default="averitec_task3_dev", metadata={"help": "Prepared ArticleItem output to draft."})
    split: str | None = field(default=None, metadata={
        "help": "Hash split of the prepared records (train/calib/dev); none: every record of the source."})
    max_examples: int | None = field(default=None, metadata={"help": "First N items in source order."})
    items: str | None = field(default=None, metadata={
        "help": "Your own items instead: a JSONL/JSON of the task-item schema or of WatClaimCheck records."})
    articles_dir: str | None = field(default=None, metadata={"help": "WatClaimCheck premise article files."})
    review_dir: str | None = field(default=None, metadata={"help": "WatClaimCheck review article files."})
    output_dir: str = field(default="runs/uts", metadata={"help": "Run directory."})
    items_per_call: int = field(default=8, metadata={"help": "Items per batch (one judge call per round)."})
    shard: str | None = field(default=None, metadata={"help": "i/n: this machine's share of the items."})
    retry_errors: bool = field(default=False, metadata={"help": "Re-run the items whose last record is an error."})
    progress: bool = field(default=True, metadata={"help": "Show a progress bar."})
    # --- stub and frames ----------------------------------------------------------------------------------
    frame: str = field(default="host_cite", metadata={"help": f"Cite frame: one of {sorted(FRAMES)}."})
    frame_by_host: dict[str, str] = field(default_factory=dict, metadata={
        "help": "Frame per evidence host suffix (afp.com) or item reviewer (afp), over --frame."})
    min_anchor_words: int = field(default=MIN_WORDS, metadata={"help": "Shorter sentences are boilerplate."})
    lede: str = field(default="{claimant} claimed that {claim}.", metadata={"help": "Lede template."})
    lede_no_claimant: str = field(default="It was claimed that {claim}.", metadata={
        "help": "Lede template for items without a claimant."})
    conclusion: str = field(default="Therefore, the claim is {verdict}.", metadata={
        "help": "Conclusion template ({verdict}: the verdict's words)."})
    # --- ShadowVal ----------------------------------------------------------------------------------------
    shadowval: bool = field(default=False, metadata={"help": "Validate each cite with the judge; escalate on no."})
    max_tries: int = field(default=3, metadata={"help": "Anchors judged per evidence URL at most (ShadowVal)."})
    selective_emission: bool = field(default=False, metadata={
        "help": "Drop a cite whose anchors the judge all rejected (needs --shadowval); else keep the first."})
    judge_prompt: str = field(default=DEFAULT_JUDGE_PROMPT, metadata={
        "help": "Judge prompt template with {statement} and {evidence}."})
    judge: str = field(default="llm", metadata={
        "help": "llm: the engine answers yes/no (the paper's judge); nli: the NLI verifier's P(entailment) >= "
                "judge_nli_threshold is a yes (a proxy)."})
    judge_nli_model: str = field(default="embedded", metadata={"help": "NLI verifier of judge nli."})
    judge_nli_threshold: float = field(default=0.5, metadata={
        "help": "judge nli: the P(entailment) from which the verifier says yes."})
    judge_max_new_tokens: int | None = field(default=None, metadata={
        "help": "New tokens of a judge answer the engine does not hold to yes/no (none: 4); an answer it holds gets "
                "enough for yes/no (7), as in every pipeline."})
    judge_max_evidence_chars: int = field(default=4000, metadata={"help": "Evidence text shown to the judge."})
    constrained: bool = field(default=True, metadata={
        "help": "Constrain decoding to the answer's format where the engine can (the LLM judge: yes or no); the "
                "parser stays the final check. false: the model answers freely."})

    def __post_init__(self) -> None:
        for frame in [self.frame, *self.frame_by_host.values()]:
            if frame not in FRAMES:
                raise ValueError(f"unknown frame {frame!r}; frames: {sorted(FRAMES)}")
        if self.selective_emission and not self.shadowval:
            raise ValueError("selective_emission drops cites the judge rejected: it needs shadowval true")
        if self.max_tries < 1:
            raise ValueError(f"max_tries must be >= 1, got {self.max_tries}")
        if self.judge not in JUDGES:
            raise ValueError(f"judge must be one of {JUDGES}, got {self.judge!r}")
        if self.judge_max_new_tokens is not None and self.judge_max_new_tokens < 1:
            raise ValueError(f"judge_max_new_tokens must be >= 1, got {self.judge_max_new_tokens}")
        check_prompt(self.judge_prompt)
