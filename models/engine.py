"""One interface for chat generation, behind which every LLM runs (docs/engines.md#engines).

A request is messages (or a raw prompt) plus sampling parameters; a result is n candidates, each with its text,
finish reason and per-token log-probabilities — or ``None`` where the backend cannot give them (never zeros).
Backends: ``transformers`` (local, the embedded default), ``openai`` (any OpenAI-compatible server), ``vllm``
(offline GPU batches). ``models/engine_factory.py``'s ``make_engine`` builds one from an :class:`EngineConfig` (a
module of its own: the backends import this one, and the factory imports them).
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from veracity.models.device import DEVICE_HELP, check_device

Message = dict[str, str]


@dataclass(frozen=True)
class SamplingParams:
    """What to sample. ``temperature == 0`` is greedy; ``seed`` makes sampling repeatable."""

    n: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    seed: int | None = 0
    stop: tuple[str, ...] = ()
    logprobs: bool = True
    # What the answer must match, at most one of three: a JSON schema (as JSON text), a regular expression, or a
    # choice among strings. Every engine constrains decoding to it where its backend can (transformers through
    # xgrammar, vLLM structured outputs, servers known to enforce the field they are sent); ``Engine.constrained``
    # says whether it did. The caller's strict parser stays the final check.
    json_schema: str | None = None
    regex: str | None = None
    choice: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        object.__setattr__(self, "stop", tuple(self.stop))
        if self.choice is not None:
            object.__setattr__(self, "choice", tuple(self.choice))
            if not self.choice or not all(isinstance(c, str) and c for c in self.choice):
                raise ValueError("choice must be a non-empty list of non-empty strings")
        if sum(x is not None for x in (self.json_schema, self.regex, self.choice)) > 1:
            raise ValueError("give at most one of json_schema, regex and choice")
        if self.regex is not None and not self.regex:
            raise ValueError("regex must not be empty")
        if self.json_schema is not None:
            try:
                schema = json.loads(self.json_schema)
            except json.JSONDecodeError as error:
                raise ValueError(f"json_schema is not valid JSON: {error}") from None
            if not isinstance(schema, dict):
                raise ValueError("json_schema must be a JSON object (a JSON schema)")

    @property
    def constraint(self) -> tuple[str, str] | None:
        """``(kind, spec)`` of the constraint — kind json_schema, regex or choice (spec: a JSON list) — or None."""
        if self.json_schema is not None:
            return "json_schema", self.json_schema
        if self.regex is not None:
            return "regex", self.regex
        if self.choice is not None:
            return "choice", json.dumps(list(self.choice))
        return None

    def to_dict(self) -> dict[str, Any]:
        data = {**asdict(self), "stop": list(self.stop)}
        for key in ("json_schema", "regex", "choice"):  # absent, not null: cache keys of unconstrained requests
            if data[key] is None:  # stay as they were
                del data[key]
            elif key == "choice":
                data[key] = list(data[key])
        return data


@dataclass
class SamplingOptions:
    """A job's sampling options (``--n --temperature --top_p --max_new_tokens --seed --stop``): the parser-facing
    face of :class:`SamplingParams`, whose defaults and checks it uses."""

    n: int = field(default=SamplingParams.n, metadata={"help": "Answers sampled per prompt."})
    temperature: float = field(default=SamplingParams.temperature, metadata={
        "help": "Sampling temperature (0: greedy)."})
    top_p: float = field(default=SamplingParams.top_p, metadata={
        "help": "Nucleus sampling: the probability mass kept."})
    max_new_tokens: int = field(default=SamplingParams.max_new_tokens, metadata={"help": "New tokens per answer."})
    seed: int | None = field(default=SamplingParams.seed, metadata={"help": "Sampling seed (repeatable samples)."})
    stop: list[str] = field(default_factory=list, metadata={"help": "Strings that end an answer."})

    def __post_init__(self) -> None:
        self.params()  # the same checks, at parse time

    def params(self, **extra: Any) -> SamplingParams:
        """These options as :class:`SamplingParams` (``extra``: logprobs, json_schema, regex, choice)."""
        return SamplingParams(n=self.n, temperature=self.temperature, top_p=self.top_p,
                              max_new_tokens=self.max_new_tokens, seed=self.seed, stop=tuple(self.stop), **extra)


@dataclass(frozen=True)
class GenerationRequest:
    messages: tuple[Message, ...] = ()
    prompt: str | None = None  # a raw prompt instead of chat messages (no chat template applied)
    params: SamplingParams = field(default_factory=SamplingParams)

    def __post_init__(self) -> None:
        if bool(self.messages) == (self.prompt is not None):
            raise ValueError("give either messages or a prompt")
        object.__setattr__(self, "messages", tuple(dict(m) for m in self.messages))

    @classmethod
    def chat(cls, messages: Sequence[Message], **params: Any) -> GenerationRequest:
        return cls(messages=tuple(messages), params=SamplingParams(**params))

    def to_dict(self) -> dict[str, Any]:
        return {"messages": list(self.messages), "prompt": self.prompt, "params": self.params.to_dict()}


@dataclass
class Candidate:
    text: str
    finish_reason: str  # "stop" (EOS or a stop string), "length" (max_new_tokens)
    token_logprobs: list[float] | None = None  # None: the backend did not give log-probabilities
    num_tokens: int | None = None

    @property
    def mean_logprob(self) -> float | None:
        if not self.token_logprobs:
            return None
        return sum(self.token_logprobs) / len(self.token_logprobs)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# The start of a result's ``error`` when the engine itself failed — a server that could not be reached, timed out or
# answered 429/5xx through all its retries — rather than the request (a prompt too long, a request refused): such an
# item is an error record, retried on request, never a model's answer (``unavailable_error``).
UNAVAILABLE = "server_error"


class Answered:
    """What a result with an ``error`` (None: it answered) says of itself: a generation result, a judge's verdict."""

    error: str | None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def unavailable(self) -> bool:
        """The engine failed (:data:`UNAVAILABLE`), not the request: no answer was made at all."""
        return (self.error or "").startswith(UNAVAILABLE)


