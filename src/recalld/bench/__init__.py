"""Retrieval benchmarks: LongMemEval and LoCoMo loaders, metrics, one runner, reports.

The Python entry points are :func:`run_longmemeval` and :func:`run_locomo`; each returns
the report as a JSON-ready dict (see ``docs/benchmarks.md``).
"""

from recalld.bench.runner import System, run_locomo, run_longmemeval

__all__ = ["System", "run_locomo", "run_longmemeval"]
