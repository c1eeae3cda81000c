"""The nightly consolidation of each active scope's facts (docs/concepts/memory.md#nightly-consolidation).

- `consolidator.py`: `Consolidator`, the role: it finds the candidate groups with the rules of
  `knowledge/rules/consolidation.py`, asks the monitor's model only about them, checks every answer, and
  merges, rewrites and compresses facts as planned effects (`core/background/effects.py`), once a night.
"""
