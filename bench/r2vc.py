"""R2VC verifier benchmark: the verifier's backends side by side, and against one pair at a time.

Usage: OMP_NUM_THREADS=2 .venv/bin/python bench/r2vc.py [--prepared_dir runs/prep] [--pairs 256] [--nli_model embedded]
       [--isa avx2]

Side by side in one run on the same (evidence, claim) pairs of the prepared FEVER-Symmetric and Climate-FEVER
evidence dev splits: (a) naive — tokenizer and torch model on one pair at a time; (b) raw — the same model on
batches of ``--batch_size`` pairs in input order; then ``NLIVerifier.predict`` (length-sorted batches, each distinct
pair once, windows for long premises) with each backend: (c) torch fp32, (d) ONNX Runtime fp32, (e) ONNX Runtime
INT8 (dynamic quantization), (f) OpenVINO fp32, (g) OpenVINO INT8 (static, NNCF), (h) the cascade: (g), with the
pairs whose top two labels it scores within ``CASCADE_MARGIN`` re-scored by (f). Each row: pairs/s, the factor over
(a) and over (c), and the share of pairs whose argmax label differs from (c). The graphs are exported before timing
(once per model; cached). Targets (issues #28, #47): ≥ 3× (a) and ≥ 2× (c). The CPU's flags are printed with the
table: INT8 gains depend on VNNI. ``--isa avx2`` caps torch (ATen, MKL, oneDNN) and OpenVINO (its oneDNN) at AVX2,
as on a CPU without AVX-512 or VNNI — an emulation: ONNX Runtime's own kernels (MLAS) still pick by the CPU. Read
the ratios; absolute numbers move with machine load.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from machine import machine  # bench/machine.py

BACKENDS = {"onnx": "ONNX Runtime fp32", "onnx_int8": "ONNX Runtime INT8 (dynamic)", "openvino": "OpenVINO fp32",
            "openvino_int8": "OpenVINO INT8 (static, NNCF)",
            "openvino_cascade": "OpenVINO INT8, close calls re-scored in fp32 (cascade)"}
# What --isa avx2 sets before torch and OpenVINO load: each library's own cap on the instructions it dispatches to.
ISA_CAPS = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                     "DNNL_MAX_CPU_ISA": "AVX2"}}

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
    parser.add_argument("--isa", choices=sorted(ISA_CAPS), help="cap the instruction set (see above)")
    args = parser.parse_args()
    os.environ.update(ISA_CAPS.get(args.isa, {}))
    from veracity.logs import quiet_third_party

    quiet_third_party()
    import torch

    from veracity.models.nli import NLIVerifier

    premises, hypotheses = pairs(args.prepared_dir, args.pairs)
    verifier = NLIVerifier(args.nli_model, batch_size=args.batch_size, backend="torch")
    model = verifier.model
    backends = {name: NLIVerifier(args.nli_model, batch_size=args.batch_size, backend=name)
                for name in BACKENDS}  # exports the graphs first when missing

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
    rows += [(f"NLIVerifier, {label}", *timed(backends[name].predict, premises, hypotheses))
             for name, label in BACKENDS.items()]
    reference = rows[2][2].argmax(1)
    n, t_naive, t_torch = len(premises), rows[0][1], rows[2][1]
    print(machine(("torch", "transformers", "onnxruntime", "openvino", "nncf")))
    if args.isa:
        print(f"instruction set capped: {' '.join(f'{k}={v}' for k, v in ISA_CAPS[args.isa].items())} (ONNX Runtime "
              "not capped)")
    print(f"{n} pairs, batch size {args.batch_size}, max_length {verifier.max_length}, "
          f"windowed premises {verifier.stats.windowed}, torch threads {torch.get_num_threads()}\n")
    print("| scoring | seconds | pairs/s | vs naive | vs batched torch | argmax differs from torch fp32 |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, seconds, out in rows:
        differs = float((out.argmax(1) != reference).mean())
        print(f"| {name} | {seconds:.2f} | {n / seconds:.1f} | {t_naive / seconds:.2f}× | {t_torch / seconds:.2f}× "
              f"| {differs:.3f} |")
    print()
    for (name, label), (_, seconds, _) in zip(BACKENDS.items(), rows[3:], strict=True):
        if name in ("onnx_int8", "openvino_int8", "openvino_cascade"):
            print(f"{label}: {t_naive / seconds:.2f}× the naive loop (target ≥ 3×), {t_torch / seconds:.2f}× batched "
                  "torch (target ≥ 2×)")
    cascade = backends["openvino_cascade"].session  # counts the warm-up's pairs too
    print(f"cascade: {cascade.rescored} of {cascade.scored} scored pairs re-scored in fp32 "
          f"(margin {cascade.margin:g})")


if __name__ == "__main__":
    main()
