"""The terminal adapter: interactive chat with streamed replies, or one message per line from a pipe.

A line is a message for the pipeline or one of the chat commands, as on every platform; a question
(`/forget`) is answered by typing yes or no. A line that answers neither closes the question as a no and is
then taken for what it is, as a message typed beside a question's buttons is on Telegram and Discord. The
person at the terminal is `cli:<name>`, and so is their conversation: every answer is for them alone.
"""

from __future__ import annotations

import asyncio
import io
import sys
from collections.abc import Awaitable, Callable
from typing import TextIO

from bot.platforms.commands import COMMANDS, Call, ChatCommands, Reply, help_text
from bot.platforms.pipeline import Arrival, MessagePipeline
from bot.routing import Place, PlaceRules, Router
from core.companion import Companion
from core.errors import UserFacingError
from core.types import ConversationRef, UserRef
from knowledge.records import Scope

PLATFORM = "cli"
QUIT = "/quit"
HELP_TEXT = help_text("Write to talk to me; these commands do the rest:", [f"{QUIT} - end the chat"])
# what answers a question; an empty line (just Enter) keeps everything, as a terminal's default no does
CONFIRMATIONS = {"yes", "y", "是", "是的", "确认"}
REFUSALS = {"", "no", "n", "否", "不", "不是", "不要", "取消"}
NOT_AN_ANSWER = "That is not a yes or a no, so I take it as a no."
ReadLine = Callable[[str], Awaitable[str | None]]


def _command(line: str) -> tuple[str, str]:
    """A typed line's command (`/forget`; empty for a message) and its argument, the rest of the line."""
    words = line.split(maxsplit=1)
    if not words or not words[0].startswith("/"):
        return "", line
    return words[0], words[1].strip() if len(words) > 1 else ""


def terminal_user(name: str) -> UserRef:
    """The person at a terminal, by the name they chat under."""
    return UserRef(PLATFORM, name)


class TerminalChat:
    """One person chatting with one persona in a terminal (the pipeline's `Chat` for their messages)."""

    limit = sys.maxsize  # a terminal takes any length

    def __init__(
        self,
        companion: Companion,
        *,
        persona_id: str | None,
        user_name: str,
        read_line: ReadLine,
        output: TextIO,
        interactive: bool,
    ) -> None:
        self._companion = companion
        self._persona = companion.persona(persona_id)
        self._user_name = user_name
        self._read_line = read_line
        self._out = output
        self._interactive = interactive
        self.user = terminal_user(user_name)
        self.place = Place(ConversationRef(PLATFORM, "", user_name))
        router = Router(PlaceRules(), None, self._persona.id)  # no operator's rules: one person, one persona
        self._pipeline = MessagePipeline(companion, router)
        self._commands = ChatCommands(companion, router, help=HELP_TEXT)
        self.pace = 0.0 if interactive else None  # a reply is shown as it comes, or printed whole to a pipe
        self._unanswered: str | None = None  # a line typed at a question that did not answer it, still to handle

    @property
    def scope(self) -> Scope:
        return self._companion.scope(self._persona.id, self.user)

    def _say(self, text: str) -> None:
        self._out.write(text + "\n")
        self._out.flush()

    def show(self, text: str) -> None:
        """Words of the persona's own, not a reply (a check-in)."""
        self._say(f"{self._persona.name}: {text}")

    async def run(self) -> None:
        """Chat until /quit or end of input."""
        if self._interactive:
            self._say(HELP_TEXT)
        if not await self._checkins_due() and self._interactive:
            self._say(f"{self._persona.name}: {self._companion.greeting(self._persona.id, self._user_name)}")
        while (line := await self._next_line()) is not None:
            if _command(line)[0] == QUIT:  # words after it are ignored, as other commands ignore theirs
                break
            try:
                await self._dispatch(line)
            except UserFacingError as error:
                self._say(str(error))

    async def _next_line(self) -> str | None:
        """The line typed at a question that was not its answer, else the next line read."""
        if (line := self._unanswered) is not None:
            self._unanswered = None
            return line
        return await self._read_line("> " if self._interactive else "")

    async def _checkins_due(self) -> int:
        """A check-in due for this user is shown at the start of the chat, in place of the greeting."""
        outbox = _TerminalOutbox(self)
        self._companion.send_checkins_through(outbox)
        try:
            return await self._companion.send_checkins_due_for(self.scope)
        finally:
            self._companion.stop_checkins_through(outbox)

    async def _dispatch(self, line: str) -> None:
        command, argument = _command(line)
        if not command:
            arrival = Arrival(self.user, self._user_name, self.place, line, self._companion.now())
            await self._pipeline.receive(arrival, self)
            return
        call = Call(self.user, self._user_name, self.place, argument)
        if command[1:] in {known.name for known in COMMANDS}:
            await self._answer(call, await self._commands.run(command[1:], call))
        else:
            await self._answer(call, self._commands.unknown(command))

    async def _answer(self, call: Call, reply: Reply | None) -> None:
        """Print the answer; a question after it is answered by typing yes (anything else keeps everything, and a
        line that is not a no is then handled as the message or command it is)."""
        if reply is None:
            return
        if reply.text:
            self._say(reply.text)
        if reply.question is not None:
            typed = await self._read_line(f"{reply.question.text} Type 'yes' to confirm: ")
            word = (typed or "").strip().lower().rstrip(".!。！")
            if typed is not None and word not in CONFIRMATIONS | REFUSALS:
                self._say(NOT_AN_ANSWER)
                self._unanswered = typed
            choice = reply.question.yes if word in CONFIRMATIONS else reply.question.no
            self._say(await self._commands.answer(choice.data, call))

    # -- the pipeline's `Chat` --------------------------------------------------------------------------

    def reply(self) -> _PrintedReply:
        return _PrintedReply(self._out, f"{self._persona.name}: " if self._interactive else "")

    async def send(self, text: str) -> None:
        self._say(text)

    def typing(self) -> None:
        """A terminal shows no typing: the reply's first words come soon enough."""


class _PrintedReply:
    """A reply printed as it grows: what is new of each version, after the persona's name."""

    def __init__(self, out: TextIO, name: str) -> None:
        self._out = out
        self._name = name
        self._printed = ""

    async def show(self, text: str) -> None:
        self._print(text)

    async def finish(self, text: str) -> None:
        self._print(text)
        self._out.write("\n")
        self._out.flush()
        self._printed = ""

    def _print(self, text: str) -> None:
        if self._name:
            self._out.write(self._name)
            self._name = ""
        self._out.write(text.removeprefix(self._printed))
        self._out.flush()
        self._printed = text


class _TerminalOutbox:
    """Check-ins for the person at this terminal, printed as the persona's words."""

    def __init__(self, chat: TerminalChat) -> None:
        self._chat = chat

    def reaches(self, user: UserRef) -> bool:
        return user == self._chat.user

    async def deliver(self, user: UserRef, conversation: ConversationRef, text: str) -> None:
        self._chat.show(text)


def stdin_reader(stream: TextIO, *, echo_prompt: bool) -> ReadLine:
    """Read lines from `stream` without blocking the event loop; None at end of input.

    Bytes that are not UTF-8 are read as U+FFFD, so one bad line never ends the chat.
    """
    if isinstance(stream, io.TextIOWrapper):
        stream.reconfigure(errors="replace")

    async def read_line(prompt: str) -> str | None:
        def read() -> str | None:
            if echo_prompt and prompt:
                print(prompt, end="", flush=True)
            line = stream.readline()
            return line.rstrip("\r\n") if line else None

        return await asyncio.to_thread(read)

    return read_line
