"""The turn and the LLM roles; no platform, no backend.

- `companion.py`: `Companion`, the one facade bot/ calls; `types.py`: what crosses into and out of a turn.
- `reply/`: the reply path (the prompt, recall, time); `background/`: the monitor, summarizer, reviewer and their jobs.
- `llm/`: the model clients. `forgetting.py`: the one forgetting service; `checkins.py`: writing first.
- `memory_editor.py`, `sharing.py`: edits and sharing choices; `why.py`: what a reply's prompt held (`/why`);
  `phrasebook.py`: what the companion says about itself.
- `clock.py`, `errors.py`, `rate_limit.py`, `unsaved_messages.py`: the small parts a turn leans on.

Modules are imported by their own path (`from core.companion import Companion`); this file re-exports nothing.
"""
