"""The reply path: one user message in, one answer out, never waiting for the background.

- `response_handler.py`: `ResponseHandler`, the turn from the stored message to the stored answer (recall included).
- `prompt.py`: `PromptBuilder`, the prompt inside the model's token budget; `lore.py`: which lorebook entries fire.
- `demo_prompt.py`: `DemoPromptBuilder`, the few lines the tiny embedded demo model is given instead.
- `recall_tool.py`: the `recall` tool the chat model may call to look its memory up (at most twice a turn).
- `time_context.py`: what a prompt says about time; `system_memories.py`: the persona's own facts.
- `images.py`: photos checked and downscaled before a vision model sees them.
"""
