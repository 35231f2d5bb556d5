"""R2VC decisions that must not depend on what they should not (issue 24): a missing log-probability is never a
number, label_agreement means the same in every recipe, and τ_ver compares unrounded scores."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from veracity.infer.pipelines.r2vc.config import R2VCConfig
from veracity.infer.pipelines.r2vc.pipeline import MissingLogprobError, R2VCPipeline, decide
from veracity.infer.pipelines.r2vc.prompt import format_answer
from veracity.infer.pipelines.r2vc.signals import SignalSettings, candidate_features, candidate_signals
from veracity.models.calibrator import CalibratorFeatureError, LogisticCalibrator
from veracity.models.engine import Candidate, Engine, GenerationRequest, GenerationResult

ITEM = {"id": "x", "claim": "The bridge is 120 metres long", "gold": "SUPPORTS", "source": "t",
        "passages": [{"text": "The bridge is 120 metres long."}, {"text": "It opened in 1990."}]}
NLI = np.array([[0.9, 0.05, 0.05], [0.2, 0.7, 0.1]])  # passage 1 entails the claim: y_NLI True (SUPPORTS)
ENGINE = "openai:some-served-model"
WITH_LOGPROB = LogisticCalibrator(["mean_logprob", "s_ver", "label_agreement", "from_nli"], [1.0, 2.0, 1.0, -0.5],
                                  -1.0)
WITHOUT_LOGPROB = LogisticCalibrator(["s_ver", "label_agreement", "from_nli"], [2.0, 1.0, -0.5], -1.0)


def _answer(label: str, logprobs: list[float] | None) -> Candidate:
    return Candidate(format_answer(label, "Passage 1 says so.", [1]), "stop", token_logprobs=logprobs)


# --- 1. a missing log-probability --------------------------------------------------------------------------

@pytest.mark.parametrize("logprobs", [None, [], [float("-inf"), -0.1], [float("nan")]],
                         ids=["none", "empty", "minus-inf", "nan"])
def test_a_calibrator_fit_on_logprobs_refuses_a_candidate_without_one(logprobs: list[float] | None) -> None:
    result = GenerationResult([_answer("SUPPORTS", [-0.2, -0.4]), _answer("REFUTES", logprobs)])
    config = R2VCConfig(calibrator="c.json", nli_candidate=True)
    with pytest.raises(MissingLogprobError, match=f"candidate 1 from engine {ENGINE}.*'mean_logprob'"):
        decide(ITEM, NLI, result, config, SignalSettings(), WITH_LOGPROB, engine=ENGINE)
    # the record says "none" (JSON null), never 0.0 — the best log-probability there is
    record = decide(ITEM, NLI, result, config, SignalSettings(), WITHOUT_LOGPROB, engine=ENGINE)
    missing = record["candidates"][1]
    assert missing["mean_logprob"] is None and missing["features"]["mean_logprob"] is None
    assert record["candidates"][0]["features"]["mean_logprob"] == pytest.approx(-0.3)
    assert record["outcome"] in ("answered", "abstained") and json.dumps(record, allow_nan=False)


def test_the_nli_candidate_and_calibrators_without_the_feature_still_score() -> None:
    result = GenerationResult([_answer("SUPPORTS", [-0.2, -0.4])])
    config = R2VCConfig(calibrator="c.json", nli_candidate=True, abstention="none")
    record = decide(ITEM, NLI, result, config, SignalSettings(), WITH_LOGPROB, engine=ENGINE)
    nli = record["candidates"][-1]
    assert nli["from"] == "nli" and nli["features"]["from_nli"] == 1.0  # its constant is offset by from_nli
    assert all(0 < c["confidence"] < 1 for c in record["candidates"])
    no_logprobs = GenerationResult([_answer("SUPPORTS", None)])
    assert decide(ITEM, NLI, no_logprobs, config, SignalSettings(), WITHOUT_LOGPROB)["outcome"] == "answered"
    assert decide(ITEM, NLI, no_logprobs, config, SignalSettings(), None)["outcome"] == "answered"


def test_the_calibrator_refuses_non_finite_features() -> None:
    with pytest.raises(CalibratorFeatureError, match="not finite"):
        WITHOUT_LOGPROB.predict_proba([{"s_ver": float("nan"), "label_agreement": 1.0, "from_nli": 0.0}])
    with pytest.raises(CalibratorFeatureError, match="finite"):
        WITHOUT_LOGPROB.predict_proba(np.array([[np.inf, 1.0, 0.0]]))


class _NoLogprobEngine(Engine):
    """An OpenAI-compatible server that ignores ``logprobs``: answers, but no log-probabilities."""

    kind = "openai"

    @property
    def model_id(self) -> str:
        return "some-served-model"

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        return [GenerationResult([_answer("SUPPORTS", None if "bridge" in r.messages[-1]["content"] else [-0.1])])
                for r in requests]


class _FixedVerifier:
    evidence_titles = False

    def predict(self, premises: Sequence[str], hypotheses: Sequence[str]) -> np.ndarray:
        return np.tile(NLI[0], (len(premises), 1))


def test_the_pipeline_turns_the_refusal_into_an_error_record_naming_the_engine(tmp_path: Path) -> None:
    from veracity.infer.batch import latest_records, run_batch

    pipeline = R2VCPipeline.__new__(R2VCPipeline)  # the real batch step around stand-in models
    pipeline.config, pipeline.settings = R2VCConfig(calibrator="c.json", nli_candidate=True), SignalSettings()
    pipeline.engine, pipeline.verifier, pipeline.calibrator = _NoLogprobEngine(), _FixedVerifier(), WITH_LOGPROB
    pipeline._searchers, pipeline.seconds = {}, {"retrieval": 0.0, "generation": 0.0, "verifier": 0.0,
                                                  "decision": 0.0}
    items: list[dict[str, Any]] = [ITEM, {"id": "y", "claim": "Cats purr", "passages": [{"text": "Cats purr."}]}]
    summary = run_batch(items, pipeline, tmp_path / "records.jsonl", batch_size=2, progress=False)
    assert (summary.ok, summary.errors) == (1, 1)
    by_id = {r["id"]: r for r in latest_records(tmp_path / "records.jsonl")}
    assert by_id["x"]["status"] == "error" and "MissingLogprobError" in by_id["x"]["error"]
    assert "openai:some-served-model" in by_id["x"]["error"]
    assert by_id["y"]["status"] == "ok"


# --- 2. label_agreement in every recipe --------------------------------------------------------------------

def test_label_agreement_counts_every_candidate_in_the_pool_the_nli_one_included() -> None:
    result = GenerationResult([_answer("SUPPORTS", [-0.1]), _answer("REFUTES", [-0.1])])
    record = decide(ITEM, NLI, result, R2VCConfig(nli_candidate=True, calibrator=None), SignalSettings(), None)
    agreement = [c["features"]["label_agreement"] for c in record["candidates"]]
    assert agreement == pytest.approx([2 / 3, 1 / 3, 2 / 3])  # SUPPORTS, REFUTES, the NLI candidate (SUPPORTS)


def test_the_nli_only_candidate_gets_the_features_it_would_get_in_the_full_recipe() -> None:
    settings = SignalSettings()
    nli_only = decide(ITEM, NLI, None, R2VCConfig(use_generator=False, calibrator=None), settings, None)
    # The full recipe with the same pool: the generator's answers did not parse, or the request failed.
    unparsed = decide(ITEM, NLI, GenerationResult([Candidate("??", "stop", [-0.1])]),
                      R2VCConfig(nli_candidate=True, calibrator=None), settings, None)
    failed = decide(ITEM, NLI, GenerationResult(error="context_overflow"),
                    R2VCConfig(nli_candidate=True, calibrator=None), settings, None)
    features = nli_only["candidates"][-1]["features"]
    assert features["label_agreement"] == 1.0  # a pool of one agrees with itself
    assert features == unparsed["candidates"][-1]["features"] == failed["candidates"][-1]["features"]
    # and the pure function, as train calibrator's simulation uses it: the same pool gives the same row
    signals = candidate_signals(NLI, "SUPPORTS", [1], ITEM["claim"], [p["text"] for p in ITEM["passages"]], settings)
    assert candidate_features(signals, "SUPPORTS", ["SUPPORTS"], [1], "", None, from_nli=True) == features


# --- 6. τ_ver on unrounded scores --------------------------------------------------------------------------

def test_tau_ver_compares_the_unrounded_s_ver() -> None:
    # s_ver = s_ent exactly: every other weight 0
    settings = SignalSettings(w_ent=1.0, w_cov=0.0, w_excess_contr=0.0, w_cons=0.0, w_align=0.0, w_cit=0.0)
    nli = np.array([[0.5499996, 0.4, 0.0500004]])
    item = {**ITEM, "passages": ITEM["passages"][:1]}
    result = GenerationResult([_answer("SUPPORTS", [-0.1])])
    record = decide(item, nli, result, R2VCConfig(calibrator=None, tau_ver=0.55), settings, None)
    chosen = record["candidates"][record["chosen"]]
    assert chosen["signals"]["s_ver"] == 0.55  # the record rounds for display …
    assert record["abstained"] and record["prediction"] == "NOT ENOUGH INFO"  # … the decision does not
    assert record["abstain_reason"] == "s_ver 0.5499996 < tau_ver 0.55"
    at = decide(item, np.array([[0.55, 0.4, 0.05]]), result, R2VCConfig(calibrator=None, tau_ver=0.55), settings,
                None)
    assert not at["abstained"] and at["prediction"] == "SUPPORTS"  # the boundary answers
