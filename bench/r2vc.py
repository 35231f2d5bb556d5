"""R2VC verifier benchmark: the verifier's backends side by side, and against one pair at a time.

Usage: OMP_NUM_THREADS=2 .venv/bin/python bench/r2vc.py [--prepared_dir runs/prep] [--pairs 256] [--nli_model embedded]

Side by side in one run on the same (evidence, claim) pairs of the prepared FEVER-Symmetric and Climate-FEVER
evidence dev splits: (a) naive — tokenizer and torch model on one pair at a time; (b) raw — the same model on
batches of ``--batch_size`` pairs in input order; then ``NLIVerifier.predict`` (length-sorted batches, each distinct
pair once, windows for long premises) with each backend: (c) torch fp32, (d) ONNX Runtime fp32, (e) ONNX Runtime
INT8 (dynamic quantization). Each row: pairs/s, the factor over (a), and the share of pairs whose argmax label
differs from (c). The graphs are exported before timing (once per model; cached). Targets (issue #28): INT8 ≥ 3×
(a) and ≥ 2× (c). Read the ratios; absolute numbers move with machine load.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def pairs(prepared_dir: str, count: int) -> tuple[list[str], list[str]]:
    from veracity.data_prep.prepared import PreparedDataError, read_prepared

    try:
        examples = [e for name in ("fever_symmetric", "climate_fever_evidence")
                    for e in read_prepared(prepared_dir, name, ["dev"]) if e.evidence_text.strip()]
    except PreparedDataError as error:
        sys.exit(f"bench/r2vc.py: {error}")
    examples = examples[:: max(1, len(examples) // count)][:count]
    return [e.evidence_text for e in examples], [e.claim for e in examples]


def timed(function, *args) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    out = function(*args)
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prepared_dir", default="runs/prep")
    parser.add_argument("--pairs", type=int, default=256)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--nli_model", default="embedded")
    args = parser.parse_args()
    from veracity.logs import quiet_third_party

    quiet_third_party()
    import torch

    from veracity.models.nli import NLIVerifier

    premises, hypotheses = pairs(args.prepared_dir, args.pairs)
    verifier = NLIVerifier(args.nli_model, batch_size=args.batch_size, backend="torch")
    model = verifier.model
    backends = {name: NLIVerifier(args.nli_model, batch_size=args.batch_size, backend=name)
                for name in ("onnx", "onnx_int8")}  # exports the graphs first when missing

    def forward(p: list[str], h: list[str]) -> np.ndarray:
        batch = verifier.encode(list(zip(p, h, strict=True)))
        with torch.inference_mode():
            return model(**batch).logits.float().softmax(-1).numpy()[:, verifier.columns]

    def naive() -> np.ndarray:
        return np.vstack([forward([p], [h]) for p, h in zip(premises, hypotheses, strict=True)])

    def raw() -> np.ndarray:
        return np.vstack([forward(premises[i : i + args.batch_size], hypotheses[i : i + args.batch_size])
                          for i in range(0, len(premises), args.batch_size)])

    forward(premises[:2], hypotheses[:2])  # warm-up
    for scorer in backends.values():
        scorer.predict(premises[:2], hypotheses[:2])
    rows = [("naive torch, one pair at a time", *timed(naive)), ("raw torch batched forward (input order)",
                                                                  *timed(raw)),
            ("NLIVerifier, torch fp32", *timed(verifier.predict, premises, hypotheses))]
    rows += [(f"NLIVerifier, ONNX Runtime {'INT8' if name.endswith('int8') else 'fp32'}",
              *timed(scorer.predict, premises, hypotheses)) for name, scorer in backends.items()]
    reference = rows[2][2].argmax(1)
    n, t_naive = len(premises), rows[0][1]
    print(f"{n} pairs, batch size {args.batch_size}, max_length {verifier.max_length}, "
          f"windowed premises {verifier.stats.windowed}, torch threads {torch.get_num_threads()}\n")
    print("| scoring | seconds | pairs/s | vs naive | argmax differs from torch fp32 |")
    print("|---|---:|---:|---:|---:|")
    for name, seconds, out in rows:
        differs = float((out.argmax(1) != reference).mean())
        print(f"| {name} | {seconds:.2f} | {n / seconds:.1f} | {t_naive / seconds:.2f}× | {differs:.3f} |")
    t_torch, t_int8 = rows[2][1], rows[4][1]
    print(f"\nINT8 ONNX: {t_naive / t_int8:.2f}× the naive loop (target ≥ 3×), {t_torch / t_int8:.2f}× batched torch "
          "(target ≥ 2×)")


if __name__ == "__main__":
    main()
