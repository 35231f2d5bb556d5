"""Local generation with transformers: batched, left-padded, n candidates, log-probabilities from the logits.

Serves the embedded SmolLM2 and any merged checkpoint or base model + LoRA adapter (the same code at any scale).
A request's constraint (JSON schema, regex, choice) is enforced with xgrammar, samples are seeded per request, and
log-probabilities follow the engines' one definition (``models/decoding.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, LogitsProcessorList

from veracity.io import without_lone_surrogates
from veracity.models.decoding import GrammarCache, RowSampler, row_seed
from veracity.models.device import resolve_device
from veracity.models.engine import (
    Candidate,
    Engine,
    GenerationRequest,
    GenerationResult,
    SamplingParams,
    finite_or_none,
)
from veracity.models.loading import loading_deferred
from veracity.models.registry import ModelNotFoundError, model_fingerprint, resolve_model

logger = logging.getLogger(__name__)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Every generation_config field from which transformers builds a logits processor, at a value that builds none. A
# model's generation_config.json may set any of them (several chat models ship repetition_penalty); generate() would
# apply them before the grammar mask and RowSampler, so samples would come from penalised logits and the recorded
# log-probs (engine.LOGPROB_DEFINITION: the model itself at T = 1) would be normalised over them while the chosen
# token's logit is raw (a "log-prob" above 0). Our sampling is RowSampler's alone.
NO_PROCESSORS: dict[str, object] = {
    "temperature": None, "top_p": None, "top_k": None, "typical_p": None, "min_p": None, "top_h": None,
    "epsilon_cutoff": None, "eta_cutoff": None, "repetition_penalty": None, "encoder_repetition_penalty": None,
    "no_repeat_ngram_size": None, "encoder_no_repeat_ngram_size": None, "bad_words_ids": None, "sequence_bias": None,
    "min_length": None, "min_new_tokens": None, "forced_bos_token_id": None, "forced_eos_token_id": None,
    "suppress_tokens": None, "begin_suppress_tokens": None, "exponential_decay_length_penalty": None,
    "renormalize_logits": False, "remove_invalid_values": False, "guidance_scale": None, "watermarking_config": None,
    "num_beams": 1, "diversity_penalty": None,
}


class TransformersEngine(Engine):
    kind = "transformers"

    def __init__(self, model: str = "embedded", adapter: str | None = None, batch_size: int = 8,
                 dtype: str = "auto", device: str = "auto", max_context: int | None = None):
        """Loads the model, unless built under :func:`~veracity.models.loading.deferred_loading` (a Ray driver
        names the model its actors load: folder, adapter and dtype, by content): then on first use."""
        device = resolve_device(device)
        self.folder = resolve_model("chat_lm", model)
        self.tokenizer = AutoTokenizer.from_pretrained(self.folder)
        self.tokenizer.padding_side = "left"  # batched generation continues every prompt at the same position
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.dtype = DTYPES.get(dtype, torch.float32 if device == "cpu" else torch.bfloat16)
        # The cache key: weights by content (two adapters alike in config and shapes still differ), plus the
        # dtype the model runs in (bfloat16 and float32 decode differently).
        self._model_id = f"{self.folder}#{model_fingerprint(self.folder)}"
        self.adapter: Path | None = None
        if adapter:
            self.adapter = Path(adapter).expanduser().resolve()
            if not self.adapter.is_dir():
                raise ModelNotFoundError(f"adapter folder {adapter!r} does not exist")
            self._model_id += f"+adapter:{self.adapter}#{model_fingerprint(self.adapter)}"
        self._model_id += f"@{str(self.dtype).removeprefix('torch.')}"
        self.device, self.batch_size = device, batch_size
        config = AutoConfig.from_pretrained(self.folder)
        self.context = max_context or getattr(config, "max_position_embeddings", None)
        self._model: torch.nn.Module | None = None
        self._eos_ids: set[int] | None = None
        self._grammars: GrammarCache | None = None  # built on the first constrained request (compiles the vocabulary)
        if not loading_deferred():
            self.load()  # now: a model that cannot load fails here

    @property
    def model(self) -> torch.nn.Module:
        """The weights (with the adapter), loaded when first needed; :meth:`close` lets go of them."""
        return self.load()

    def load(self) -> torch.nn.Module:
        """Load the weights unless loaded; the model."""
        if self._model is None:
            model = AutoModelForCausalLM.from_pretrained(self.folder, dtype=self.dtype).to(self.device)
            if self.adapter is not None:
                from peft import PeftModel  # lazy: only an adapter needs peft

                model = PeftModel.from_pretrained(model, str(self.adapter))
            self._model = model.eval()
        return self._model

    @property
    def eos_ids(self) -> set[int]:
        """The token ids that end a generation: the model's generation config and the tokenizer's EOS."""
        if self._eos_ids is None:
            eos = self.model.generation_config.eos_token_id
            self._eos_ids = (set(eos if isinstance(eos, list) else [eos]) | {self.tokenizer.eos_token_id}) - {None}
        return self._eos_ids

    @eos_ids.setter
    def eos_ids(self, ids: set[int]) -> None:
        self._eos_ids = set(ids)

    def close(self) -> None:
        """Let go of the weights (a Ray driver's pipeline before its actors run); the next generation loads them
        again."""
        self._model = None

    @property
    def grammars(self) -> GrammarCache:
        if self._grammars is None:
            vocab = self.model.config.get_text_config().vocab_size
            self._grammars = GrammarCache(self.tokenizer, vocab, self.eos_ids)
        return self._grammars

    @property
    def model_id(self) -> str:
        return self._model_id

    def encode(self, request: GenerationRequest) -> list[int]:
        # the tokenizer refuses a lone surrogate (a passage can hold one): the model reads U+FFFD
        if request.prompt is not None:
            return self.tokenizer(without_lone_surrogates(request.prompt))["input_ids"]
        text = self.tokenizer.apply_chat_template(list(request.messages), add_generation_prompt=True, tokenize=False)
        return self.tokenizer(without_lone_surrogates(text), add_special_tokens=False)["input_ids"]

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        results: list[GenerationResult | None] = [None] * len(requests)
        groups: dict[SamplingParams, list[tuple[int, list[int]]]] = {}
        for i, request in enumerate(requests):
            ids = self.encode(request)
            budget = len(ids) + request.params.max_new_tokens
            if self.context and budget > self.context:
                results[i] = GenerationResult(prompt_tokens=len(ids), error=(
                    f"context_overflow: prompt of {len(ids)} tokens + max_new_tokens "
                    f"{request.params.max_new_tokens} exceeds the model context of {self.context}"))
            elif not ids:
                results[i] = GenerationResult(prompt_tokens=0, error="empty_prompt")
            else:
                groups.setdefault(request.params, []).append((i, ids))
        for params, items in groups.items():
            for start in range(0, len(items), self.batch_size):
                chunk = items[start : start + self.batch_size]
                batch_results = self._generate_batch([ids for _, ids in chunk], params)
                for (i, _), result in zip(chunk, batch_results, strict=True):
                    results[i] = result
        assert all(r is not None for r in results), "every request gets a result"
        return results  # type: ignore[return-value]

    @torch.no_grad()
    def _generate_batch(self, prompts: list[list[int]], params: SamplingParams) -> list[GenerationResult]:
        sampling = params.temperature > 0
        # Greedy decoding gives one answer however often it is asked: decode once, repeat it n times.
        copies = params.n if sampling else 1
        rows = [prompt for prompt in prompts for _ in range(copies)]  # generate itself runs greedily: one row each
        batch = self.tokenizer.pad({"input_ids": rows}, return_tensors="pt", padding=True).to(self.device)
        # Rows are prompt-major (prompt p's copy c is row p * copies + c); each samples from its own generator, so a
        # request's candidates do not depend on its batch. transformers decodes greedily over what RowSampler made.
        seeds = None
        if sampling:
            base = params.seed if params.seed is not None else int(torch.randint(0, 2**62, ()).item())
            seeds = [row_seed(base, prompt, c) for prompt in prompts for c in range(copies)]
        sampler = RowSampler(seeds, params.temperature, params.top_p)
        processors = [self.grammars.processor(*params.constraint)] if params.constraint else []
        kwargs: dict[str, object] = dict(
            max_new_tokens=params.max_new_tokens, do_sample=False, **NO_PROCESSORS,
            logits_processor=LogitsProcessorList([*processors, sampler]),
            output_logits=True, return_dict_in_generate=True, pad_token_id=self.tokenizer.pad_token_id,
        )
        if params.stop:
            kwargs.update(stop_strings=list(params.stop), tokenizer=self.tokenizer)
        out = self.model.generate(**batch, **kwargs)
        generated = out.sequences[:, batch["input_ids"].shape[1] :]
        # Only the generated token's log-probability, step by step (a full (rows, steps, vocab) log-softmax costs
        # GBs for 12 candidates).
        logprobs = sampler.masked_logprobs(out.logits, generated.cpu()) if params.logprobs else None
        results = []
        for p, prompt in enumerate(prompts):
            candidates = []
            for c in range(copies):
                row = p * copies + c
                candidates.append(self._candidate(generated[row], logprobs[row] if logprobs is not None else None,
                                                  params))
            results.append(GenerationResult(candidates * (params.n // copies), prompt_tokens=len(prompt),
                                            constrained=params.constraint is not None))
        return results

    def _candidate(self, tokens: torch.Tensor, logprobs: torch.Tensor | None, params: SamplingParams) -> Candidate:
        ids = tokens.tolist()
        pad = self.tokenizer.pad_token_id
        # A row ends at its EOS (scored: the model chose it) or, in a batch, where padding begins (not scored).
        end = next((k for k, t in enumerate(ids) if t in self.eos_ids or t == pad), None)
        kept = ids[:end] if end is not None else ids
        scored = ids[: end + 1] if end is not None and ids[end] in self.eos_ids else kept
        text = self.tokenizer.decode(kept, skip_special_tokens=True)
        # Shorter than the budget without an EOS means a stop string ended it. (transformers matches stop
        # strings against prompt + output, so one that starts inside the prompt also ends generation.)
        stopped = end is not None or len(ids) < params.max_new_tokens
        hits = [text.find(s) for s in params.stop if s and text.find(s) >= 0]
        if hits:  # OpenAI semantics: the stop string ends the text and is not part of it
            text, stopped = text[: min(hits)], True
        token_logprobs = None
        if logprobs is not None:
            token_logprobs = finite_or_none(logprobs[: len(scored)].tolist())
        return Candidate(text=text, finish_reason="stop" if stopped else "length", token_logprobs=token_logprobs,
                         num_tokens=len(scored))
