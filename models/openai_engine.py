"""Any OpenAI-compatible server (vLLM serve, Ollama, llama.cpp, ``transformers serve``).

Timeouts, bounded concurrency, clear errors for bad auth or an unknown model, and the openai SDK's own retries:
connection errors, timeouts, 408, 409, 429 and 5xx are retried up to ``max_retries`` times with its exponential
backoff and jitter (0.5 s doubling to at most 8 s, each cut by up to 25 %), and a server's ``Retry-After`` (or
``retry-after-ms``) of up to two minutes is waited exactly instead. What is still failing after the last retry
becomes that request's error result; the batch goes on.

Servers differ: some ignore ``n`` or ``logprobs`` (``transformers serve`` ignores both). When a server returns fewer
choices than asked, the rest are requested one by one with distinct seeds; log-probabilities the server does not
give are reported as unavailable (None), never as zeros.

Constraints go the way each server reads them (``server``): a JSON schema as ``response_format: {"type":
"json_schema", ...}`` (Ollama ≥ 0.5, llama.cpp's server and OpenAI enforce it), everything as vLLM's
``structured_outputs`` for vLLM (a JSON schema as the transformers engine's own EBNF grammar of its compact JSON:
vLLM's server ignores a request's ``disable_any_whitespace`` and its JSON grammar allows free whitespace, which a
budget sized for the compact answer cannot hold; ``models/vllm_engine.py`` says more), a choice as a GBNF
``grammar`` for llama.cpp. Raw-prompt requests (``/v1/completions``) carry their constraint the same way where the
server reads it there (vLLM: ``structured_outputs``; llama.cpp: ``json_schema`` or ``grammar``). A server that rejects
a constraint with a 400 naming it is detected on first use, and the rest of that kind go without.

Enforcement is never assumed, and ``decoding()`` reports what was done: a constraint kind counts as enforced only
for a server known to enforce it (:data:`ENFORCES`) as long as every request of that kind so far was sent in a
field the server enforces and not rejected; one request that went without (a rejected schema, a raw prompt to a
server that reads no constraint there) makes it ``constrained: false`` from then on — the driver rewrites the run
record when that changes. ``transformers serve`` answers 200 and ignores ``response_format``, so an unknown server is
reported as unconstrained. The caller's strict parser stays the final check either way.

``api_key``: None reads ``OPENAI_API_KEY`` (as the SDK does); without it, ``"EMPTY"`` (local servers want some key).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from veracity.models.engine import (
    LOGPROB_DEFINITION,
    UNAVAILABLE,
    Candidate,
    Engine,
    EngineError,
    GenerationRequest,
    GenerationResult,
    choice_grammar,
    finite_or_none,
)

logger = logging.getLogger(__name__)
RETRIED_STATUSES = (408, 409, 429)  # and every 5xx: what the openai SDK retries (besides timeouts, lost connections)
# The constraint kinds each kind of server is known to enforce (its documentation; for transformers serve, which
# ignores them: docs/install.md#facts-the-code-relies-on); "unknown" is any other server.
ENFORCES: dict[str, frozenset[str]] = {
    "vllm": frozenset({"json_schema", "regex", "choice"}),
    "llamacpp": frozenset({"json_schema", "choice"}),
    "ollama": frozenset({"json_schema"}),
    "openai": frozenset({"json_schema"}),
    "transformers": frozenset(),
    "unknown": frozenset(),
}
# Words of a 400 that refuses the request's constraint rather than the request (vLLM: "The provided JSON schema
# contains features not supported by xgrammar", "Failed to transform json schema into a grammar"; OpenAI strict mode:
# "Invalid schema for response_format").
CONSTRAINT_WORDS = ("response_format", "json_schema", "json schema", "structured output", "grammar", "regex")
# Servers whose log-probabilities follow LOGPROB_DEFINITION (vLLM computes them after its grammar mask, at T = 1).
SAME_LOGPROBS = frozenset({"vllm"})
# What a vLLM server request sets so that it samples as the other engines do (temperature and top-p only): a field a
# request leaves out takes the value of the model's generation_config.json (vLLM's --generation-config auto), and a
# repetition penalty or top-k there would change the answers and the distribution the log-probs come from.
VLLM_PLAIN_SAMPLING = {"top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0, "presence_penalty": 0.0,
                       "frequency_penalty": 0.0}


class OpenAIEngine(Engine):
    kind = "openai"

    def __init__(self, model: str, base_url: str = "http://127.0.0.1:8000/v1", api_key: str | None = None,
                 timeout: float = 60.0, max_retries: int = 4, concurrency: int = 4,
                 send_generation_config: bool = False, server: str = "unknown"):
        """``max_retries``: retries after the first attempt, done by the openai SDK (backoff with jitter,
        ``Retry-After`` honoured). ``send_generation_config``: also send the sampling settings as a per-request
        ``generation_config`` (``transformers serve`` samples only when asked that way; elsewhere it decodes
        greedily). ``server``: which kind of server answers (a key of :data:`ENFORCES`): how constraints are sent,
        and whether they are reported as enforced. ``api_key``: None reads ``OPENAI_API_KEY``, else ``"EMPTY"``."""
        import openai  # lazy: 0.9 s to import, paid only when an openai engine is built

        if server not in ENFORCES:
            raise ValueError(f"unknown server kind {server!r}; choose one of {sorted(ENFORCES)}")

        self.openai = openai
        api_key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"  # never stored on self: runs record engines
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries)
        self.model, self.base_url = model, base_url
        self.max_retries, self.concurrency = max_retries, max(1, concurrency)
        self.send_generation_config, self.server = send_generation_config, server
        self.n_supported: bool | None = None  # learned from the first answer with n > 1
        self.json_schema_supported: bool | None = None  # learned from the first request with a json_schema
        # constraint kinds at least one request went without (rejected, or no field the server enforces): sticky
        self.unenforced: set[str] = set()
        self.rejected: set[str] = set()  # kinds the server refused with a 400: not sent again
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        """Server and model, plus what changes the answer to the same request: sending the sampling as a
        generation_config (``transformers serve`` decodes greedily without it) and the server kind (it decides how a
        constraint is sent)."""
        key = f"openai:{self.base_url}#{self.model}"
        if self.send_generation_config:
            key += "+generation_config"
        if self.server != "unknown":
            key += f"@{self.server}"
        return key

    def decoding(self, kinds: Sequence[str] = ("json_schema",)) -> dict[str, Any]:
        """What was done so far (module docstring): ``constrained`` only while every request of these kinds went to
        this server in a field it enforces and was not rejected."""
        enforced = ENFORCES[self.server]
        constrained = bool(kinds) and all(k in enforced and k not in self.unenforced for k in kinds)
        return {"constrained": constrained, "server": self.server,
                "logprob_definition": LOGPROB_DEFINITION if self.server in SAME_LOGPROBS else None}

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        if self.concurrency == 1 or len(requests) <= 1:
            return [self._one(r) for r in requests]
        with ThreadPoolExecutor(self.concurrency) as pool:
            return list(pool.map(self._one, requests))

    # --- one request ------------------------------------------------------------------------------------

    def _one(self, request: GenerationRequest) -> GenerationResult:
        params = request.params
        if params.temperature == 0 and params.n > 1:
            # Greedy decoding has one answer however often it is asked (vLLM's server refuses greedy n > 1): ask
            # once, repeat it n times, as the local engines do.
            once = self._one(GenerationRequest(request.messages, request.prompt, replace(params, n=1)))
            once.candidates = [replace(once.candidates[0]) for _ in range(params.n)] if once.ok else []
            return once
        enforced = []  # per call: whether its constraint went in a field this server enforces, not rejected
        try:
            candidates: list[Candidate] = []
            prompt_tokens = None
            if self.n_supported is not False or params.n == 1:
                response = self._call(request, params.n, params.seed, enforced)
                prompt_tokens = getattr(response.usage, "prompt_tokens", None) if response.usage else None
                candidates = [self._candidate(choice, request) for choice in response.choices]
                if params.n > 1:
                    with self._lock:
                        if self.n_supported is None:
                            self.n_supported = len(candidates) >= params.n
                            if not self.n_supported:
                                logger.warning("%s ignores n>1: sampling the other candidates one by one",
                                               self.base_url)
            for extra in range(len(candidates), params.n):  # the server gave fewer: ask again, new seeds
                seed = None if params.seed is None else params.seed + extra
                response = self._call(request, 1, seed, enforced)
                candidates += [self._candidate(choice, request) for choice in response.choices[:1]]
            return GenerationResult(candidates[: params.n], prompt_tokens=prompt_tokens,
                                    constrained=bool(enforced) and all(enforced))
        except _GaveUp as failure:
            return GenerationResult(error=str(failure))

    def _call(self, request: GenerationRequest, n: int, seed: int | None, enforced: list[bool]) -> Any:
        """One request to the server; appends to ``enforced`` whether its constraint (if any) was enforced."""
        p = request.params
        common: dict[str, Any] = dict(model=self.model, n=n, temperature=p.temperature, top_p=p.top_p,
                                      max_tokens=p.max_new_tokens, stop=list(p.stop) or None)
        if seed is not None:
            common["seed"] = seed
        extra: dict[str, Any] = dict(VLLM_PLAIN_SAMPLING) if self.server == "vllm" else {}
        if self.send_generation_config:
            config = {"do_sample": p.temperature > 0, "max_new_tokens": p.max_new_tokens}
            if p.temperature > 0:
                config.update(temperature=p.temperature, top_p=p.top_p)
            extra["generation_config"] = json.dumps(config)
        if request.prompt is not None:
            if p.logprobs:
                common["logprobs"] = 1

            def send(fields: dict[str, Any]) -> Any:
                body = {**common, **self._extra_body(extra, fields)}
                return self._with_retries(lambda: self.client.completions.create(prompt=request.prompt, **body))
        else:
            if p.logprobs:
                common["logprobs"] = True

            def send(fields: dict[str, Any]) -> Any:
                body = {**common, **self._extra_body(extra, fields)}
                return self._with_retries(
                    lambda: self.client.chat.completions.create(messages=list(request.messages), **body))

        if p.constraint is None:
            enforced.append(False)
            return send({})
        kind = p.constraint[0]
        fields = self._constraint_fields(p, raw=request.prompt is not None)
        if not fields:
            self._went_without(kind, "refused before" if kind in self.rejected else "no field for it here")
            enforced.append(False)
            return send({})
        try:
            response = send(fields)
        except _ConstraintRejected as rejected:
            self._went_without(kind, str(rejected), rejected=True)
            enforced.append(False)
            return send({})
        enforced.append(kind in ENFORCES[self.server])
        if kind == "json_schema":
            with self._lock:
                if self.json_schema_supported is None:
                    self.json_schema_supported = True
        return response

    @staticmethod
    def _extra_body(extra: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
        """SDK keyword arguments: ``response_format`` as itself, every other field through ``extra_body``."""
        body = dict(fields)
        rest = {**extra, **{k: body.pop(k) for k in list(body) if k != "response_format"}}
        return {**body, **({"extra_body": rest} if rest else {})}

    def _went_without(self, kind: str, why: str, rejected: bool = False) -> None:
        """Note that a request constrained by ``kind`` was decoded without it (``why``: the server's words);
        ``rejected``: the server refused it, so the rest of that kind go without."""
        with self._lock:
            if kind not in self.unenforced and kind in ENFORCES[self.server]:
                logger.warning("%s: a %s constraint went unenforced (%s): decoding unconstrained, the parser checks "
                               "the answers; the run record says constrained: false", self.base_url, kind, why)
            self.unenforced.add(kind)
            if rejected:
                self.rejected.add(kind)
                if kind == "json_schema":
                    self.json_schema_supported = False

    def _constraint_fields(self, p: Any, raw: bool = False) -> dict[str, Any]:
        """The request fields that carry ``p``'s constraint to this kind of server (``raw``: a ``/v1/completions``
        request); empty where the server reads none for this request. Servers not known to enforce a schema still
        get ``response_format`` on chat requests (harmless; never reported as enforced)."""
        kind = p.constraint[0]
        if kind in self.rejected:
            return {}
        if self.server == "vllm":
            if kind == "json_schema":
                import xgrammar  # lazy: what the transformers engine enforces, sent as vLLM's grammar

                from veracity.models.decoding import json_schema_grammar  # lazy: torch and transformers

                try:
                    return {"structured_outputs": {"grammar": json_schema_grammar(xgrammar, p.json_schema)}}
                except Exception as error:  # noqa: BLE001 - xgrammar's own error types; refused as a server would
                    self._went_without(kind, f"xgrammar cannot compile the schema: {error}", rejected=True)
                    return {}
            return {"structured_outputs": {kind: p.regex if kind == "regex" else list(p.choice)}}
        if self.server == "llamacpp":
            if kind == "choice":
                return {"grammar": choice_grammar(p.choice)}
            if kind == "json_schema" and raw:
                return {"json_schema": json.loads(p.json_schema)}
        if kind == "json_schema" and not raw:
            return {"response_format": {"type": "json_schema", "json_schema": {
                "name": "answer", "schema": json.loads(p.json_schema), "strict": True}}}
        return {}

    def _with_retries(self, call: Callable[[], Any]) -> Any:
        """``call()`` (the SDK retries inside it); the errors that remain, mapped to what a user can act on."""
        o = self.openai
        try:
            return call()
        except o.AuthenticationError as error:
            raise EngineError(f"{self.base_url}: authentication failed (check api_key): {error}") from error
        except o.PermissionDeniedError as error:
            raise EngineError(f"{self.base_url}: permission denied for model {self.model!r}: {error}") from error
        except o.NotFoundError as error:
            raise EngineError(f"{self.base_url}: model {self.model!r} or endpoint not found: {error}") from error
        except o.BadRequestError as error:
            detail = _body(error)
            if any(word in detail.lower() for word in CONSTRAINT_WORDS):
                raise _ConstraintRejected(f"bad_request: {detail}") from error
            if "model" in detail.lower():
                raise EngineError(f"{self.base_url}: the server rejects model {self.model!r}: {detail}") from error
            raise _GaveUp(f"bad_request: {detail}") from error
        except (o.APITimeoutError, o.APIConnectionError) as error:
            raise self._exhausted(error) from error
        except o.APIStatusError as error:
            if error.status_code in RETRIED_STATUSES or error.status_code >= 500:
                raise self._exhausted(error) from error
            raise _GaveUp(f"http_{error.status_code}: {_body(error)}") from error

    def _exhausted(self, error: Exception) -> _GaveUp:
        return _GaveUp(f"{UNAVAILABLE} after {self.max_retries + 1} attempts: {type(error).__name__}: {_body(error)}")

    @staticmethod
    def _candidate(choice: Any, request: GenerationRequest) -> Candidate:
        if request.prompt is not None:
            text = choice.text or ""
            lp = getattr(choice.logprobs, "token_logprobs", None) if choice.logprobs else None
        else:
            text = choice.message.content or ""
            content = getattr(choice.logprobs, "content", None) if choice.logprobs else None
            lp = [t.logprob for t in content] if content else None
        finish = choice.finish_reason or "stop"
        for stop in request.params.stop:  # some servers keep the matched stop string: OpenAI semantics drop it
            if stop and stop in text:
                text, finish = text[: text.find(stop)], "stop"
        logprobs = finite_or_none(lp) if lp else None
        return Candidate(text=text, finish_reason=finish, token_logprobs=logprobs,
                         num_tokens=len(lp) if lp else None)


def _body(error: Any) -> str:
    """The server's own words: the error body (FastAPI servers put them in ``detail``), else the message."""
    response = getattr(error, "response", None)
    text = getattr(response, "text", "") if response is not None else ""
    return f"{error} {text}".strip()


class _GaveUp(Exception):
    """This request failed for good; it becomes a result with an error (the batch goes on)."""


class _ConstraintRejected(_GaveUp):
    """The server refused the request's constraint (``response_format``, a schema, a grammar): it may answer
    without it."""
