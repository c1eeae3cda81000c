"""The background: what happens after the user has the reply. Nothing here is on the reply path.

- `lifecycle.py`: `MemoryLifecycle`, which hands each turn, overflow, review, profile, chapter and night due to the
  jobs below (`MonitorJob`, `SummarizeJob`, `ReviewJob`, `ProfileJob`, `ChapterJob`, `ConsolidationJob`: what each
  kind of job carries, and its JSON).
- `tasks.py`: the durable job runner (stored before it runs, retried, then a dead letter); `scheduler.py`: timed passes;
  `backlog.py`: a warning when the jobs waiting fall behind.
- The roles: `knowledge_monitor.py` (ops on memories and ongoing threads after each turn, `monitor_ops.py` their
  language), `conversation_summarizer.py` (episodes), `chapter_writer.py` (weeks, months and years folded into
  chapters), `memory_reviewer.py` (promote and decay reviews), `profile_writer.py` (each user's profile, at most
  daily); `consolidation/` (each scope's facts merged, rewritten and compressed, nightly).
- `checkpoint.py` and `effects.py`: what a job has decided, saved with it, so a crash neither loses nor repeats a write.
"""
