"""Helpers for end-to-end memory scenarios: people who talk, days that pass, prompts to read.

Everything goes through the product's public path (`Companion.handle`, `tasks.drain`,
`lifecycle.run_decay`); these helpers only save typing and parse what the fake server recorded.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeAlias

from core.companion import Companion
from core.types import IncomingMessage
from tests.fakes.clock import FakeClock
from tests.fakes.messages import make_message
from tests.fakes.openai_server import FakeOpenAIServer, RecordedRequest

CHAT = "chat-model"
MONITOR = "monitor-model"
SUMMARIZER = "summarizer-model"
REVIEWER = "reviewer-model"

Body: TypeAlias = dict[str, Any]
Answer: TypeAlias = str | Callable[[Body], str]

# "[mem_0123abcd] content" as the monitor and the reviewer list memories.
_MEMORY_LINE = re.compile(r"^\[(mem_[0-9a-f]+)\] (.+)$", re.MULTILINE)
_CORE_HEADER = re.compile(r"^## What you remember about .+ and yourself$", re.MULTILINE)
_RETRIEVED_HEADER = "## What you remember that may matter now"
SO_FAR_HEADER = "## Earlier in this conversation (your notes)"


# -- people and time -----------------------------------------------------------------------------


@dataclass
class Person:
    """Someone chatting with the companion; every message is sent at the fake clock's time."""

    companion: Companion
    clock: FakeClock
    user_id: str = "cli:alice"
    speaker_name: str = "Alice"
    conversation_id: str | None = None

    def message(self, text: str) -> IncomingMessage:
        """What an adapter would hand the companion for `text`, sent now."""
        return make_message(
            text,
            user_id=self.user_id,
            speaker_name=self.speaker_name,
            conversation_id=self.conversation_id,
            sent_at=self.clock.now(),
        )

    async def say(self, text: str, *, group: bool = False) -> str:
        """One turn: send `text`, consume the whole reply (which hands the turn to the background)."""
        result = await self.companion.handle(self.message(text), group=group)
        return await result.text()


class Timeline:
    """Days passing with the daily decay pass, as the scheduler would run it."""

    def __init__(self, companion: Companion, clock: FakeClock) -> None:
        self.companion = companion
        self.clock = clock
        self.start: datetime = clock.now()

    @property
    def day(self) -> int:
        """Whole days since the timeline started."""
        return (self.clock.now() - self.start).days

    async def next_day(self) -> None:
        """A day later: the decay pass, then the review jobs it queued."""
        self.clock.advance(days=1)
        await self.companion.lifecycle.run_decay()
        await self.companion.tasks.drain()

    async def days(self, count: int) -> None:
        for _ in range(count):
            await self.next_day()


async def settle(companion: Companion) -> None:
    """Let every background job (monitor, summarizer, reviewer) run to the end."""
    await companion.tasks.drain()


async def wait_until(condition: Callable[[], bool], *, attempts: int = 1000) -> None:
    """Yield to the event loop until `condition` holds (a bounded wait, never a timing assertion)."""
    for _ in range(attempts):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never came true")


# -- reading recorded requests ---------------------------------------------------------------------


def prompt_text(request: RecordedRequest | Body) -> str:
    """Every message of a request, joined."""
    messages = request.messages if isinstance(request, RecordedRequest) else request["messages"]
    return "\n".join(str(message.get("content", "")) for message in messages)


def memories_in(request: RecordedRequest | Body) -> dict[str, str]:
    """The memories a monitor or reviewer prompt lists, id -> the rest of the line."""
    return dict(_MEMORY_LINE.findall(prompt_text(request)))


def turn_user_text(request: RecordedRequest | Body) -> str:
    """What the user said in the turn a monitor prompt shows (the line after the TURN marker)."""
    lines = prompt_text(request).splitlines()
    for index, line in enumerate(lines):
        if line.startswith("<<<TURN"):
            return lines[index + 1].split(": ", 1)[1]
    raise AssertionError("not a monitor prompt: no TURN block")


def monitor_request(fake: FakeOpenAIServer, said: str) -> RecordedRequest:
    """The (first) monitor request about the turn in which the user said something containing `said`."""
    found = [request for request in fake.requests_for(MONITOR) if said in turn_user_text(request)]
    assert found, f"the monitor never saw a turn saying {said!r}"
    return found[0]


def system_message(request: RecordedRequest) -> str:
    return str(request.messages[0]["content"])


def chat_history(request: RecordedRequest) -> list[str]:
    """The conversation part of a chat prompt (everything after the system message)."""
    return [str(message["content"]) for message in request.messages[1:]]


def prompt_sections(request: RecordedRequest) -> tuple[str, str]:
    """(always-injected system+core memories, memories retrieved for this message) of a chat prompt."""
    system = system_message(request)
    core = ""
    match = _CORE_HEADER.search(system)
    if match:
        core = system[match.end() :].split(_RETRIEVED_HEADER)[0].split(SO_FAR_HEADER)[0]
    retrieved = system.split(_RETRIEVED_HEADER, 1)[1] if _RETRIEVED_HEADER in system else ""
    return core, retrieved


# -- scripting the monitor ---------------------------------------------------------------------------


def monitor_rules(rules: Mapping[str, Answer], default: str = "[SKIP]") -> Callable[[Body], str]:
    """A monitor that answers by what the user said: the first rule whose key the turn contains wins.

    Answering by content (not FIFO) keeps scripts right when turns of several users run side by side.
    """

    def answer(body: Body) -> str:
        said = turn_user_text(body)
        for key, reply in rules.items():
            if key in said:
                return reply(body) if callable(reply) else reply
        return default

    return answer


def _shown_id(body: Body, word: str) -> str:
    ids = [memory_id for memory_id, content in memories_in(body).items() if word in content]
    assert len(ids) == 1, f"expected one shown memory mentioning {word!r}, got {ids}"
    return ids[0]


def boost(word: str) -> Callable[[Body], str]:
    """BOOST the memory shown this turn that mentions `word` (found in the prompt, as a model would)."""
    return lambda body: f"[BOOST:{_shown_id(body, word)}]"


def update(word: str, content: str) -> Callable[[Body], str]:
    """UPDATE the memory shown this turn that mentions `word` to `content`."""
    return lambda body: f"[UPDATE:{_shown_id(body, word)}] {content}"
