"""R2VC over a batch of claims: evidence → candidates → verifier signals → calibrator → two-stage decision.

``R2VCPipeline(config, signal_settings, engine_config)`` loads every model once; calling it on a list of claim
items returns one output record per item (run by ``infer/batch.py``: resumable, sharded, errors isolated). Per
batch there is one generator call (n candidates per claim) and one verifier call over every distinct
(passage, claim) pair, shared by all candidates of a claim. The record keeps the evidence verbatim, every
candidate with its signals, features and confidence, the decision and why.

Defined outcomes: a claim with no evidence is ``no_evidence`` (NOT ENOUGH INFO, abstained, no model call); an
answer that does not parse stays in the record with its error and takes no part in the decision; when no
candidate parses (and no NLI candidate competes) the outcome is ``no_parsable_candidate`` (abstained). An engine
that made no answer (a server down, timeouts or 5xx through its retries) makes the claim an error record instead,
run again by ``--retry_errors true``: a model that answered unparsably abstains, a missing answer does not. Each
record keeps the decoding facts its candidates were made under (``decoding``: ``models.engine.record_decoding``).

A calibrator fit on the generator's mean token log-probability (feature ``mean_logprob``) never scores a generator
candidate without one (the engine gave none, an empty list or a non-finite value): the claim fails with
:class:`MissingLogprobError`, which names the engine, and becomes an error record of the batch output
(``infer/batch.py``; its neighbours in the batch are not re-run). No value is put in its place. Fit a calibrator on
this engine's output instead (``veracity train calibrator`` leaves the feature out when the engine gives none).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from veracity.data_prep.errors import DataError
from veracity.data_prep.prepared import prepared_path
from veracity.data_prep.schema import NOT_ENOUGH_INFO
from veracity.infer.eval.r2vc import main as evaluate
from veracity.infer.parsing import name_cut_off
from veracity.infer.pipelines.contract import Pipeline
from veracity.infer.pipelines.r2vc.config import RETRIEVAL_CORPORA, R2VCConfig
from veracity.infer.pipelines.r2vc.items import (
    CORPUS_INDEX,
    index_location,
    load_calibrator,
    prepared_items,
    record_scope,
    retrieval_embedders,
    risk_control_scope,
    user_item,
    user_items,
)
from veracity.infer.pipelines.r2vc.prompt import (
    answer_constraint,
    keeps_quote_format,
    parse_r2vc_answer,
    prompt_messages,
)
from veracity.infer.pipelines.r2vc.report import FLAGS as REPORT_FLAGS
from veracity.infer.pipelines.r2vc.report import report_item
from veracity.infer.pipelines.r2vc.risk_control import risk_controlled_threshold
from veracity.infer.pipelines.r2vc.signals import (
    NLI_TO_LABEL,
    Signals,
    SignalSettings,
    abstain,
    candidate_features,
    candidate_signals,
    claim_signals,
    usable_logprob,
)
from veracity.infer.retrieval.index import build_index, load_index
from veracity.infer.retrieval.searcher import Searcher, SearchSettings
from veracity.io import sha256_file
from veracity.models.calibrator import CalibratorFeatureError, LogisticCalibrator, calibrator_file, logprob_definition
from veracity.models.engine import (
    EngineConfig,
    GenerationRequest,
    GenerationResult,
    record_decoding,
    unavailable_error,
)
from veracity.models.engine_factory import make_engine
from veracity.models.nli import NLIVerifier, verifier_id

logger = logging.getLogger(__name__)
Item = dict[str, Any]
LOGPROB_FEATURE = "mean_logprob"


class MissingLogprobError(CalibratorFeatureError):
    """A calibrator fit on ``mean_logprob`` was asked to score a generator candidate without a log-probability."""


def thresholds(config: R2VCConfig, calibrator: Any | None) -> tuple[float | None, float | None]:
    """(τ_ver, τ_cal) in force: fixed → the configured pair (τ_cal only with a calibrator); risk_control → no τ_ver
    and the τ_cal that certifies ``target_risk`` at level ``delta`` on the calibrator's held-out calib scores
    (infinite — abstain on everything — when no threshold can be certified); none → no abstention."""
    if config.abstention == "none":
        return None, None
    if config.abstention == "risk_control":
        held_out = (calibrator.risk_control or {}) if calibrator else {}
        if "holdout_confidence" not in held_out:
            raise ValueError("abstention risk_control: the calibrator keeps no held-out calib scores; fit it with "
                             "`veracity train calibrator`")
        chosen = risk_controlled_threshold(held_out["holdout_confidence"], held_out["holdout_correct"],
                                           config.target_risk, config.delta)["tau_cal"]
        return None, float("inf") if chosen is None else float(chosen)
    return config.tau_ver, (config.tau_cal if calibrator else None)


def parse_candidates(result: GenerationResult | None, n_passages: int) -> list[dict[str, Any]]:
    """Generated candidates as records: label, rationale, cited ids and mean log-prob, or the parse error.

    ``mean_logprob`` is None where the engine gave no finite log-probability (none, an empty list, or a non-finite
    value), so every reader of the record (the calibrator's fit included) sees one kind of "missing".
    """
    if result is None:
        return []
    out = []
    for candidate in result.candidates:
        answer, error = parse_r2vc_answer(candidate.text, num_passages=n_passages)
        error = name_cut_off(error, candidate.finish_reason)
        out.append({"from": "generator", "text": candidate.text, "finish_reason": candidate.finish_reason,
                    "mean_logprob": usable_logprob(candidate.mean_logprob), "parse_error": error,
                    "label": answer.label if answer else None, "rationale": answer.rationale if answer else "",
                    "evidence_ids": list(answer.evidence_ids) if answer else [],
                    # the trained answer format kept (cite, quote, conclude): eval r2vc's quote_format_rate
                    "quote_format": keeps_quote_format(answer.rationale) if answer else False})
    return out


def require_logprobs(item: Item, candidates: Sequence[dict[str, Any]], calibrator: Any, engine: str) -> None:
    """Refuse to score with a calibrator fit on ``mean_logprob`` a generator candidate that has none.

    Raises:
        MissingLogprobError: naming the claim, the candidate and the engine.
    """
    if LOGPROB_FEATURE not in calibrator.feature_names:
        return
    for number, c in enumerate(candidates):
        if c["from"] == "generator" and c["features"][LOGPROB_FEATURE] is None:
            raise MissingLogprobError(
                f"claim {item['id']!r}: candidate {number} from engine {engine} has no finite mean token "
                f"log-probability, and the calibrator was fit on feature {LOGPROB_FEATURE!r}; use an engine that "
                "returns log-probabilities, or fit a calibrator on this engine's output (`veracity train "
                "calibrator` leaves the feature out when the engine gives none)")


def decide(item: Item, nli: np.ndarray, result: GenerationResult | None, config: R2VCConfig,
           settings: SignalSettings, calibrator: Any | None, engine: str = "(not named)") -> dict[str, Any]:
    """The output record of one claim from its passage scores and generation result (no model calls).

    Every parsed candidate and the NLI candidate (when it competes) form the pool the decision chooses from;
    ``label_agreement`` is measured over that pool in every recipe. The τ_ver test reads the unrounded s_ver (the
    record shows it rounded).

    Args:
        engine: the generator engine's identity (``Engine.identity``), named by the errors.

    Raises:
        MissingLogprobError: a calibrator fit on ``mean_logprob`` and a generator candidate without one.
    """
    passages = item["passages"]
    texts = [p["text"] for p in passages]
    s_ent, s_contr, s_cov, y_nli = claim_signals(nli, settings)
    record: dict[str, Any] = {
        "id": item["id"], "source": item.get("source", ""), "claim": item["claim"], "gold": item.get("gold"),
        "passages": passages, "nli": np.round(nli, 6).tolist(),
        "claim_signals": {"s_ent": s_ent, "s_contr": s_contr, "s_cov": s_cov, "y_nli": y_nli},
        "generation_error": result.error if result is not None else None,
        "candidates": parse_candidates(result, len(passages)),
    }
    if not passages:
        return {**record, "outcome": "no_evidence", "chosen": None, "label": NOT_ENOUGH_INFO,
                "prediction": NOT_ENOUGH_INFO, "abstained": True, "abstain_reason": "no evidence",
                "confidence": 0.0, "confidence_uncalibrated": 0.0}
    candidates = record["candidates"]
    if config.nli_candidate:
        candidates.append({"from": "nli", "text": "", "finish_reason": None, "mean_logprob": None, "parse_error": None,
                           "label": NLI_TO_LABEL[y_nli], "rationale": "",
                           "evidence_ids": [int(np.argmax(np.asarray(nli)[:, 0])) + 1]})
    usable = [c for c in candidates if c["label"]]
    pool_labels = [c["label"] for c in usable]
    # The unrounded signals, one per usable candidate, for the decision (the record's copy is rounded for display).
    exact = [candidate_signals(nli, c["label"], c["evidence_ids"], item["claim"], texts, settings) for c in usable]
    for c, signals in zip(usable, exact, strict=True):
        c["signals"] = signals.to_dict()
        c["features"] = candidate_features(signals, c["label"], pool_labels, c["evidence_ids"], c["rationale"],
                                           c["mean_logprob"], from_nli=c["from"] == "nli")
        c["confidence_uncalibrated"] = float(np.clip(signals.s_ver, 0.0, 1.0))
    if not usable:
        return {**record, "outcome": "no_parsable_candidate", "chosen": None, "label": NOT_ENOUGH_INFO,
                "prediction": NOT_ENOUGH_INFO, "abstained": True, "abstain_reason": "no parsable candidate",
                "confidence": 0.0, "confidence_uncalibrated": 0.0}
    if not config.use_verifier:  # generator-only: self-consistency vote, no verifier in the decision
        for c in usable:
            c["confidence"] = c["confidence_uncalibrated"] = c["features"]["label_agreement"]
    elif calibrator is not None:
        require_logprobs(item, usable, calibrator, engine)
        for c, p in zip(usable, calibrator.predict_proba([c["features"] for c in usable]), strict=True):
            c["confidence"] = float(p)
    else:
        for c in usable:
            c["confidence"] = c["confidence_uncalibrated"]
    best = max(range(len(usable)), key=lambda k: (usable[k]["confidence"], tie_break(usable[k], exact[k], config)))
    chosen = usable[best]
    tau_ver, tau_cal = thresholds(config, calibrator) if config.use_verifier else (None, None)
    reason = abstain(exact[best].s_ver, chosen["confidence"], tau_ver, tau_cal)
    return {**record, "outcome": "abstained" if reason else "answered", "chosen": candidates.index(chosen),
            "label": chosen["label"], "prediction": NOT_ENOUGH_INFO if reason else chosen["label"],
            "abstained": reason is not None, "abstain_reason": reason, "confidence": chosen["confidence"],
            "confidence_uncalibrated": chosen["confidence_uncalibrated"]}


def tie_break(candidate: dict[str, Any], signals: Signals, config: R2VCConfig) -> float:
    """Among equally confident candidates: the verifier's s_ver (unrounded), or without a verifier in the decision
    (the generator-only vote) the generator's own mean token log-prob, so that that ablation never reads the
    verifier."""
    if config.use_verifier:
        return signals.s_ver
    logprob = candidate.get("mean_logprob")
    return float("-inf") if logprob is None else float(logprob)


class R2VCPipeline:
    """Loads the generator engine, the verifier, the calibrator and any retrieval index once."""

    def __init__(self, config: R2VCConfig, settings: SignalSettings, engine_config: EngineConfig):
        self.config, self.settings = config, settings
        self.engine = None
        if config.use_generator:
            self.engine = make_engine(engine_config)
        self.device = engine_config.device
        self.verifier = NLIVerifier(config.nli_model, config.nli_batch_size, backend=config.nli_backend,
                                    device=self.device)
        self.calibrator = None
        if config.calibrator:
            self.calibrator = LogisticCalibrator.load(config.calibrator)
        thresholds(config, self.calibrator)  # a risk_control run without a chosen τ_cal fails before any work
        if self.calibrator is not None and self.engine is not None:  # before any work, not claim by claim
            try:
                self.calibrator.check_logprob_definition(logprob_definition(self.decoding()), self.engine.identity)
            except CalibratorFeatureError as error:  # a file that does not fit this run: one line, exit 2
                raise DataError(calibrator_file(config.calibrator), None, str(error)) from None
        self._searchers: dict[str, Any] = {}
        self.seconds: dict[str, float] = defaultdict(float)

    def model_ids(self) -> dict[str, str]:
        """Each model a record depends on, named by content: the run record keeps them, a resume must match."""
        ids = {"verifier": self.verifier.model_id}
        if self.engine is not None:
            ids["generator"] = self.engine.identity
        if self.calibrator is not None:
            path = calibrator_file(self.config.calibrator)
            ids["calibrator"] = f"{path}#{sha256_file(path)[:16]}"
        return ids

    def decoding(self) -> dict[str, Any] | None:
        """How the generator decodes (``Engine.decoding`` for this recipe's constraint): for the run record."""
        if self.engine is None:
            return None
        return self.engine.decoding(["json_schema"] if self.config.constrained else [])

    # --- evidence ---------------------------------------------------------------------------------------

    def index_folder(self, key: str) -> Path:
        """The index of ``key``: an index folder, or a prepared corpus's, built under index_root the first time."""
        folder = index_location(key, self.config.index_root)
        if not (folder / "index_meta.json").exists():
            logger.info("building the retrieval index of %s in %s", key, folder)
            build_index(prepared_path(self.config.prepared_dir, key), folder, CORPUS_INDEX, device=self.device)
        return folder

    def _searcher(self, key: str) -> Any:
        """A searcher over ``key`` (:meth:`index_folder`), loaded once."""
        if key not in self._searchers:
            index = load_index(self.index_folder(key), device=self.device)
            settings = SearchSettings(mode="alpha", alpha=self.config.alpha, top_k=self.config.top_k,
                                      candidates=self.config.retrieval_candidates)
            self._searchers[key] = (Searcher(index, settings), index.texts())
        return self._searchers[key]

    def _retrieve(self, items: Sequence[Item]) -> None:
        by_source: dict[str, list[Item]] = defaultdict(list)
        for item in items:
            if item.get("retrieve_from"):
                by_source[item["retrieve_from"]].append(item)
        for key, group in by_source.items():
            searcher, texts = self._searcher(key)
            for item, hits in zip(group, searcher.search([i["claim"] for i in group]), strict=True):
                item["passages"] = [{"text": texts[doc_id], "doc_id": doc_id, "score": round(float(score), 6)}
                                    for doc_id, score in hits]

    # --- one batch --------------------------------------------------------------------------------------

    def __call__(self, items: Sequence[Item]) -> list[dict[str, Any] | Exception]:
        """One output record per item, or the exception of an item whose decision failed (the batch runner
        writes it as that item's error record; the rest of the batch keeps its generation)."""
        items = [dict(item) for item in items]
        t0 = time.perf_counter()
        self._retrieve(items)
        if self.config.inject:  # the prompt-injection probe: the same sentence at the end of every passage
            for item in items:
                item["passages"] = [{**p, "text": f"{p['text']} {self.config.inject}"} for p in item["passages"]]
        t1 = time.perf_counter()
        results: list[GenerationResult | None] = [None] * len(items)
        if self.engine is not None:
            asked = [k for k, item in enumerate(items) if item["passages"]]
            c = self.config
            requests = [GenerationRequest.chat(
                prompt_messages(items[k]["claim"], [p["text"] for p in items[k]["passages"]]),
                n=c.n_candidates, temperature=c.temperature, top_p=c.top_p, seed=c.seed,
                **answer_constraint(len(items[k]["passages"]), c.rationale_max_chars, c.constrained, c.max_new_tokens,
                                    self.engine)) for k in asked]
            for k, result in zip(asked, self.engine.generate(requests) if requests else [], strict=True):
                results[k] = result
        t2 = time.perf_counter()
        titles = self.verifier.evidence_titles
        premises = [f"{p['title']}: {p['text']}" if titles and p.get("title") else p["text"]
                    for item in items for p in item["passages"]]
        hypotheses = [item["claim"] for item in items for _ in item["passages"]]
        probabilities = self.verifier.predict(premises, hypotheses)
        t3 = time.perf_counter()
        engine = self.engine.identity if self.engine is not None else "(none: NLI-only)"
        records: list[dict[str, Any] | Exception] = []
        start = 0
        kinds = ["json_schema"] if self.config.constrained else []
        for item, result in zip(items, results, strict=True):
            nli = probabilities[start : start + len(item["passages"])].reshape(-1, 3)
            start += len(item["passages"])
            failed = unavailable_error([result])
            if failed is not None:  # no answer was made: an error record, run again with --retry_errors
                records.append(failed)
                continue
            try:
                record = decide(item, nli, result, self.config, self.settings, self.calibrator, engine)
            except CalibratorFeatureError as error:  # this claim only: re-running the batch would not change it
                records.append(error)
                continue
            # what this claim's candidates were made under (None: no generator call)
            record["decoding"] = record_decoding(self.engine, kinds, [result]) if result is not None else None
            records.append(record)
        t4 = time.perf_counter()
        for stage, seconds in (("retrieval", t1 - t0), ("generation", t2 - t1), ("verifier", t3 - t2),
                               ("decision", t4 - t3)):
            self.seconds[stage] += seconds
        return records

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()


class R2VC(Pipeline):
    """The contract (``contract.py``) of ``veracity infer r2vc``: prepared sources or a claims file in, one claim
    record per item out, scored by ``veracity eval r2vc`` (plus the risk-control certificate's scope)."""

    name = "r2vc"
    unit = "claims"
    config_types = (R2VCConfig, SignalSettings, EngineConfig)
    error_fields = ("gold", "source")  # eval r2vc counts a failed claim as a wrong answer
    report_flags = REPORT_FLAGS
    report_item = staticmethod(report_item)

    def __init__(self, config: R2VCConfig, settings: SignalSettings, engine_config: EngineConfig):
        super().__init__(config, settings, engine_config)
        self.settings, self.engine_config = settings, engine_config
        self.models: R2VCPipeline | None = None
        self.scope: dict[str, Any] | None = None

    @property
    def batch_size(self) -> int:
        return self.config.claims_per_call

    def items(self) -> list[Item]:
        config = self.config
        return user_items(config.claims, config.index_dir) if config.claims else prepared_items(config)

    def row_item(self, row: Item, source: str, line: int) -> Item:
        return user_item(row, source, line, self.config.index_dir)

    def check(self) -> None:
        self.scope = risk_control_scope(self.config, load_calibrator(self.config))

    def record_extras(self) -> list[dict[str, Any]]:
        # the certificate's scope is part of the record: what the guarantee was computed on
        return [{"risk_control_guarantee": self.scope}] if self.scope else []

    def load(self, run_dir: Path) -> None:
        self.models = R2VCPipeline(self.config, self.settings, self.engine_config)  # checks models and thresholds
        self.seconds = self.models.seconds

    def model_ids(self) -> dict[str, str]:
        # before load(), the verifier and the retrieval encoder are named from the options (a resume under another
        # one is refused before any model loads); the generator is named by its engine, once built
        ids = self.models.model_ids() if self.models else {
            "verifier": verifier_id(self.config.nli_model, self.config.nli_backend, self.engine_config.device)}
        return {**ids, **retrieval_embedders(self.config)}

    def prepare(self, run_dir: Path) -> dict[str, Any]:
        """The indexes of the prepared corpora the configured sources retrieve from, built here, once, before any
        batch: with ``--executor ray`` each actor would otherwise build the same folder at the same time, each over
        the others' files. (From the config, not the items: the Python API brings its own rows.)"""
        config = self.config
        if not config.claims and not config.index_dir:
            for source in config.sources:
                if source in RETRIEVAL_CORPORA:
                    self.models.index_folder(RETRIEVAL_CORPORA[source])
        return {}

    def decoding(self) -> dict[str, Any] | None:
        return self.models.decoding() if self.models else None

    def __call__(self, items: Sequence[Item]) -> list[dict[str, Any] | Exception]:
        assert self.models is not None, "load() first"
        return self.models(items)

    def close(self) -> None:
        if self.models is not None:
            self.models.close()

    def stats(self) -> dict[str, Any]:
        return {"verifier": self.models.verifier.stats.to_dict()} if self.models else {}

    def score(self, records: Sequence[dict[str, Any]], run_dir: Path) -> dict[str, Any]:
        metrics = evaluate(["--predictions", str(run_dir / "records.jsonl"), "--output_dir", str(run_dir)])
        return record_scope(run_dir, metrics, self.scope) if self.scope else metrics

