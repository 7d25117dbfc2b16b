"""Peak memory and CPU time of embedding by the token bound of a batch (not a test).

    python scripts/bench_embed_batch_memory.py --tokens 8192 --tokens 2048 --tokens 1024

Generates the 328 KB workspace of scripts/bench_index.py, cuts its files into 1,000-character
windows (about 250 tokens) plus the first 120 characters of each (about 30 tokens), and embeds
them all with the packaged model, one child process per ``embed_batch_tokens`` value (the
embedding cache off), printing each child's peak resident memory, wall and CPU seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, resource, sys, time
from pathlib import Path
import recalld
texts = json.loads(Path(sys.argv[1]).read_text())
settings = recalld.Settings(db=Path(sys.argv[2]), cache_dir=None,
                            embed_batch_tokens=int(sys.argv[3]))
with recalld.open(settings=settings) as engine:
    engine.embedder.embed_documents(["warm up"])
    wall, cpu = time.perf_counter(), time.process_time()
    engine.embedder.embed_documents(texts)
    print(json.dumps({"tokens": int(sys.argv[3]), "texts": len(texts),
                      "wall_s": round(time.perf_counter() - wall, 1),
                      "cpu_s": round(time.process_time() - cpu, 1),
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, action="append", required=True)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_index import generate

    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp) / "ws", 0.328)
        texts: list[str] = []
        for page in sorted((Path(tmp) / "ws").rglob("*.md")):
            text = page.read_text(encoding="utf-8")
            texts += [text[i : i + 1000] for i in range(0, len(text), 1000)]
        texts += [t[:120] for t in texts]
        source = Path(tmp) / "texts.json"
        source.write_text(json.dumps(texts), encoding="utf-8")
        for tokens in args.tokens:
            done = subprocess.run(
                [sys.executable, "-c", CHILD, str(source), str(Path(tmp) / f"{tokens}.db"),
                 str(tokens)], capture_output=True, text=True, check=True,
            )  # fmt: skip
            result = json.loads(done.stdout.strip().splitlines()[-1])
            result["load"] = round(os.getloadavg()[0], 2)
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
