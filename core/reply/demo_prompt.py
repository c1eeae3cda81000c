"""DemoPromptBuilder: the prompt for the tiny embedded demo model (SmolLM2-135M).

A model that small drowns in the full persona prompt: given a page of character description it
rambles about anything but what it was told. It can still do one thing well, and that is the thing
the demo must show: repeat back what the user told it when it is asked. So its prompt is a few
lines: who the character is, the one or two things the user said that matter for this message
(past statements found by search, remembered facts), the last exchange, and the message. Measured
on scripted first chats in English and Chinese by `python -m bench.demo`; the wordings below are the
ones that measured best, each language its own (the model copies the shape of what it reads).

Every reply still comes from the model: this module only chooses what the model reads.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, zip_longest

from core import phrasebook
from core.llm.client import count_message_tokens, count_tokens
from core.reply.prompt import MessageTooLongError, Prompt, PromptBuilder
from core.reply.time_context import TurnTime
from core.types import ChatMessage
from knowledge.journal.ongoing_threads import OngoingThread
from knowledge.records import MemoryRecord, StoredMessage
from knowledge.rules.decay import MemoryPolicy
from personas.loader import Persona

# How many things the user said are shown: with more the tiny model picks the wrong one.
DEMO_MEMORIES = 2
# Messages of the conversation shown before the one answered: the last exchange.
DEMO_RECENT_MESSAGES = 2
# Past messages asked of the history search: only the user's statements are kept, so ask for more.
DEMO_EXCERPTS = 8
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_QUESTION_END = ("?", "？")
_USERS_OWN = ("fact", "core")  # what the user said about themselves; episodes and the persona's facts stay out


@dataclass(frozen=True, slots=True)
class DemoWording:
    """How the demo prompt is worded in one language."""

    system: str  # `{name}`, `{title}`: the character and how it addresses the user
    told: str  # what stands before the things the user said ("" for none), then each on a line
    bullet: str  # before each thing said
    example: tuple[str, str] | None = None  # an exchange that shows how to answer from them


ENGLISH = DemoWording(
    system="You are {name}, {title}'s friendly companion. Answer in one short sentence.",
    told="Earlier I told you:\n",
    bullet="- ",
    example=(
        "Earlier I told you:\n- I work at a bakery.\n- My bike is blue.\n\nWhat colour is my bike?",
        "Your bike is blue!",
    ),
)
# In Chinese the model answered best when the user's words came just before the message, in the second
# person ("你…": how the character would say them back), with no heading or example (which it copied).
CHINESE = DemoWording(system="你是{name}。", told="", bullet="")


def wording_for(text: str) -> DemoWording:
    """The wording for a message: Chinese if it is written in Chinese, else English."""
    return CHINESE if _HAN.search(text) else ENGLISH


def said_back(statement: str, wording: DemoWording) -> str:
    """A user's statement as the character would say it back (Chinese: 我 becomes 你)."""
    return statement.replace("我", "你") if wording is CHINESE else statement


def _shown(memory: MemoryRecord, said: list[str]) -> bool:
    return memory.category in _USERS_OWN and memory.content.strip() in said


def is_statement(message: StoredMessage) -> bool:
    """A message the user told something in (not a question, not the character's reply)."""
    return message.role == "user" and not message.content.rstrip().endswith(_QUESTION_END)


class DemoPromptBuilder(PromptBuilder):
    """A few lines the tiny demo model can follow: persona, the things said that matter, the last exchange."""

    excerpt_limit = DEMO_EXCERPTS

    def covered(self, window: Sequence[StoredMessage], memories: Sequence[MemoryRecord]) -> set[str]:
        """Only the message answered and the sources of facts shown: the history search may find what the user
        said earlier in this conversation too, since only its last exchange is shown."""
        facts = [memory for memory in memories if memory.category in _USERS_OWN]
        return {window[-1].id, *(message_id for memory in facts for message_id in memory.message_ids)}

    def build(
        self,
        persona: Persona,
        *,
        window: Sequence[StoredMessage],
        always: Sequence[MemoryRecord],
        retrieved: Sequence[MemoryRecord],
        excerpts: Sequence[StoredMessage] = (),
        group: bool = False,
        image_url: str | None = None,
        when: TurnTime | None = None,
        policy: MemoryPolicy | None = None,
        reserved: int = 0,
        profile: str | None = None,
        threads: Sequence[OngoingThread] = (),
        so_far: Sequence[MemoryRecord] = (),
    ) -> Prompt:
        """The demo prompt for the last message of `window`: system and core memories beyond the user's own
        facts, episodes (the summary `so_far` too), times, images, the profile and threads are left out (the demo
        model cannot use them; it is offered no tools, so nothing is `reserved` for them)."""
        if not window:
            raise ValueError("the window must end with the message being answered")
        *earlier, current = window
        wording = wording_for(current.content)
        facts = [memory for memory in [*retrieved, *always] if memory.category in _USERS_OWN]
        said = self._said(facts, excerpts)
        recent = list(earlier[-DEMO_RECENT_MESSAGES:])
        while True:
            messages = self._messages(persona, wording, said, recent, current, group)
            tokens = sum(count_message_tokens(message) for message in messages)
            if tokens <= self.budget.prompt_tokens:
                break
            if recent:
                recent = recent[1:]
            elif said:
                said = said[:-1]
            else:
                room = self.budget.prompt_tokens - tokens + count_tokens(current.content)
                raise MessageTooLongError(phrasebook.too_long_to_read(count_tokens(current.content), max(room, 0)))
        return Prompt(
            messages=messages,
            tokens=tokens,
            dropped_memories=[memory for memory in [*always, *retrieved] if not _shown(memory, said)],
            dropped_messages=len(earlier) - len(recent),
        )

    def check_fits(
        self, persona: Persona, message: StoredMessage, *, group: bool = False, image_url: str | None = None
    ) -> None:
        """Raise `MessageTooLongError` if `message` with the persona lines cannot fit the demo model's prompt."""
        self.build(persona, window=[message], always=[], retrieved=[])

    @staticmethod
    def _said(facts: Sequence[MemoryRecord], excerpts: Sequence[StoredMessage]) -> list[str]:
        """The things the user said that matter most: the best past statement and the best fact, in turn."""
        statements = [message.content.strip() for message in excerpts if is_statement(message)]
        remembered = [fact.content.strip() for fact in facts]
        said: list[str] = []
        for text in chain.from_iterable(zip_longest(statements, remembered, fillvalue="")):
            if text and text not in said:
                said.append(text)
        return said[:DEMO_MEMORIES]

    def _messages(
        self,
        persona: Persona,
        wording: DemoWording,
        said: list[str],
        recent: list[StoredMessage],
        current: StoredMessage,
        group: bool,
    ) -> list[ChatMessage]:
        title = persona.title_for(current.speaker_name)
        messages = [ChatMessage("system", wording.system.format(name=persona.name, title=title))]
        if wording.example is not None:
            messages += [ChatMessage("user", wording.example[0]), ChatMessage("assistant", wording.example[1])]
        messages += [self._chat_message(message, persona, group) for message in recent]
        text = self._chat_message(current, persona, group).content
        if said:
            lines = "\n".join(wording.bullet + said_back(line, wording) for line in said)
            text = f"{wording.told}{lines}\n\n{text}" if wording.told else f"{lines}\n{text}"
        messages.append(ChatMessage("user", text))
        return messages
