"""NLIVerifier: label order from id2label, input settings from config.json, windows instead of truncation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tiny_models import build_tiny_nli

from veracity.models.nli import aggregate_windows, pack_windows, split_at_end_punctuation


@pytest.fixture(scope="module")
def verifier_dirs(tmp_path_factory: pytest.TempPathFactory, tiny_encoder_dir: Path) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("nli_verifier")
    plain = build_tiny_nli(base / "plain", tiny_encoder_dir, {0: "entailment", 1: "neutral", 2: "contradiction"},
                           veracity_max_length=40, veracity_evidence_titles=True)
    # Row i of the permuted head is row permutation[i] of the plain one; its label names follow.
    permuted = build_tiny_nli(base / "permuted", tiny_encoder_dir,
                              {0: "CONTRADICTION", 1: "ENTAILMENT", 2: "NEUTRAL"}, permutation=[2, 0, 1],
                              veracity_max_length=40, veracity_evidence_titles=True)
    return {"plain": plain, "permuted": permuted}


def test_a_permuted_label_map_gives_the_same_probabilities(verifier_dirs: dict[str, Path]) -> None:
    from veracity.models.nli import NLIVerifier

    premises, hypotheses = ["A man plays guitar.", "The sky is green."], ["A person makes music.", "The sky is blue."]
    plain = NLIVerifier(str(verifier_dirs["plain"])).predict(premises, hypotheses)
    permuted = NLIVerifier(str(verifier_dirs["permuted"])).predict(premises, hypotheses)
    assert plain.shape == (2, 3)
    np.testing.assert_allclose(plain.sum(1), 1.0, atol=1e-6)
    np.testing.assert_allclose(permuted, plain, atol=1e-6)
    assert not np.allclose(plain[:, 0], plain[:, 2])  # a real difference between columns, so the check has teeth


def test_input_settings_come_from_config_json(verifier_dirs: dict[str, Path], tmp_path: Path,
                                              tiny_encoder_dir: Path) -> None:
    from veracity.models.nli import LEGACY_VERACITY_MAX_LENGTH, NLIVerifier

    verifier = NLIVerifier(str(verifier_dirs["plain"]))
    assert verifier.max_length == 40 and verifier.evidence_titles
    legacy = build_tiny_nli(tmp_path / "legacy", tiny_encoder_dir, {0: "entailment", 1: "neutral", 2: "contradiction"},
                            veracity_evidence_titles=False)  # trained before max_length was recorded
    assert NLIVerifier(str(legacy)).max_length == LEGACY_VERACITY_MAX_LENGTH
    hub_like = build_tiny_nli(tmp_path / "hub", tiny_encoder_dir, {0: "contradiction", 1: "entailment", 2: "neutral"})
    hub_verifier = NLIVerifier(str(hub_like))  # the model's own limit: tokenizer and position embeddings
    assert hub_verifier.max_length == min(hub_verifier.tokenizer.model_max_length, 128)
    bad = build_tiny_nli(tmp_path / "bad", tiny_encoder_dir, {0: "yes", 1: "no", 2: "maybe"})
    with pytest.raises(ValueError, match="id2label"):
        NLIVerifier(str(bad))


def test_a_long_premise_is_windowed_not_truncated(verifier_dirs: dict[str, Path]) -> None:
    from veracity.models.nli import NLIVerifier

    verifier = NLIVerifier(str(verifier_dirs["plain"]))
    sentences = [f"Sentence number {i} says the river is {i} miles long." for i in range(12)]
    premise, claim = " ".join(sentences), "The river is 11 miles long."
    windows = verifier.windows(premise, claim)
    assert len(windows) > 1 and verifier.stats.windowed == 1
    tok = verifier.tokenizer
    for window in windows:  # each window fits the model with the claim
        assert len(tok(window, claim)["input_ids"]) <= verifier.max_length
    covered = " ".join(windows)
    assert all(s in covered for s in sentences)  # nothing dropped: the last sentence (the answer) is in a window
    probs = verifier.predict([premise], [claim])
    expected = aggregate_windows(verifier.predict(windows, [claim] * len(windows)))
    np.testing.assert_allclose(probs[0], expected, atol=1e-6)


def test_a_premise_over_the_limit_is_cut_on_the_premise_side_only(verifier_dirs: dict[str, Path], tmp_path: Path,
                                                                   tiny_encoder_dir: Path) -> None:
    import torch

    from veracity.models.nli import NLIVerifier

    labels = {0: "entailment", 1: "neutral", 2: "contradiction"}
    trained = build_tiny_nli(tmp_path / "trained", tiny_encoder_dir, labels, veracity_max_length=40,
                             veracity_evidence_titles=False, veracity_truncation="only_first")  # as train nli writes
    verifier = NLIVerifier(str(trained))
    assert verifier.truncation == "only_first"
    tok = verifier.tokenizer
    claim = "The old stone bridge over the wide river near the town is one hundred and twenty metres long."
    premise = " ".join(f"Fact {i} about the town and its many old buildings." for i in range(8))
    claim_ids = tok(claim, add_special_tokens=False)["input_ids"]
    assert 12 < len(claim_ids) < 40 - 3 < len(tok(premise, add_special_tokens=False)["input_ids"])
    encoded = verifier.encode([(premise, claim)])
    ids, segments = encoded["input_ids"][0].tolist(), encoded["token_type_ids"][0].tolist()
    assert len(ids) == verifier.max_length
    second = [t for t, s in zip(ids, segments, strict=True) if s == 1]
    assert second == [*claim_ids, tok.sep_token_id]  # the claim whole, the premise cut to what is left
    # the verifier scores exactly these inputs (longest-first would cut the claim as well: another input)
    with torch.inference_mode():
        direct = verifier.model(**encoded).logits.softmax(-1).numpy()[:, verifier.columns]
    np.testing.assert_allclose(verifier._forward([(premise, claim)]), direct, atol=1e-6)
    longest = verifier.encode([(premise, claim)], "longest_first")["input_ids"][0].tolist()
    assert longest != ids
    # a claim that fills the model alone: only_first cannot make room, so that pair is cut longest-first
    long_claim = " ".join([claim] * 3)
    assert verifier.truncation_for(premise, long_claim) == "longest_first"
    assert verifier._forward([(premise, long_claim), (premise, claim)]).shape == (2, 3)
    # what the model's config says is used: longest_first where it was trained that way; hub models keep theirs
    other = build_tiny_nli(tmp_path / "other", tiny_encoder_dir, labels, veracity_max_length=40,
                           veracity_evidence_titles=False, veracity_truncation="longest_first")
    assert NLIVerifier(str(other)).encode([(premise, claim)])["input_ids"][0].tolist() == longest
    assert NLIVerifier(str(verifier_dirs["plain"])).truncation == "only_first"  # ours, before the key existed
    hub_like = build_tiny_nli(tmp_path / "hub", tiny_encoder_dir, labels)
    assert NLIVerifier(str(hub_like)).truncation == "longest_first"
    bad = build_tiny_nli(tmp_path / "bad", tiny_encoder_dir, labels, veracity_truncation="sideways")
    with pytest.raises(ValueError, match="veracity_truncation"):
        NLIVerifier(str(bad))


def test_each_distinct_pair_is_scored_once(verifier_dirs: dict[str, Path]) -> None:
    from veracity.models.nli import NLIVerifier

    verifier = NLIVerifier(str(verifier_dirs["plain"]))
    probs = verifier.predict(["a.", "b.", "a."], ["c", "c", "c"])
    assert verifier.stats.pairs == 3 and verifier.stats.distinct == 2
    np.testing.assert_allclose(probs[0], probs[2])


def test_pack_windows_overlap_and_budget() -> None:
    assert pack_windows(["a", "b", "c", "d"], [4, 4, 4, 4], budget=8) == [[0, 1], [1, 2], [2, 3]]
    assert pack_windows(["a", "b"], [3, 3], budget=10) == [[0, 1]]
    assert pack_windows(["long", "x"], [20, 2], budget=8) == [[0], [1]]  # an oversized sentence stands alone
    assert split_at_end_punctuation("One. Two? Three! four") == ["One.", "Two?", "Three!", "four"]


def test_aggregate_windows_takes_max_entailment_and_contradiction() -> None:
    rows = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]])
    out = aggregate_windows(rows)
    np.testing.assert_allclose(out, np.array([0.7, 0.2, 0.6]) / 1.5)
    assert json.dumps(out.tolist())  # plain floats


def test_deferred_loading_names_the_verifier_encoder_and_cross_encoder_and_loads_them_on_first_use(
        verifier_dirs: dict[str, Path], tiny_encoder_dir: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``deferred_loading`` (a Ray driver) the NLI verifier, the dense encoder and the cross-encoder are
    named — the ids of loaded ones — without reading weights; they load on first use and score as loaded ones do."""
    from pipeline_inputs import build_tiny_cross_encoder
    from transformers import PreTrainedModel

    from veracity.infer.retrieval.dense import DenseEncoder, EncoderSpec
    from veracity.infer.retrieval.rerank import CrossEncoderReranker
    from veracity.models.loading import deferred_loading
    from veracity.models.nli import NLIVerifier

    loads: list[str] = []
    from_pretrained = PreTrainedModel.from_pretrained.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(
        lambda cls, *a, **k: loads.append(cls.__name__) or from_pretrained(cls, *a, **k)))
    cross_folder = build_tiny_cross_encoder(tmp_path / "ce", tiny_encoder_dir)
    loads.clear()
    for backend in ("torch", "onnx"):
        with deferred_loading():
            verifier = NLIVerifier(str(verifier_dirs["plain"]), backend=backend)
            encoder = DenseEncoder(EncoderSpec(model=str(tiny_encoder_dir), backend=backend))
            cross = CrossEncoderReranker(str(cross_folder))
        assert loads == [], "named, not loaded"
        loaded = NLIVerifier(str(verifier_dirs["plain"]), backend=backend)
        assert verifier.model_id == loaded.model_id and verifier.max_length == loaded.max_length
        np.testing.assert_allclose(verifier.predict(["A man plays guitar."], ["A person makes music."]),
                                   loaded.predict(["A man plays guitar."], ["A person makes music."]), atol=1e-6)
        np.testing.assert_allclose(encoder.encode_queries(["a river"]),
                                   DenseEncoder(encoder.spec).encode_queries(["a river"]), atol=1e-6)
        texts = ["a river", "a hill"]
        np.testing.assert_allclose(cross.score("q", texts), CrossEncoderReranker(str(cross_folder)).score("q", texts),
                                   atol=1e-6)
        loads.clear()
