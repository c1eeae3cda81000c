"""MemoryInjector: builds the prompt for a reply inside the model's token budget.

The prompt is the persona, then what the companion knows (system and core memories always, facts
and episodes retrieved for this message), then the conversation so far. Each memory and each
message is a whole item: when the budget is short, the lowest-ranked items go first and no item is
ever cut in half.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from knowledge.records import MemoryRecord
from knowledge.working_memory import StoredMessage
from personas.loader import Persona

from .errors import UserFacingError
from .llm import MESSAGE_OVERHEAD_TOKENS, count_message_tokens, count_tokens
from .types import ChatMessage

# Recent messages outrank retrieved memories: a reply that loses the thread is worse than one
# that forgets an old fact. Past messages found in the history come next, older messages last.
RECENT_MESSAGES_FIRST = 4
# A past message is quoted, not replayed: a long one is cut here (it is one whole item in the budget).
EXCERPT_CHARS = 300


class MessageTooLongError(UserFacingError):
    """The user's message alone does not fit the model's context."""


@dataclass(frozen=True, slots=True)
class Budget:
    """Token limits of one prompt, derived from the model's context window."""

    context_window: int
    reply_tokens: int

    @property
    def prompt_tokens(self) -> int:
        return self.context_window - self.reply_tokens


@dataclass(slots=True)
class Prompt:
    """The messages to send and what was left out."""

    messages: list[ChatMessage]
    tokens: int
    dropped_memories: list[MemoryRecord] = field(default_factory=list)
    dropped_messages: int = 0


@dataclass(frozen=True, slots=True)
class _Item:
    memory: MemoryRecord | None = None
    message: StoredMessage | None = None  # a message of the current conversation
    excerpt: StoredMessage | None = None  # a past message found in the history

    @property
    def line(self) -> str:
        if self.excerpt is not None:
            return excerpt_line(self.excerpt)
        assert self.memory is not None
        return f"- {self.memory.content}"


def excerpt_line(message: StoredMessage) -> str:
    """How a past message is quoted in the prompt: when, who, what (cut if long)."""
    content = " ".join(message.content.split())
    if len(content) > EXCERPT_CHARS:
        content = content[:EXCERPT_CHARS] + "…"
    return f"- [{message.sent_at:%Y-%m-%d %H:%M}] {message.speaker_name}: {content}"


def persona_prompt(persona: Persona) -> str:
    """The character description every prompt starts with."""
    lines = [
        f"You are {persona.name}, a companion character. You call the person you talk to "
        f"\"{persona.user_title}\".",
        f"Personality:\n{persona.personality.strip()}",
    ]
    if persona.speaking_style.strip():
        lines.append(f"Speaking style:\n{persona.speaking_style.strip()}")
    if persona.example_dialogue:
        examples = "\n".join(
            f"{persona.user_title}: {pair.user}\n{persona.name}: {pair.character}" for pair in persona.example_dialogue
        )
        lines.append(f"Example exchanges:\n{examples}")
    lines.append(
        "Stay in character. Answer in the language the user writes in. Only claim to remember what is "
        "listed under 'What you remember'; if you do not know something, say so."
    )
    return "\n\n".join(lines)


