"""Retrieval benchmarks: LongMemEval, LoCoMo and workloads loaders, metrics, runners, reports.

The Python entry points are :func:`run_longmemeval`, :func:`run_locomo` and
:func:`run_workloads`; each returns the report as a JSON-ready dict (see
``docs/benchmarks.md``).
"""

from recalld.bench.runner import run_locomo, run_longmemeval
from recalld.bench.systems import System
from recalld.bench.workloads_run import run_workloads

__all__ = ["System", "run_locomo", "run_longmemeval", "run_workloads"]