@dataclass
class GenerationResult(Answered):
    """Candidates for one request, or an ``error`` (e.g. ``context_overflow``) with no candidates.

    ``constrained``: whether this request's constraint was enforced while its answer was made (False for a request
    without one; None where the engine did not say). A cached result keeps what it was made under.
    """

    candidates: list[Candidate] = field(default_factory=list)
    prompt_tokens: int | None = None
    error: str | None = None
    cached: bool = False
    constrained: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"candidates": [c.to_dict() for c in self.candidates], "prompt_tokens": self.prompt_tokens,
                "error": self.error, "constrained": self.constrained}

    @classmethod
    def from_dict(cls, data: dict[str, Any], cached: bool = False) -> GenerationResult:
        return cls([Candidate(**c) for c in data["candidates"]], data.get("prompt_tokens"), data.get("error"), cached,
                   data.get("constrained"))


class EngineUnavailableError(RuntimeError):
    """An item whose answer the engine could not make (:data:`UNAVAILABLE`): the batch runner writes it as an error
    record, counted in the summary and run again with ``--retry_errors``."""


def unavailable_error(results: Sequence[Any]) -> EngineUnavailableError | None:
    """The error of an item whose answers come from ``results`` (each a :class:`GenerationResult`, or anything with
    its ``unavailable`` and ``error``: a judge's verdict) when the engine failed on any of them, else None."""
    failed = [r.error for r in results if r is not None and r.unavailable]
    if not failed:
        return None
    return EngineUnavailableError(f"the engine failed on {len(failed)} of {len(results)} request(s): {failed[0]}")


def record_decoding(engine: Engine, kinds: Sequence[str], results: Sequence[Any]) -> dict[str, Any]:
    """The decoding facts of one output record made from ``results`` (its requests constrained by ``kinds``; each a
    :class:`GenerationResult` or anything with its ``ok`` and ``constrained``, as a judge's verdict):
    :meth:`Engine.decoding` — ``constrained`` then only where every one of these answers was made under its
    constraint, as each result says (a replayed answer, what it was made under) — and the ``engine``."""
    facts = {**engine.decoding(kinds), "engine": engine.identity}
    told = [r.constrained for r in results if r is not None and r.ok]
    if told and all(t is not None for t in told):
        facts["constrained"] = bool(kinds) and all(told)
    return facts


# How every engine defines a token's log-probability (models/decoding.py says why): under the model at temperature 1,
# renormalised over the tokens a constraint allowed at that step (over the whole vocabulary when unconstrained).
LOGPROB_DEFINITION = "model_t1_renormalised_over_allowed"


def answer_budget(engine: Engine, kind: str | None, format_budget: int, max_new_tokens: int) -> int:
    """``max_new_tokens`` of a request whose answer format is ``kind`` (json_schema, regex, choice; None: no format
    asked): the one rule of the four pipelines and the judges. An answer the engine holds to its format ends by
    itself, so it gets ``format_budget`` (the longest answer the format admits: ``infer.structured``); any other
    answer — no format asked, or an engine that does not enforce this kind — gets the configured ``max_new_tokens``.
    Asked per request, so a server found not to enforce a kind mid-run gets the free budget from then on."""
    if kind is not None and engine.decoding([kind])["constrained"]:
        return format_budget
    return max_new_tokens


def choice_grammar(choices: Sequence[str]) -> str:
    """A grammar whose only sentences are ``choices``, in the EBNF both xgrammar and llama.cpp's GBNF read (JSON
    string literals are valid literals in both)."""
    return "root ::= " + " | ".join(json.dumps(c) for c in choices)


class EngineError(RuntimeError):
    """A request that cannot succeed as configured (bad auth, unknown model, unreachable server …)."""


