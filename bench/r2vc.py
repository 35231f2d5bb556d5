"""R2VC verifier benchmark: NLIVerifier against one pair at a time and against a raw batched forward.

Usage: OMP_NUM_THREADS=2 .venv/bin/python bench/r2vc.py [--prepared_dir runs/prep] [--pairs 256] [--nli_model embedded]

Side by side in one run on the same (evidence, claim) pairs of the prepared FEVER-Symmetric and Climate-FEVER
evidence dev splits: (a) naive — tokenizer and model on one pair at a time; (b) raw — the same model on batches of
``--batch_size`` pairs in input order (tokenise, pad, forward); (c) ``NLIVerifier.predict`` — length-sorted
batches of the same size, each distinct pair once, windows for long premises. The targets: (c) ≥ 3× (a), and
within 10% of (b). Read the ratios; absolute numbers move with machine load.
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
    verifier = NLIVerifier(args.nli_model, batch_size=args.batch_size)
    tokenizer, model = verifier.tokenizer, verifier.model

    def forward(p: list[str], h: list[str]) -> np.ndarray:
        batch = tokenizer(p, h, truncation=True, max_length=verifier.max_length, padding=True, return_tensors="pt")
        with torch.inference_mode():
            return model(**batch).logits.float().softmax(-1).numpy()

    def naive() -> np.ndarray:
        return np.vstack([forward([p], [h]) for p, h in zip(premises, hypotheses, strict=True)])

    def raw() -> np.ndarray:
        return np.vstack([forward(premises[i : i + args.batch_size], hypotheses[i : i + args.batch_size])
                          for i in range(0, len(premises), args.batch_size)])

    forward(premises[:2], hypotheses[:2])  # warm-up
    t_naive, _ = timed(naive)
    t_raw, out_raw = timed(raw)
    t_ours, out_ours = timed(verifier.predict, premises, hypotheses)
    agree = float((out_raw[:, verifier.columns].argmax(1) == out_ours.argmax(1)).mean())
    n = len(premises)
    print(f"{n} pairs, batch size {args.batch_size}, max_length {verifier.max_length}, "
          f"windowed premises {verifier.stats.windowed}\n")
    print("| scoring | seconds | pairs/s | vs naive |")
    print("|---|---:|---:|---:|")
    for name, seconds in (("naive, one pair at a time", t_naive), ("raw batched forward (input order)", t_raw),
                          ("NLIVerifier.predict (sorted, deduplicated)", t_ours)):
        print(f"| {name} | {seconds:.2f} | {n / seconds:.1f} | {t_naive / seconds:.2f}× |")
    print(f"\nNLIVerifier vs raw batched forward: {t_ours / t_raw:.2f}× the time (target ≤ 1.10×); "
          f"NLIVerifier and raw agree on {agree:.3f} of argmax labels")


if __name__ == "__main__":
    main()