class MemoryInjector:
    """Assembles persona, memories and working memory into a prompt that fits the budget."""

    def __init__(self, budget: Budget) -> None:
        if budget.prompt_tokens <= 0:
            raise ValueError("the reply reservation leaves no room for a prompt")
        self.budget = budget

    def build(
        self,
        persona: Persona,
        *,
        window: Sequence[StoredMessage],
        always: Sequence[MemoryRecord],
        retrieved: Sequence[MemoryRecord],
        excerpts: Sequence[StoredMessage] = (),
        group: bool = False,
    ) -> Prompt:
        """The prompt for replying to the last message of `window`.

        `always` are system and core memories (highest rank first), `retrieved` the facts and
        episodes found for this message, best first, `excerpts` past messages found for it that
        those memories do not cover, best first.
        """
        if not window:
            raise ValueError("the window must end with the message being answered")
        *history, current = window
        base = persona_prompt(persona)
        current_message = self._chat_message(current, persona, group)
        fixed = count_tokens(base) + MESSAGE_OVERHEAD_TOKENS + count_message_tokens(current_message)
        if fixed > self.budget.prompt_tokens:
            raise MessageTooLongError(
                f"That message is too long for me to read in one go (about {count_tokens(current.content)} "
                f"tokens; I can take about {max(self.budget.prompt_tokens - fixed + count_tokens(current.content), 0)}). "
                "Could you send it in shorter parts?"
            )
        ranked = self._ranked(always, retrieved, excerpts, history)
        chosen = self._fit(ranked, self.budget.prompt_tokens - fixed, persona, group)
        while True:
            prompt = self._assemble(base, chosen, current_message, persona, group, ranked, history)
            if prompt.tokens <= self.budget.prompt_tokens or not chosen:
                return prompt
            chosen = chosen[:-1]  # token counts are not exactly additive; shed the lowest-ranked item

    @staticmethod
    def _ranked(
        always: Sequence[MemoryRecord],
        retrieved: Sequence[MemoryRecord],
        excerpts: Sequence[StoredMessage],
        history: Sequence[StoredMessage],
    ) -> list[_Item]:
        newest_first = [_Item(message=message) for message in reversed(history)]
        always_ids = {memory.id for memory in always}
        return [
            *(_Item(memory=memory) for memory in always),
            *newest_first[:RECENT_MESSAGES_FIRST],
            *(_Item(memory=memory) for memory in retrieved if memory.id not in always_ids),
            *(_Item(excerpt=message) for message in excerpts),
            *newest_first[RECENT_MESSAGES_FIRST:],
        ]

    def _item_tokens(self, item: _Item, persona: Persona, group: bool) -> int:
        if item.message is None:
            return count_tokens(item.line) + 1  # + the line break
        assert item.message is not None
        return count_message_tokens(self._chat_message(item.message, persona, group))

    def _fit(self, ranked: list[_Item], room: int, persona: Persona, group: bool) -> list[_Item]:
        # Section headers cost a little; reserve them up front.
        room -= 3 * count_tokens("\n\n## What you remember about them\n")
        chosen: list[_Item] = []
        for item in ranked:
            cost = self._item_tokens(item, persona, group)
            if cost > room:
                break  # everything ranked below this one is dropped too
            chosen.append(item)
            room -= cost
        return chosen

    def _assemble(
        self,
        base: str,
        chosen: list[_Item],
        current: ChatMessage,
        persona: Persona,
        group: bool,
        ranked: list[_Item],
        history: Sequence[StoredMessage],
    ) -> Prompt:
        memories = [item for item in chosen if item.memory is not None]
        messages = {item.message.id for item in chosen if item.message is not None}
        known = [item.line for item in memories if item.memory and item.memory.category in ("system", "core")]
        relevant = [item.line for item in memories if item.memory and item.memory.category not in ("system", "core")]
        system = base
        if known:
            system += f"\n\n## What you remember about {persona.user_title} and yourself\n" + "\n".join(known)
        if relevant:
            system += "\n\n## What you remember that may matter now\n" + "\n".join(relevant)
        quoted = [item.line for item in chosen if item.excerpt is not None]
        if quoted:
            system += "\n\n## Earlier messages that may matter now\n" + "\n".join(quoted)
        kept_history = [message for message in history if message.id in messages]
        prompt_messages = [
            ChatMessage("system", system),
            *(self._chat_message(message, persona, group) for message in kept_history),
            current,
        ]
        chosen_ids = {item.memory.id for item in memories if item.memory}
        return Prompt(
            messages=prompt_messages,
            tokens=sum(count_message_tokens(message) for message in prompt_messages),
            dropped_memories=[item.memory for item in ranked if item.memory and item.memory.id not in chosen_ids],
            dropped_messages=len(history) - len(kept_history),
        )

    @staticmethod
    def _chat_message(message: StoredMessage, persona: Persona, group: bool) -> ChatMessage:
        if message.role == "assistant":
            return ChatMessage("assistant", message.content)
        # In group conversations the model must know who is speaking.
        text = f"{message.speaker_name}: {message.content}" if group else message.content
        return ChatMessage("user", text)
