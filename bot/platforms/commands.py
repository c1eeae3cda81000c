"""One set of chat commands for every platform: /new /memory /why /forget /share /timezone /checkins /link /unlink
/help.

Each command is defined here once: its name and what it says of itself (the help, Telegram's menu,
Discord's slash commands), what its argument means, what it answers and who may read the answer
(`Visibility`). A platform says only how a command reaches it (a Telegram command, a Discord slash
command, a line typed in the terminal) and how it shows a `Reply`.

Forgetting asks first. The question's answers are button data (`forget:yes:<user>`, `forget:no:<user>`;
`forget:some:<user>:<key>` for `/forget <what>`), the same on Telegram and Discord, and what the
terminal's typed yes or no stands for. A `/forget <what>` question is kept in the database every process
shares, so its answer is taken once, within the hour, by whichever process it reaches (after a restart
too), and `/forget` of everything takes it away.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import Enum

from bot.routing import Place, Router
from core import phrasebook
from core.companion import Companion
from core.types import UserRef
from knowledge.records import Scope

CHECKINS_PRIVATE_ONLY = "Check-ins happen in our private chat: send /checkins on or off to me there."
NOT_YOUR_BUTTON = "This button belongs to whoever asked; send /forget yourself to forget what I know about you."
EXPIRED = "This question has expired; send /forget again."
# A forget question's answer: yes (everything), some (what the stored question `key` found), or no.
FORGET_ANSWER = re.compile(r"^forget:(?P<answer>yes|no|some):(?P<owner>[^:]+)(?::(?P<key>[0-9a-f]{16}))?$")


@dataclass(frozen=True, slots=True)
class Command:
    """One chat command, as every platform offers it."""

    name: str
    summary: str  # one line for a menu or a slash command
    help: str  # its line in /help
    argument: str = ""  # what its argument is (a slash command's option says it)


NEW = Command("new", "start a fresh conversation", "/new - start a fresh conversation")
MEMORY = Command("memory", "what I remember about you", "/memory - what I remember about you")
WHY = Command("why", "what I had in mind for my last reply", "/why - what I had in mind for my last reply to you")
FORGET = Command(
    "forget",
    "forget everything about you, or only what is about something",
    "/forget - forget everything about you, /forget <what> only what is about it (asks first)",
    "only the memories about this (leave empty to forget everything)",
)
SHARE = Command(
    "share",
    "what I may bring up in groups (on, off, or a memory id)",
    "/share - what I may bring up in groups: by default only what was said there; "
    "/share <id> shares one memory, /share on everything",
    "on/off: everything you told me, anywhere; a memory id from /memory, optionally followed by off",
)
TIMEZONE = Command(
    "timezone",
    "your time zone, e.g. Europe/Berlin",
    "/timezone Area/City - your time zone (Europe/Berlin, Asia/Shanghai), so I know your day",
    "an IANA name such as Europe/Berlin or Asia/Shanghai; leave empty to see yours",
)
CHECKINS = Command(
    "checkins",
    "whether I may write to you first (on or off)",
    "/checkins on|off - whether I may write to you first now and then (in our private chat)",
    "on or off; leave empty to see how it stands",
)
LINK = Command(
    "link",
    "one memory across your accounts: get a code, or send one",
    "/link - get a code to join your other account (Telegram, Discord, terminal) into one memory; "
    "/link <code> sent from the other joins them (in private)",
    "the code your other account got (leave empty to get one)",
)
UNLINK = Command(
    "unlink",
    "detach this account from your others",
    "/unlink - detach this account from your others: here I start fresh, the memories stay with them",
)
HELP = Command("help", "how to talk to me", "/help - this help")
COMMANDS = (NEW, MEMORY, WHY, FORGET, SHARE, TIMEZONE, CHECKINS, LINK, UNLINK, HELP)


class Visibility(Enum):
    """Who may read an answer, which each platform shows in its own way."""

    PUBLIC = "public"  # everyone where it was asked (the greeting of /new)
    DISCREET = "discreet"  # the caller's business, nothing private: where it was asked, to the caller alone where
    # the platform can (Discord's ephemeral answers)
    PRIVATE = "private"  # only the caller: where only they read it, even when asked in a group


@dataclass(frozen=True, slots=True)
class Choice:
    """One answer to a question: its button's label, and the data the button carries (at most 64 bytes)."""

    label: str
    data: str


