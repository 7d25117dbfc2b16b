"""Round-robin comparison of the document session's options, or of batch bounds, on LoCoMo
turns: the figures of docs/ingest.md ("Length-sorted ..." and "Session options").

    .venv/bin/python scripts/embed_options.py sessions LOCOMO.json [--texts 240 --rounds 6]
    .venv/bin/python scripts/embed_options.py batches LOCOMO.json [--texts 240 --rounds 6]
    .venv/bin/python scripts/embed_options.py batches LOCOMO.json --long --texts 40

Each round draws the same random turns for every variant and runs the variants one after the
other, in reverse order every other round, so that a busy machine weighs on each alike.
Prints each variant's median texts/s (wall) and texts per CPU-second, with the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from recalld.providers.onnx import OnnxEmbedder
from recalld.sources.datasets import read_locomo


def session_variants() -> dict[str, OnnxEmbedder]:
    def make(threads: int = 0, spin: bool = True, parallel: bool = False,
             level: Any = ort.GraphOptimizationLevel.ORT_ENABLE_ALL) -> OnnxEmbedder:  # fmt: skip
        embedder = OnnxEmbedder.packaged()
        options = ort.SessionOptions()
        options.log_severity_level = 3
        if threads:
            options.intra_op_num_threads = threads
        if not spin:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if parallel:
            options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
        options.graph_optimization_level = level
        path = str(embedder._model_path)
        embedder._session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        return embedder

    return {
        "onnxruntime defaults": make(),
        "1 thread": make(threads=1),
        "2 threads": make(threads=2),
        "2 threads, no spinning": make(threads=2, spin=False),
        "2 threads, parallel mode": make(threads=2, parallel=True),
        "2 threads, extended opt": make(
            threads=2, level=ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        ),
        "2 threads, basic opt": make(threads=2, level=ort.GraphOptimizationLevel.ORT_ENABLE_BASIC),
    }


def batch_variants(long: bool) -> dict[str, OnnxEmbedder]:
    bounds = [(4, 8192), (8, 8192), (16, 8192), (32, 8192), (64, 512), (64, 1024), (64, 2048)]
    if long:
        bounds = [(32, 8192), (32, 4096), (32, 2048), (32, 1024), (32, 512)]
    variants = {}
    for texts, tokens in bounds:
        variants[f"{texts} texts / {tokens} tokens"] = OnnxEmbedder.packaged(
            batch_size=texts, batch_tokens=tokens
        )
    return variants


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["sessions", "batches"])
    parser.add_argument("locomo", type=Path)
    parser.add_argument("--texts", type=int, default=240)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument(
        "--long",
        action="store_true",
        help="Texts of 10 consecutive turns joined (~350 tokens, 2 windows).",
    )
    args = parser.parse_args()
    turns = [t.text for t in read_locomo(args.locomo.read_bytes()).turns][:1500]
    if args.long:
        turns = [" ".join(turns[i : i + 10]) for i in range(0, len(turns), 10)]
    variants = session_variants() if args.what == "sessions" else batch_variants(args.long)
    rng = np.random.default_rng(0)
    taken: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    print("load before", os.getloadavg(), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    for number in range(args.rounds):
        pick = [turns[i] for i in rng.choice(len(turns), args.texts, replace=False)]
        names = list(variants) if number % 2 == 0 else list(variants)[::-1]
        for name in names:
            variants[name].embed_documents(pick[:8])
            wall, cpu = time.perf_counter(), time.process_time()
            variants[name].embed_documents(pick)
            taken[name].append((time.perf_counter() - wall, time.process_time() - cpu))
    for name, seconds in taken.items():
        wall = args.texts / statistics.median(s[0] for s in seconds)
        cpu = args.texts / statistics.median(s[1] for s in seconds)
        print(f"{name:32s} {wall:7.1f} texts/s {cpu:7.1f} texts/CPU-s")
    print("load after", os.getloadavg(), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))


if __name__ == "__main__":
    main()
