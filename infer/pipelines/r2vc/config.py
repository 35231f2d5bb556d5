"""Settings of the R2VC pipeline (docs/pipelines/r2vc.md#config-fields). Thresholds and weights of the signals live in
:class:`~veracity.infer.pipelines.r2vc.signals.SignalSettings`; the generator engine in
:class:`~veracity.models.engine.EngineConfig`; both are parsed beside this one."""

from __future__ import annotations

from dataclasses import dataclass, field

from veracity.infer.pipelines.r2vc.prompt import RATIONALE_MAX_CHARS
from veracity.infer.retrieval.fusion import DEFAULT_ALPHA

ABSTENTION_MODES = ("fixed", "risk_control", "none")
# Prepared claim sources without evidence of their own → the prepared corpus they retrieve from.
RETRIEVAL_CORPORA = {"climate_fever_claims": "climate_fever_corpus", "fever_paper_dev": "fever_wiki_paragraphs"}


# --nli_backend's help, wherever a command scores with the verifier (docs/results.md#verifier-backends)
NLI_BACKEND_HELP = (
    "Verifier backend: torch, onnx (ONNX Runtime, fp32), onnx_int8, openvino (fp32), openvino_int8 (static INT8, the "
    "fastest on a CPU with VNNI), openvino_cascade (that INT8, the close calls re-scored in fp32: torch's accuracy "
    "within 0.01), or auto (onnx on a CPU, its graph exported on first use; torch on a GPU).")