@dataclass(frozen=True, slots=True)
class Question:
    """A yes/no question closing a reply."""

    text: str
    yes: Choice
    no: Choice


@dataclass(frozen=True, slots=True)
class Reply:
    """What a command answers: text, who may read it, and maybe a question after it."""

    text: str
    visibility: Visibility = Visibility.DISCREET
    question: Question | None = None

    def whole(self) -> str:
        """The text with the question after it."""
        return "\n\n".join(part for part in (self.text, self.question.text if self.question else "") if part)


@dataclass(frozen=True, slots=True)
class Call:
    """A command as it reached the companion: who, by what name, where, with what argument."""

    user: UserRef
    name: str  # how the caller is called where others read it
    place: Place
    argument: str = ""


def help_text(intro: str, extra: Sequence[str] = ()) -> str:
    """The help of a platform: how to talk to the companion there, then a line per command."""
    return "\n".join([intro, *(command.help for command in COMMANDS), *extra])


class ChatCommands:
    """The chat commands as one platform answers them."""

    def __init__(self, companion: Companion, router: Router, *, help: str, whispers: bool = False) -> None:
        """`help`: the platform's help (`help_text`); `whispers`: the platform can answer the caller alone where
        they asked (Discord)."""
        self._companion = companion
        self._router = router
        self._whispers = whispers
        self.help = help
        self._answers: dict[str, Callable[[Call], Awaitable[Reply | None]]] = {
            NEW.name: self._new,
            MEMORY.name: self._memory,
            WHY.name: self._why,
            FORGET.name: self._forget,
            SHARE.name: self._share,
            TIMEZONE.name: self._timezone,
            CHECKINS.name: self._checkins,
            LINK.name: self._link,
            UNLINK.name: self._unlink,
            HELP.name: self._help,
        }

    async def run(self, name: str, call: Call) -> Reply | None:
        """The answer to `/<name>` (one of `COMMANDS`); None when nothing is said (a refusal before a group)."""
        return await self._answers[name](call)

    def start(self, call: Call) -> Reply:
        """A first contact (Telegram's /start): a greeting, then the help."""
        greeting = self._companion.greeting(self._router.persona_for(call.place.ids))
        return Reply(f"{greeting}\n\n{self.help}")

    def unknown(self, command: str) -> Reply:
        """A command that is not one of ours: the help."""
        return Reply(f"I don't know the command {command}.\n\n{self.help}")

    # -- the answers -----------------------------------------------------------------------------

    async def _new(self, call: Call) -> Reply | None:
        if not self._router.allows(call.user, call.place):
            return Reply(phrasebook.NOT_ALLOWED) if self._alone(call) else None
        persona_id = self._router.persona_for(call.place.ids)
        greeting = await self._companion.new_conversation(persona_id, str(call.place.conversation))
        return Reply(greeting, Visibility.PUBLIC)

    async def _memory(self, call: Call) -> Reply:
        return Reply(await self._companion.memory_listing(self._scope(call)), Visibility.PRIVATE)

    async def _why(self, call: Call) -> Reply:
        # it quotes memories and what the caller said: theirs alone, wherever they asked
        return Reply(await self._companion.why_listing(self._scope(call)), Visibility.PRIVATE)

    async def _share(self, call: Call) -> Reply:
        # it may quote a memory
        return Reply(await self._companion.share(self._scope(call), call.argument), Visibility.PRIVATE)

    async def _timezone(self, call: Call) -> Reply:
        # where someone lives is theirs to tell
        return Reply(await self._companion.time_zone(self._scope(call), call.argument), Visibility.PRIVATE)

    async def _checkins(self, call: Call) -> Reply:
        """Check-ins go to the private conversation: they belong to the caller's scope under its persona, and
        where a platform cannot answer the caller alone in a group, the private chat is where to ask."""
        if not self._alone(call):
            return Reply(CHECKINS_PRIVATE_ONLY)
        private_ids = call.place.ids if call.place.private else ()  # asked in a group: the persona of the DMs
        scope = self._companion.scope(self._router.persona_for(private_ids), call.user)
        here = str(call.place.conversation) if call.place.private else None
        answer = await self._companion.checkins_command(scope, call.argument, private_conversation=here)
        return Reply(answer, Visibility.PRIVATE)

    async def _link(self, call: Call) -> Reply:
        """A code proves one person holds both accounts, so it is given and taken only where the caller is alone."""
        if not call.place.private:
            return Reply(phrasebook.LINK_PRIVATE_ONLY)
        code = call.argument.strip()
        if not code:
            return Reply(await self._companion.link_code(call.user), Visibility.PRIVATE)
        return Reply(await self._companion.link(call.user, code), Visibility.PRIVATE)

    async def _unlink(self, call: Call) -> Reply:
        if not call.place.private:
            return Reply(phrasebook.LINK_PRIVATE_ONLY)
        return Reply(await self._companion.unlink(call.user), Visibility.PRIVATE)

    async def _help(self, call: Call) -> Reply:
        return Reply(self.help)

    async def _forget(self, call: Call) -> Reply:
        owner = call.user.id
        what = call.argument.strip()
        if not what:
            everything = phrasebook.forget_everything_question(self._name_before_others(call))
            yes = Choice("Yes, forget everything", f"forget:yes:{owner}")
            return Reply("", question=Question(everything, yes, Choice("No, keep it", f"forget:no:{owner}")))
        asked = await self._companion.ask_to_forget(self._scope(call), what)
        if asked is None:
            return Reply(phrasebook.nothing_about(what))
        yes = Choice("Yes, forget these", f"forget:some:{owner}:{asked.key}")
        no = Choice("No, keep them", f"forget:no:{owner}:{asked.key}")
        found = Question(phrasebook.forget_question(asked.found), yes, no)
        return Reply(phrasebook.remembered(asked.found), Visibility.PRIVATE, found)

    # -- a forget question's answer ------------------------------------------------------------------

    @staticmethod
    def owns(data: str, user: UserRef) -> bool:
        """Whether the question `data` answers was asked by `user` (only they may answer it)."""
        matched = FORGET_ANSWER.match(data)
        return matched is not None and matched["owner"] == user.id

    async def answer(self, data: str, call: Call) -> str:
        """Carry out the answer `data` stands for (a button pressed, or the terminal's typed yes or no), given by
        the question's owner where `call` says; returns what takes the question's place."""
        matched = FORGET_ANSWER.match(data)
        if matched is None:
            raise ValueError(f"not a forget answer: {data!r}")
        key = matched["key"]
        if matched["answer"] == "no":
            if key:
                await self._companion.keep_as_asked(key)
            return phrasebook.FORGETTING_NOTHING
        if matched["answer"] == "some":
            # the scope asked about, even when the answer comes from another chat than the question's
            report = await self._companion.forget_as_asked(key, call.user) if key else None
            return EXPIRED if report is None else phrasebook.forgot(report.memories + report.messages)
        report = await self._companion.forget_everything(self._scope(call))
        about = self._name_before_others(call) or "you"
        return phrasebook.forgot_everything(report.memories, report.messages, about=about)

    # -- where and whose -----------------------------------------------------------------------------

    def _scope(self, call: Call) -> Scope:
        """The caller's own scope under the persona of the place: commands never reach anyone else's."""
        return self._companion.scope(self._router.persona_for(call.place.ids), call.user)

    def _alone(self, call: Call) -> bool:
        """Whether an answer given where the caller asked is read by them alone."""
        return call.place.private or self._whispers

    def _name_before_others(self, call: Call) -> str | None:
        """The caller's name where others read the answer too (a question in a group names whom it asks)."""
        return None if self._alone(call) else call.name
