"""The terminal adapter: interactive chat with streamed replies, or one message per line from a pipe."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable
from typing import TextIO

from core import phrasebook
from core.companion import Companion
from core.errors import UserFacingError
from core.types import IncomingMessage
from knowledge.records import Scope

HELP = (
    "Commands: /new (start afresh), /memory (what I remember), /forget (forget everything), "
    "/forget <what> (forget memories about it), /share [on|off|<memory id> [on|off]] (what I may bring up "
    "in group chats), /timezone [Area/City] (your time zone), /checkins [on|off] (whether I may write first: "
    "shown when you start a chat), /quit"
)
CONFIRMATIONS = {"yes", "y", "是", "确认"}
ReadLine = Callable[[str], Awaitable[str | None]]


class TerminalChat:
    """One person chatting with one persona in a terminal."""

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
        self._persona_id = companion.persona(persona_id).id
        self._user_name = user_name
        self._read_line = read_line
        self._out = output
        self._interactive = interactive
        self.conversation_id = f"cli:{user_name}"
        self.scope = Scope(self._persona_id, f"cli:{user_name}")

    def _say(self, text: str) -> None:
        self._out.write(text + "\n")
        self._out.flush()

    def show(self, text: str) -> None:
        """Words of the persona's own, not a reply (a check-in)."""
        self._say(f"{self._companion.persona(self._persona_id).name}: {text}")

    async def run(self) -> None:
        """Chat until /quit or end of input."""
        persona = self._companion.persona(self._persona_id)
        if self._interactive:
            self._say(HELP)
        if not await self._checkins_due() and self._interactive:
            self._say(f"{persona.name}: {self._companion.greeting(persona.id, self._user_name)}")
        while (line := await self._read_line("> " if self._interactive else "")) is not None:
            if line.strip() == "/quit":
                break
            try:
                await self._dispatch(line)
            except UserFacingError as error:
                self._say(str(error))

    async def _checkins_due(self) -> int:
        """A check-in due for this user is shown at the start of the chat, in place of the greeting."""
        outbox = _TerminalOutbox(self)
        self._companion.checkins.add_outbox(outbox)
        try:
            return await self._companion.checkins.run_due_for(self.scope)
        finally:
            self._companion.checkins.remove_outbox(outbox)

    async def _dispatch(self, line: str) -> None:
        command = line.strip().split(maxsplit=1)[0] if line.strip() else ""
        if command == "/new":
            self._say(await self._companion.new_conversation(self._persona_id, self.conversation_id))
        elif command == "/memory":
            self._say(await self._companion.memory_listing(self.scope))
        elif command == "/forget":
            what = line.strip()[len("/forget") :].strip()
            await (self._forget_about(what) if what else self._forget())
        elif command == "/share":
            self._say(await self._companion.share(self.scope, line.strip()[len("/share") :]))
        elif command == "/timezone":
            self._say(await self._companion.time_zone(self.scope, line.strip()[len("/timezone") :]))
        elif command == "/checkins":
            request = line.strip()[len("/checkins") :]
            self._say(
                await self._companion.checkins_command(self.scope, request, private_conversation=self.conversation_id)
            )
        elif command == "/help":
            self._say(HELP)
        elif command.startswith("/"):
            self._say(f"Unknown command {command}. {HELP}")
        else:
            await self._chat(line)

    async def _forget(self) -> None:
        answer = await self._read_line("Forget everything about you, for good? Type 'yes' to confirm: ")
        if (answer or "").strip().lower() not in CONFIRMATIONS:
            self._say(phrasebook.FORGETTING_NOTHING)
            return
        report = await self._companion.forgetting.everything(self.scope)
        self._say(phrasebook.forgot_everything(report.memories, report.messages))

    async def _forget_about(self, what: str) -> None:
        plan = await self._companion.forgetting.find(self.scope, what)
        if not plan.found:
            self._say(phrasebook.nothing_about(what))
            return
        self._say(phrasebook.remembered(plan.found))
        answer = await self._read_line("Forget these? Type 'yes' to confirm: ")
        if (answer or "").strip().lower() not in CONFIRMATIONS:
            self._say(phrasebook.FORGETTING_NOTHING)
            return
        report = await self._companion.forgetting.forget(plan)
        self._say(phrasebook.forgot(report.memories + report.messages))

    async def _chat(self, text: str) -> None:
        message = IncomingMessage(
            conversation_id=self.conversation_id,
            user_id=self.scope.user_id,
            speaker_name=self._user_name,
            text=text,
            sent_at=self._companion.clock.now(),
            persona_id=self._persona_id,
        )
        result = await self._companion.handle(message)
        if isinstance(result.reply, str):
            self._say(result.reply)
            return
        if not self._interactive:
            self._say(await result.text())
            return
        self._out.write(f"{self._companion.persona(self._persona_id).name}: ")
        async for piece in result.reply:
            self._out.write(piece)
            self._out.flush()
        self._say("")


class _TerminalOutbox:
    """Check-ins for the person at this terminal, printed as the persona's words."""

    def __init__(self, chat: TerminalChat) -> None:
        self._chat = chat

    def reaches(self, user_id: str) -> bool:
        return user_id == self._chat.scope.user_id

    async def deliver(self, user_id: str, conversation_id: str, text: str) -> None:
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