class Engine(ABC):
    """Chat generation backend. Implementations batch internally however suits them."""

    kind: str = "engine"

    @property
    @abstractmethod
    def model_id(self) -> str:
        """What identifies the model for caching (a path with a fingerprint, or a served model name)."""

    @property
    def identity(self) -> str:
        """``kind:model_id``: how run records and judges name the engine's model."""
        return f"{self.kind}:{self.model_id}"

    def decoding(self, kinds: Sequence[str] = ("json_schema",)) -> dict[str, Any]:
        """What the run record says of this engine's decoding for requests constrained by ``kinds`` (json_schema,
        regex, choice; empty: unconstrained requests): ``constrained`` — true only where this engine enforces every
        such constraint — and the ``logprob_definition`` its log-probs follow (None where not known). The local
        engines enforce every kind and follow :data:`LOGPROB_DEFINITION`."""
        return {"constrained": bool(kinds), "logprob_definition": LOGPROB_DEFINITION}

    @abstractmethod
    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """One result per request, in order. Per-request failures are results with ``error``, not exceptions."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (threads, servers)."""


def finite_or_none(values: Sequence[float]) -> list[float] | None:
    """Log-probabilities as plain floats, or None if any is missing/not finite (e.g. -inf from masking)."""
    out = [float(v) for v in values]
    return out if all(math.isfinite(v) for v in out) else None


@dataclass
class EngineConfig:
    """Which engine and model (fields double as CLI options of jobs that generate)."""

    engine: str = field(default="transformers", metadata={"help": "transformers, openai or vllm."})
    model: str = field(default="embedded", metadata={"help": "chat_lm role name: 'embedded', 'real', path, hub id."})
    adapter: str | None = field(default=None, metadata={"help": "A PEFT LoRA adapter folder (transformers)."})
    batch_size: int = field(default=8, metadata={"help": "Requests per forward batch (transformers)."})
    dtype: str = field(default="auto", metadata={"help": "auto, float32, bfloat16, float16."})
    base_url: str = field(default="http://127.0.0.1:8000/v1", metadata={"help": "OpenAI-compatible server URL."})
    api_key: str | None = field(default=None, metadata={
        "help": "API key; none: OPENAI_API_KEY, else 'EMPTY'. Never written to a run's files (recorded as "
                "'<redacted>').",
    })
    timeout: float = field(default=60.0, metadata={"help": "Seconds per HTTP request."})
    max_retries: int = field(default=4, metadata={
        "help": "Retries by the openai SDK (backoff with jitter, Retry-After honoured): timeouts, 408/409/429, 5xx."})
    concurrency: int = field(default=4, metadata={"help": "Requests in flight at once (openai)."})
    cache: str | None = field(default=None, metadata={"help": "SQLite file: replay identical requests."})
    send_generation_config: bool = field(
        default=False, metadata={"help": "openai engine: send sampling as generation_config (transformers serve)."}
    )
    server: str = field(default="unknown", metadata={
        "help": "openai engine: the kind of server (vllm, ollama, llamacpp, openai, transformers, unknown): how "
                "constraints are sent, and whether they are reported as enforced (unknown: never)."})
    device: str = field(default="auto", metadata={"help": DEVICE_HELP + " The generator (transformers engine) and "
                                                          "the job's other models: verifier, encoders, rerankers."})
    vllm_args: str | None = field(default=None, metadata={
        "help": "vllm engine: a JSON object of further vllm.LLM arguments, e.g. '{\"max_model_len\": 2048, "
                "\"enforce_eager\": true}' on a CPU, '{\"tensor_parallel_size\": 2}' on two GPUs."})

    def __post_init__(self) -> None:
        check_device(self.device)
        if self.vllm_args is not None:
            self.vllm_kwargs()  # a malformed value fails here, not when the engine is built

    def vllm_kwargs(self) -> dict[str, Any]:
        """``vllm_args`` as keyword arguments of ``vllm.LLM``."""
        if not self.vllm_args:
            return {}
        try:
            value = json.loads(self.vllm_args)
        except json.JSONDecodeError as error:
            raise ValueError(f"vllm_args is not JSON ({error}): {self.vllm_args!r}") from None
        if not isinstance(value, dict):
            raise ValueError(f"vllm_args must be a JSON object of vllm.LLM arguments, not {self.vllm_args!r}")
        return value


class DecodingTally(Engine):
    """An engine that counts the decoding facts of every answer it passes on (:func:`record_decoding` of each
    result made): what a scorer's run record says of its judge when there is no record per answer to keep them."""

    def __init__(self, engine: Engine, kinds: Sequence[str]):
        self.engine, self.kinds = engine, list(kinds)
        self.kind = engine.kind
        self.facts: list[dict[str, Any]] = []

    @property
    def model_id(self) -> str:
        return self.engine.model_id

    def decoding(self, kinds: Sequence[str] = ("json_schema",)) -> dict[str, Any]:
        return self.engine.decoding(kinds)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        results = self.engine.generate(requests)
        self.facts += [record_decoding(self.engine, self.kinds, [r]) for r in results if r.ok]
        return results

    def close(self) -> None:
        self.engine.close()