@dataclass
class R2VCConfig:
    """What to run R2VC on and how (fields double as ``veracity infer r2vc`` options)."""

    # --- inputs -------------------------------------------------------------------------------------------
    prepared_dir: str = field(default="runs/prep", metadata={"help": "Output folder of veracity prep."})
    sources: list[str] = field(default_factory=lambda: ["fever_symmetric", "vitaminc"], metadata={
        "help": "Prepared claim sources. Given evidence is used where a source has it; "
                f"{sorted(RETRIEVAL_CORPORA)} retrieve from their corpus."})
    split: str = field(default="dev", metadata={"help": "Hash split (the calibrator trains on calib, never dev)."})
    max_examples: int | None = field(default=None, metadata={
        "help": "Cap per source: the first N claims in an order seeded by --subset_seed (not by --seed). Prepared "
                "sources only: refused with --claims."})
    subset_seed: int = field(default=13, metadata={
        "help": "Seeds which claims --max_examples keeps (the order of each source); --seed, the sampling seed, "
                "never changes the subset. 13 keeps the subsets of runs made when one seed did both jobs."})
    claims: str | None = field(default=None, metadata={
        "help": "A JSONL of your own claims {id, claim[, evidence, label]} instead of prepared sources; claims "
                "without evidence retrieve from --index_dir."})
    index_dir: str | None = field(default=None, metadata={"help": "A `veracity index build` folder to retrieve from."})
    index_root: str = field(default="runs/index", metadata={"help": "Where prepared corpora are indexed (once)."})
    output_dir: str = field(default="runs/r2vc", metadata={"help": "Run directory."})
    shard: str | None = field(default=None, metadata={"help": "i/n: this machine's share of the claims."})
    claims_per_call: int = field(default=8, metadata={"help": "Claims per generator / verifier call."})
    retry_errors: bool = field(default=False, metadata={"help": "Re-run the claims whose last record is an error."})
    progress: bool = field(default=True, metadata={"help": "Show a progress bar."})
    inject: str | None = field(default=None, metadata={
        "help": "Probe: append this sentence to every evidence passage (e.g. an instruction aimed at the model), "
                "to measure how often decisions flip (bench/r2vc_injection.py)."})
    # --- retrieval (sources without their own evidence) ----------------------------------------------------
    top_k: int = field(default=5, metadata={"help": "Evidence passages kept per claim from retrieval (the pool K)."})
    alpha: float = field(default=DEFAULT_ALPHA, metadata={
        "help": "BM25 weight of the min–max α-fusion (docs/pipelines/r2vc.md#how-it-works)."})
    retrieval_candidates: int = field(default=100, metadata={"help": "Hits per retriever before fusion."})
    # --- generator ----------------------------------------------------------------------------------------
    use_generator: bool = field(default=True, metadata={"help": "false: the NLI-only ablation (no generator)."})
    n_candidates: int = field(default=12, metadata={"help": "Candidates sampled per claim (the paper: up to 12)."})
    temperature: float = field(default=0.7, metadata={"help": "Sampling temperature of the candidates."})
    top_p: float = field(default=0.95, metadata={"help": "Nucleus sampling of the candidates."})
    max_new_tokens: int = field(default=160, metadata={
        "help": "Answer budget when unconstrained; constrained, it is sized to the longest answer the schema allows."})
    constrained: bool = field(default=True, metadata={
        "help": "Constrain decoding to the answer's JSON schema where the engine can (transformers, vLLM, servers "
                "known to enforce it); the parser stays the final check. false: free decoding (an ablation)."})
    rationale_max_chars: int = field(default=RATIONALE_MAX_CHARS, metadata={
        "help": "Longest rationale the answer schema allows (bounds the answer, so it ends before the budget); the "
                "SFT/DPO targets are written within the default."})
    seed: int = field(default=13, metadata={
        "help": "Sampling seed of the generator's candidates (which claims --max_examples keeps is --subset_seed)."})
    # --- verifier and decision ----------------------------------------------------------------------------
    nli_model: str = field(default="embedded", metadata={"help": "NLI verifier: 'embedded', 'real', path, hub id."})
    nli_batch_size: int = field(default=32, metadata={"help": "(passage, claim) pairs per verifier batch."})
    nli_backend: str = field(default="auto", metadata={"help": NLI_BACKEND_HELP})
    use_verifier: bool = field(default=True, metadata={
        "help": "false: the generator-only ablation (majority label of the candidates, its vote share as confidence, "
                "no verifier-based choice or abstention; the verifier's scores are still recorded)."})
    nli_candidate: bool = field(default=False, metadata={
        "help": "Add the verifier's own label (y_NLI) as one more candidate, scored by the same calibrator."})
    calibrator: str | None = field(default=None, metadata={
        "help": "calibrator.json from `veracity train calibrator`; none: rank by s_ver, confidence = s_ver."})
    abstention: str = field(default="fixed", metadata={"help": f"One of {ABSTENTION_MODES}."})
    tau_ver: float = field(default=0.55, metadata={"help": "Abstain when the chosen candidate's s_ver is below."})
    tau_cal: float = field(default=0.60, metadata={"help": "Abstain when the calibrated confidence is below."})
    target_risk: float = field(default=0.10, metadata={
        "help": "risk_control: the error rate allowed among answered claims (certified on held-out calib claims)."})
    delta: float = field(default=0.10, metadata={"help": "risk_control: allowed probability of exceeding it."})

    def __post_init__(self) -> None:
        if self.abstention not in ABSTENTION_MODES:
            raise ValueError(f"abstention must be one of {ABSTENTION_MODES}, got {self.abstention!r}")
        repeated = sorted({s for s in self.sources if list(self.sources).count(s) > 1})
        if repeated:
            raise ValueError(f"sources lists {repeated} more than once")
        if self.calibrator in ("", "none", "None"):
            self.calibrator = None
        if not 1 <= self.n_candidates <= 64:
            raise ValueError(f"n_candidates must be in 1..64, got {self.n_candidates}")
        if not self.use_verifier and (self.nli_candidate or self.calibrator or not self.use_generator):
            raise ValueError("use_verifier false (generator-only) takes no nli_candidate, calibrator or NLI-only run")
        if not self.use_generator and not self.nli_candidate:
            self.nli_candidate = True  # NLI-only: the verifier's label is the only candidate
        if self.claims and self.max_examples is not None:  # it caps prepared sources: silently ignored otherwise
            raise ValueError("--max_examples caps prepared sources, not a --claims file: give a file of the claims to "
                             f"run (the first N: head -n N {self.claims})")
        if self.abstention == "risk_control" and not self.calibrator:
            raise ValueError("abstention risk_control needs a calibrator (its tau_cal is chosen on calib)")
