"""Offline batch generation with vLLM on GPUs (optional extra: ``pip install veracity[vllm]`` in its own env).

vLLM cannot be installed on the CPU machines (it pins a CUDA torch), so it is imported only here, lazily.
"""

from __future__ import annotations

from collections.abc import Sequence

from veracity.models.engine import Candidate, Engine, GenerationRequest, GenerationResult, finite_or_none
from veracity.models.registry import resolve_model


class VLLMEngine(Engine):
    kind = "vllm"

    def __init__(self, model: str = "real", dtype: str = "auto", **llm_kwargs: object):
        try:
            from vllm import LLM
        except ImportError as error:
            raise ImportError("the vllm engine needs vLLM (a GPU environment): pip install 'veracity[vllm]'") \
                from error
        self.folder = resolve_model("chat_lm", model)
        self.llm = LLM(model=str(self.folder), dtype=dtype, **llm_kwargs)

    @property
    def model_id(self) -> str:
        return f"vllm:{self.folder}"

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        from vllm import SamplingParams as VSampling

        results: list[GenerationResult] = []
        for request in requests:  # vLLM batches internally across calls made together; keep requests' own params
            p = request.params
            sampling = VSampling(n=p.n, temperature=p.temperature, top_p=p.top_p, max_tokens=p.max_new_tokens,
                                 seed=p.seed, stop=list(p.stop) or None, logprobs=0 if p.logprobs else None)
            if request.prompt is not None:
                output = self.llm.generate([request.prompt], sampling, use_tqdm=False)[0]
            else:
                output = self.llm.chat([list(request.messages)], sampling, use_tqdm=False)[0]
            candidates = []
            for o in output.outputs:
                lp = None
                if o.logprobs is not None:
                    lp = finite_or_none([step[token].logprob for step, token in zip(o.logprobs, o.token_ids,
                                                                                    strict=True)])
                candidates.append(Candidate(o.text, o.finish_reason or "stop", lp, len(o.token_ids)))
            results.append(GenerationResult(candidates, prompt_tokens=len(output.prompt_token_ids)))
        return results
