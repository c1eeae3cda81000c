"""The turn pipeline and the LLM roles: `Companion`, the reply, the prompt and the background roles.

Modules are imported by their own path (`from core.companion import Companion`); this file re-exports nothing.
"""
