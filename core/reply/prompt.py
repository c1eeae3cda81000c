"""PromptBuilder (the design's MemoryInjector): builds the prompt for a reply inside the model's token budget.

The prompt is the persona and the user's profile (always, when one is written and the audience may read
it), then what the companion knows (system and core memories always, the summary of the conversation's start
once it has left the window, facts and episodes retrieved for this message), then the conversation so far.
Each memory and each message is a whole item: when the budget is short, the lowest-ranked items go first and
no item is ever cut in half.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from core import phrasebook
from core.errors import UserFacingError
from core.llm.client import MESSAGE_OVERHEAD_TOKENS, count_message_tokens, count_tokens
from core.reply.lore import active_lore
from core.reply.time_context import TurnTime, memory_line, now_section, threads_lines
from core.types import ChatMessage
from knowledge.journal.ongoing_threads import OngoingThread
from knowledge.records import MemoryRecord, StoredMessage
from knowledge.rules.decay import MemoryPolicy
from knowledge.rules.temporal import episode_moment
from personas.loader import Persona
from personas.lorebook import LoreEntry

# Recent messages outrank retrieved memories: a reply that loses the thread is worse than one
# that forgets an old fact. Past messages found by the conversation history's search come next,
# older messages of the window last.
RECENT_MESSAGES_FIRST = 4
_ORIGINAL_MACRO = re.compile(r"\{\{original\}\}", re.IGNORECASE)
# Lore may take at most this share of the prompt, whatever its book allows: memories and the
# conversation need room too.
LORE_SHARE = 0.25
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
    excerpt: StoredMessage | None = None  # a past message found by the conversation history's search
    memory_line: str | None = None  # how the memory is listed: with its time, and how it is known
    so_far: bool = False  # the memory sums up this conversation's start, which left the window

    @property
    def line(self) -> str:
        if self.excerpt is not None:
            return excerpt_line(self.excerpt)
        assert self.memory is not None and self.memory_line is not None
        return self.memory_line


def excerpt_line(message: StoredMessage) -> str:
    """How a past message is quoted in the prompt: when, who, what (cut if long)."""
    content = " ".join(message.content.split())
    if len(content) > EXCERPT_CHARS:
        content = content[:EXCERPT_CHARS] + "…"
    return f"- [{message.sent_at:%Y-%m-%d %H:%M}] {message.speaker_name}: {content}"


def how_known(memory: MemoryRecord, title: str) -> str:
    """What a fact's line says of where it came from (docs/concepts/time.md#dated-memories): the user said
    or confirmed it, or the companion gathered it from the conversation. Episodes and the persona's own
    facts say nothing."""
    if memory.category not in ("fact", "core"):
        return ""
    return f" ({title} said so)" if memory.verified or memory.source == "user" else " (inferred)"


def _examples(persona: Persona, fill: Callable[[str], str], title: str) -> str:
    if isinstance(persona.example_dialogue, str):  # a card's transcript: <START> only separates blocks
        return fill(persona.example_dialogue.replace("<START>", "")).strip()
    return "\n".join(
        (f"{title}: {fill(pair.user)}\n" if pair.user else "") + f"{persona.name}: {fill(pair.character)}"
        for pair in persona.example_dialogue
    )


def persona_prompt(persona: Persona, user_name: str | None = None, lore: Sequence[LoreEntry] = ()) -> str:
    """The character description every prompt starts with, macros filled for `user_name`.

    Lore goes before the character's description unless an entry asks to come after it.
    """

    def fill(text: str) -> str:
        return persona.fill(text.strip(), user_name)

    title = persona.title_for(user_name)
    # A card's {{original}} stands for the default instructions; ours are always kept, at the end.
    system_prompt = _ORIGINAL_MACRO.sub("", fill(persona.system_prompt)).strip()
    lines = [system_prompt] if system_prompt else []
    lines.append(f'You are {persona.name}, a companion character. You call the person you talk to "{title}".')
    lines += [entry.content for entry in lore if entry.position != "after_char"]
    for heading, text in (
        ("Who you are", persona.description),
        ("Personality", persona.personality),
        ("Speaking style", persona.speaking_style),
        ("Scenario", persona.scenario),
    ):
        if text.strip():
            lines.append(f"{heading}:\n{fill(text)}")
    lines += [entry.content for entry in lore if entry.position == "after_char"]
    if examples := _examples(persona, fill, title):
        lines.append(f"Example exchanges:\n{examples}")
    lines.append(
        "Stay in character. Answer in the language the user writes in. Only claim to remember what is "
        "listed under 'What you remember'; if you do not know something, say so. A memory marked "
        f"'(inferred)' is your own reading of the conversation, one marked '({title} said so)' their own "
        f"words. When two memories disagree, ask {title} which is true instead of guessing."
    )
    return "\n\n".join(lines)


class PromptBuilder:
    """Assembles persona, memories and working memory into a prompt that fits the budget."""

    excerpt_limit: int | None = None  # past messages the history search is asked for (None: the handler's choice)

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
        image_url: str | None = None,
        when: TurnTime | None = None,
        policy: MemoryPolicy | None = None,
        reserved: int = 0,
        profile: str | None = None,
        threads: Sequence[OngoingThread] = (),
        so_far: Sequence[MemoryRecord] = (),
    ) -> Prompt:
        """The prompt for replying to the last message of `window`.

        `always` are system and core memories (highest rank first), `retrieved` the facts and
        episodes found for this message, best first, `excerpts` past messages found for it that
        those memories do not cover, best first; `image_url` a photo sent with the last message.
        `when`: the turn's time, which the prompt states and dates every memory by (under `policy`'s
        plan rules). `reserved` tokens of the budget are left free (for tools and what they bring back).
        `profile`: the user's profile, shown whole after the time, and `threads` what is going on in their life
        now, in the Now section (the caller checked this audience may read both). `so_far`: the episodes that sum
        up this conversation's messages that left the window, oldest first, shown under their own heading.
        """
        if not window:
            raise ValueError("the window must end with the message being answered")
        *earlier, current = window  # the window's earlier messages, and the one being answered
        speaker = current.speaker_name
        try:
            base, closing, current_message, fixed = self._frame(
                persona, window, group, image_url, when, profile, threads
            )
        except MessageTooLongError:  # a context too small for the profile too: the message comes first
            base, closing, current_message, fixed = self._frame(persona, window, group, image_url, when)
        title = persona.title_for(speaker)
        ranked = self._ranked(always, so_far, retrieved, excerpts, earlier, when, policy or MemoryPolicy(), title)
        chosen = self._fit(ranked, self.budget.prompt_tokens - reserved - fixed, persona, group)
        while True:
            prompt = self._assemble(base, closing, chosen, current_message, title, persona, group, ranked, earlier)
            if prompt.tokens + reserved <= self.budget.prompt_tokens or not chosen:
                return prompt
            chosen = chosen[:-1]  # token counts are not exactly additive; shed the lowest-ranked item

    def covered(self, window: Sequence[StoredMessage], memories: Sequence[MemoryRecord]) -> set[str]:
        """The past messages this prompt already shows: the window, and the sources of the memories shown
        (an episode or fact made from them). The history search quotes others."""
        return {message.id for message in window} | {
            message_id for memory in memories for message_id in memory.message_ids
        }

    def check_fits(
        self, persona: Persona, message: StoredMessage, *, group: bool = False, image_url: str | None = None
    ) -> None:
        """Raise `MessageTooLongError` if `message` (and its photo), with the persona around it, cannot fit any prompt.

        Checked before the message is stored: a message no prompt can hold must not sit in the window,
        where it would crowd the conversation out of every later prompt.
        """
        self._frame(persona, [message], group, image_url)

    def _frame(
        self,
        persona: Persona,
        window: Sequence[StoredMessage],
        group: bool,
        image_url: str | None,
        when: TurnTime | None = None,
        profile: str | None = None,
        threads: Sequence[OngoingThread] = (),
    ) -> tuple[str, str, ChatMessage, int]:
        """The persona prompt (with the turn's time, given `when`, and the user's `profile`), the closing
        instructions, the message answered, and the tokens the three take."""
        current = window[-1]
        speaker = current.speaker_name
        base = persona_prompt(persona, speaker, self._lore(persona, window, speaker))
        if when is not None:
            base += "\n\n" + now_section(when, persona.title_for(speaker))
            if threads:
                base += "\n" + threads_lines(threads, when.now, persona.title_for(speaker))
        if profile:
            base += f"\n\n## Who {persona.title_for(speaker)} is (your notes)\n{profile}"
        current_message = replace(self._chat_message(current, persona, group), image_url=image_url)
        # Placed after the memories, at the end of the system message: some servers refuse a system
        # message after the conversation, where SillyTavern would put it.
        closing = persona.fill(persona.post_history_instructions.strip(), speaker)
        fixed = count_tokens(f"{base}\n\n{closing}") + MESSAGE_OVERHEAD_TOKENS + count_message_tokens(current_message)
        if fixed > self.budget.prompt_tokens:
            tokens = count_tokens(current.content)
            room = max(self.budget.prompt_tokens - fixed + tokens, 0)
            raise MessageTooLongError(phrasebook.too_long_to_read(tokens, room))
        return base, closing, current_message, fixed

    def _lore(self, persona: Persona, window: Sequence[StoredMessage], speaker: str) -> list[LoreEntry]:
        """The lore entries the recent messages bring in; `{{user}}` in them is whoever is being answered."""
        if persona.lorebook is None:
            return []
        return active_lore(
            persona.lorebook,
            [message.content for message in window],
            budget=int(self.budget.prompt_tokens * LORE_SHARE),
            fill=lambda text: persona.fill(text, speaker),
        )

    @staticmethod
    def _ranked(
        always: Sequence[MemoryRecord],
        so_far: Sequence[MemoryRecord],
        retrieved: Sequence[MemoryRecord],
        excerpts: Sequence[StoredMessage],
        earlier: Sequence[StoredMessage],
        when: TurnTime | None,
        policy: MemoryPolicy,
        title: str,
    ) -> list[_Item]:
        def remembered(memory: MemoryRecord, so_far: bool = False) -> _Item:
            line = f"- {memory.content}" if when is None else memory_line(memory, when, policy)
            return _Item(memory=memory, memory_line=line + how_known(memory, title), so_far=so_far)

        newest_first = [_Item(message=message) for message in reversed(earlier)]
        listed = {memory.id for memory in [*always, *so_far]}
        return [
            *(remembered(memory) for memory in always),
            *newest_first[:RECENT_MESSAGES_FIRST],
            # the thread of the conversation before the recent messages: how it began, then the newest summary first
            *(remembered(memory, so_far=True) for memory in [*so_far[:1], *reversed(so_far[1:])]),
            *(remembered(memory) for memory in retrieved if memory.id not in listed),
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
        room -= 4 * count_tokens("\n\n## What you remember about them\n")
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
        closing: str,
        chosen: list[_Item],
        current: ChatMessage,
        title: str,
        persona: Persona,
        group: bool,
        ranked: list[_Item],
        earlier: Sequence[StoredMessage],
    ) -> Prompt:
        memories = [item for item in chosen if item.memory is not None]
        messages = {item.message.id for item in chosen if item.message is not None}
        known = [item.line for item in memories if item.memory and item.memory.category in ("system", "core")]
        relevant = [
            item.line
            for item in memories
            if item.memory and item.memory.category not in ("system", "core") and not item.so_far
        ]
        # shown as the conversation went, whatever their rank
        so_far = sorted((episode_moment(item.memory), item.line) for item in memories if item.so_far and item.memory)
        system = base
        if known:
            system += f"\n\n## What you remember about {title} and yourself\n" + "\n".join(known)
        if so_far:
            system += "\n\n## Earlier in this conversation (your notes)\n" + "\n".join(line for _, line in so_far)
        if relevant:
            system += "\n\n## What you remember that may matter now\n" + "\n".join(relevant)
        quoted = [item.line for item in chosen if item.excerpt is not None]
        if quoted:
            system += "\n\n## Earlier messages that may matter now\n" + "\n".join(quoted)
        if closing:
            system += f"\n\n{closing}"
        kept = [message for message in earlier if message.id in messages]
        prompt_messages = [
            ChatMessage("system", system),
            *(self._chat_message(message, persona, group) for message in kept),
            current,
        ]
        chosen_ids = {item.memory.id for item in memories if item.memory}
        return Prompt(
            messages=prompt_messages,
            tokens=sum(count_message_tokens(message) for message in prompt_messages),
            dropped_memories=[item.memory for item in ranked if item.memory and item.memory.id not in chosen_ids],
            dropped_messages=len(earlier) - len(kept),
        )

    @staticmethod
    def _chat_message(message: StoredMessage, persona: Persona, group: bool) -> ChatMessage:
        if message.role == "assistant":
            return ChatMessage("assistant", message.content)
        # In group conversations the model must know who is speaking.
        text = f"{message.speaker_name}: {message.content}" if group else message.content
        return ChatMessage("user", text)
