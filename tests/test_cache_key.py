"""Response cache keys: content fingerprints of models and adapters, and every sampling parameter (issue #16)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from veracity.models import fingerprint
from veracity.models.cache import CachedEngine, ResponseCache, request_key
from veracity.models.engine import GenerationRequest, SamplingParams
from veracity.models.hf_engine import TransformersEngine
from veracity.models.registry import model_fingerprint

HELLO = [{"role": "user", "content": "hello"}]


def _adapter(base: Path, folder: Path, seed: int) -> Path:
    """A LoRA adapter with random, non-zero weights: same config and shapes for every seed."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def adapters(tiny_lm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """An "SFT" and a "DPO" adapter that the old size-based fingerprint could not tell apart."""
    root = tmp_path_factory.mktemp("adapters")
    return _adapter(tiny_lm_dir, root / "sft", seed=1), _adapter(tiny_lm_dir, root / "dpo", seed=2)


@pytest.fixture()
def counted_hashing(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every weight file the fingerprint hashes by content, in order."""
    calls: list[Path] = []
    real = fingerprint.sha256_file

    def counting(path: Path) -> str:
        calls.append(Path(path))
        return real(path)

    monkeypatch.setattr(fingerprint, "sha256_file", counting)
    return calls


def _copy(folder: Path, target: Path) -> Path:
    target.mkdir(parents=True)
    for path in folder.iterdir():
        if not path.name.startswith("."):
            (target / path.name).write_bytes(path.read_bytes())
    return target


def test_adapters_alike_in_config_and_size_get_different_fingerprints(adapters: tuple[Path, Path]) -> None:
    sft, dpo = adapters
    assert (sft / "adapter_config.json").read_bytes() == (dpo / "adapter_config.json").read_bytes()
    weights = "adapter_model.safetensors"
    assert (sft / weights).stat().st_size == (dpo / weights).stat().st_size
    assert (sft / weights).read_bytes() != (dpo / weights).read_bytes()
    assert model_fingerprint(sft) != model_fingerprint(dpo)
    assert model_fingerprint(sft) == model_fingerprint(sft)


def test_cached_engines_over_two_adapters_never_share_an_entry(tiny_lm_dir: Path, adapters: tuple[Path, Path],
                                                               tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "responses.sqlite")
    engines = [TransformersEngine(str(tiny_lm_dir), adapter=str(a)) for a in adapters]
    base = TransformersEngine(str(tiny_lm_dir))
    assert len({e.model_id for e in [*engines, base]}) == 3
    request = [GenerationRequest.chat(HELLO, max_new_tokens=4)]
    answers = []
    for engine in [*engines, base]:
        result = CachedEngine(engine, cache).generate(request)[0]
        assert result.ok and not result.cached, f"{engine.model_id} replayed another model's answer"
        answers.append(result.candidates[0].token_logprobs)
    assert len(cache) == 3
    assert answers[0] != pytest.approx(answers[1]), "the adapters really compute different things"
    assert CachedEngine(engines[1], cache).generate(request)[0].cached, "the same model replays its own entry"


def test_engine_model_id_names_adapter_and_dtype(tiny_lm_dir: Path, adapters: tuple[Path, Path]) -> None:
    sft = adapters[0]
    adapted = TransformersEngine(str(tiny_lm_dir), adapter=str(sft))
    assert f"+adapter:{sft.resolve()}#{model_fingerprint(sft)}" in adapted.model_id
    assert adapted.model_id.endswith("@float32")
    assert TransformersEngine(str(tiny_lm_dir), dtype="bfloat16").model_id.endswith("@bfloat16")


def test_rewriting_weights_in_place_with_the_same_size_changes_the_fingerprint(
        adapters: tuple[Path, Path], tmp_path: Path) -> None:
    sft, dpo = adapters
    folder = _copy(sft, tmp_path / "retrained")
    before = model_fingerprint(folder)
    weights = folder / "adapter_model.safetensors"
    stamp = weights.stat().st_mtime_ns
    with open(weights, "r+b") as handle:  # in place: same inode, same size, new bytes
        handle.write((dpo / "adapter_model.safetensors").read_bytes())
    if weights.stat().st_mtime_ns == stamp:  # one tick of a coarse file clock; a real retrain takes far longer
        os.utime(weights, ns=(stamp + 1_000_000, stamp + 1_000_000))
    assert model_fingerprint(folder) != before
    assert model_fingerprint(folder) == model_fingerprint(dpo)


def test_second_fingerprint_reuses_the_stored_hash(adapters: tuple[Path, Path], tmp_path: Path,
                                                    counted_hashing: list[Path]) -> None:
    folder = _copy(adapters[0], tmp_path / "adapter")
    first = model_fingerprint(folder)
    assert [p.name for p in counted_hashing] == ["adapter_model.safetensors"]
    assert (folder / fingerprint.SIDECAR).exists()
    assert model_fingerprint(folder) == first
    assert len(counted_hashing) == 1, "an unchanged weight file is not hashed again"
    (folder / "adapter_config.json").write_text((folder / "adapter_config.json").read_text() + " ")
    assert model_fingerprint(folder) != first, "configs count by content too"
    assert len(counted_hashing) == 1, "only weights go through the stored hashes"


def test_read_only_folder_stores_hashes_in_the_cache(adapters: tuple[Path, Path], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     counted_hashing: list[Path]) -> None:
    monkeypatch.setenv("VERACITY_CACHE", str(tmp_path / "cache"))
    folder = _copy(adapters[0], tmp_path / "shared" / "adapter")
    folder.chmod(0o555)  # like ../shared/models: root could still write there, but must not
    try:
        first = model_fingerprint(folder)
        assert not (folder / fingerprint.SIDECAR).exists()
        assert len(list((tmp_path / "cache" / "fingerprints").glob("*.json"))) == 1
        assert model_fingerprint(folder) == first and len(counted_hashing) == 1
    finally:
        folder.chmod(0o755)


def test_checkpoint_folders_and_hidden_files_do_not_count(adapters: tuple[Path, Path], tmp_path: Path) -> None:
    folder = _copy(adapters[0], tmp_path / "run")
    first = model_fingerprint(folder)
    _copy(adapters[1], folder / "checkpoint-10")  # the Trainer's resume state: from_pretrained never loads it
    (folder / ".adapter_model.safetensors.tmp").write_bytes(b"half-written")
    assert model_fingerprint(folder) == first
    with pytest.raises(FileNotFoundError, match="not a local folder"):
        model_fingerprint(tmp_path / "org/hub-id")


class _Stub:
    kind, model_id = "stub", "stub-model#0"


def test_every_sampling_parameter_is_in_the_cache_key() -> None:
    changed = {"n": 2, "temperature": 0.7, "top_p": 0.9, "max_new_tokens": 7, "seed": 1, "stop": ("\n",),
               "logprobs": False, "json_schema": '{"type": "object"}', "regex": "[0-9]", "choice": ("yes", "no")}
    assert set(changed) == {f.name for f in dataclasses.fields(SamplingParams)}, "a new field needs a check here"
    base = request_key(_Stub(), GenerationRequest(messages=tuple(HELLO)))  # type: ignore[arg-type]
    for name, value in changed.items():
        request = GenerationRequest(messages=tuple(HELLO), params=SamplingParams(**{name: value}))
        assert request_key(_Stub(), request) != base, name  # type: ignore[arg-type]
    assert request_key(_Stub(), GenerationRequest(prompt="hello")) != base  # type: ignore[arg-type]
