"""Benchmarks, run from the repository root: `python -m bench.memory_path` and the others
(docs/performance/benchmarks.md).

Modules are imported by their own path (`from bench.stats import summarize`); this file re-exports nothing.
"""
