"""What the companion says about itself, the same on every platform: refusals, errors, what it
remembers and what it forgot. Adapters only render these texts (split them, add buttons); what is
particular to one platform (its commands, its buttons, its private chats) stays in its adapter.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from core.errors import LLMError
from knowledge.journal.ongoing_threads import OngoingThread
from knowledge.people.joining import JoinReport
from knowledge.records import MemoryRecord, StoredMessage

NOT_ALLOWED = "Sorry, I can't talk with you here: the person who runs me hasn't allowed it."
SOMETHING_BROKE = "Sorry, something went wrong on my side. Please try again in a moment."
EMPTY_MESSAGE = "I got an empty message. Did you mean to say something?"
LOST_WORDS = "Sorry, I lost my words for a moment. Your message is saved; say it again?"
HELD_UNTIL_BACK = (
    "I can't reach my memory right now, so I can't answer yet. I'm holding on to what you write and will "
    "answer it, in order, as soon as I can."
)
HELD_NOT_SAVED = (
    "I can't save our conversation right now (my storage is full or failing), so I can't answer properly. "
    "I'm holding on to your message and will save it as soon as I can; if I'm restarted before that, it is lost."
)
NOTHING_REMEMBERED = "I don't remember anything about you yet."
FORGETTING_NOTHING = "Okay, I won't forget anything."


# -- images and voice --------------------------------------------------------------------------------

CANT_SEE_IMAGES = "I can't see images with this model. Could you tell me in words what it shows?"
CANT_SEE_IMAGES_READ_CAPTION = "(I can't see images with this model, so I only read what you wrote with it.)"
IMAGE_UNREADABLE = "I couldn't open that image. Could you send it as a photo (JPEG or PNG)?"
CANT_HEAR_VOICE = "I can't listen to voice messages yet. Could you write it down for me?"
NOT_TEXT = "I can read text and look at pictures, but stickers and files don't reach me. Could you write it?"


def image_too_large(size: int, limit: int, *, pixels: bool = False) -> str:
    """An image refused before anything reads it: larger than the operator allows."""
    if pixels:
        return "That image has too many pixels for me to open. Could you send a smaller one?"
    return (
        f"That image is too large for me ({size / 1e6:.1f} MB; the limit is {limit / 1e6:.1f} MB). "
        "Could you send a smaller one?"
    )


def apology(error: LLMError) -> str:
    """What the user reads when the model could not answer; their message is already saved."""
    return f"Sorry, I can't think straight right now: {error}. Your message is saved, so just try again in a moment."


def too_long(length: int, limit: int) -> str:
    """A message refused before it is stored: far longer than any chat message."""
    return (
        f"That message is too long for me ({length:,} characters; the limit is {limit:,}). Could you send it in parts?"
    )


def too_long_to_read(tokens: int, room: int) -> str:
    """A message that, with the persona around it, does not fit the model's context; it is not stored."""
    return (
        f"That message is too long for me to read in one go (about {tokens} tokens; I can take about {room}). "
        "Could you send it in shorter parts?"
    )


OVER_QUOTA = (
    "I've talked so much today that my head is spinning. Let's pick this up tomorrow, I'll be fresh again then!"
)


def too_fast(per_minute: int) -> str:
    """A message beyond the user's rate limit, answered without a model call."""
    return (
        f"You're writing faster than I can think (I read up to {per_minute} messages a "
        "minute). Give me a moment, then send that again?"
    )


PROFILE_HEADING = "How I see you:"


THREADS_HEADING = "What is going on for you now:"


def memory_listing(
    records: Sequence[MemoryRecord],
    now: datetime | None = None,
    zone_chosen: bool = False,
    profile: str | None = None,
    threads: Sequence[OngoingThread] = (),
) -> str:
    """`/memory`: the user's profile first, if one is written, and their ongoing threads, then what the companion
    remembers about them, most important first, where each may come up and, given the user's local `now`, when
    each was learned and the time zone it is read in."""
    zone = "" if now is None else "\n\n" + time_zone_status(now, zone_chosen)
    portrait = f"{PROFILE_HEADING}\n{profile}\n\n" if profile else ""
    if threads:
        going_on = [
            f"- {thread.title} (since {thread.since:%Y-%m-%d}{f': {thread.news}' if thread.news else ''}; {thread.id})"
            for thread in threads
        ]
        portrait += THREADS_HEADING + "\n" + "\n".join(going_on) + "\n\n"
    if not records:
        return portrait + NOTHING_REMEMBERED + zone
    lines = [
        f"[{record.category}] {record.content}  ({_dates(record, now)}importance {record.importance:.2f}; "
        f"{_where(record)}; {record.id})"
        for record in records
    ]
    return portrait + "What I remember about you:\n" + "\n".join(lines) + "\n\n" + SHARING_RULE + zone


def _local(moment: datetime, now: datetime) -> str:
    return f"{moment.astimezone(now.tzinfo):%Y-%m-%d %H:%M}"


def _dates(record: MemoryRecord, now: datetime | None) -> str:
    if now is None:
        return ""
    dates = [f"{'changed' if record.changed_at else 'learned'} {_local(record.dated, now)}"]
    for name, moment in (("about", record.about), ("until", record.until)):
        if moment is not None:
            dates.append(f"{name} {_local(moment, now)}")
    return "; ".join(dates) + "; "


def _where(record: MemoryRecord) -> str:
    if record.shared:
        return "shared"
    return "private" if record.learned_in is None else "learned in a group"


# -- discretion: /share ----------------------------------------------------------------------------

SHARING_RULE = (
    "In a group I only bring up what you said in that group, or what you shared: "
    "/share <id> shares one memory, /share <id> off takes it back, /share on shares everything."
)
SHARE_USAGE = (
    "/share shows what I may bring up in groups; /share on|off: everything you tell me, anywhere, may "
    "(or may not) come up in any group; /share <memory id> [on|off]: one memory (ids are in /memory)."
)


def sharing_status(on: bool) -> str:
    """`/share` alone: the user's switch as it stands."""
    if on:
        return "Sharing is on: anything you told me, in private or in another group, may come up in any group."
    return (
        "Sharing is off: in a group I only bring up what you said in that group and the memories you "
        "shared one by one. " + SHARE_USAGE
    )


def sharing_switched(on: bool) -> str:
    """`/share on|off`, done."""
    if on:
        return "Okay: from now on anything you told me may come up in groups. /share off takes it back."
    return "Okay: what you tell me in private stays between us; groups only hear what was said there."


def memory_sharing(record: MemoryRecord, shared: bool) -> str:
    """`/share <id> [on|off]`, done."""
    if shared:
        return f"Okay, this may come up in groups now: {record.content}"
    return f"Okay, this stays where you told me: {record.content}"


def no_such_memory(memory_id: str) -> str:
    """`/share <id>` named a memory the user does not have."""
    return f"I have no memory {memory_id} about you; /memory lists them with their ids."


def nothing_about(what: str) -> str:
    """`/forget <what>` found nothing to forget."""
    return f"I don't remember anything about {what!r}."


def remembered(found: Sequence[MemoryRecord | StoredMessage]) -> str:
    """`/forget <what>`, before asking: the memories and past messages it would forget."""
    return "I remember this:\n" + "\n".join(f"- {item.content}" for item in found)


def forget_question(found: Sequence[MemoryRecord | StoredMessage]) -> str:
    """`/forget <what>`: the question after what was found, counted as what it is."""
    memories = sum(isinstance(item, MemoryRecord) for item in found)
    counts = [(memories, "memory", "memories"), (len(found) - memories, "past message", "past messages")]
    return "Forget " + " and ".join(_counted(n, one, many) for n, one, many in counts if n) + "?"


def forgot(count: int) -> str:
    """`/forget <what>`, once confirmed."""
    return f"Done. I forgot {_counted(count, 'memory', 'memories')}."


def forgot_everything(memories: int, messages: int, about: str = "you") -> str:
    """`/forget`, once confirmed; `about` is how the user is named (in a group, by name)."""
    counted = f"{_counted(memories, 'memory', 'memories')} and {_counted(messages, 'message', 'messages')}"
    return f"Done. I forgot {counted} about {about}."


def _counted(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def forget_everything_question(name: str | None = None) -> str:
    """`/forget`: the question before everything goes; addressed by `name` where others may read it."""
    question = "shall I forget everything I know about you? This cannot be undone."
    return f"{name}, {question}" if name else question[0].upper() + question[1:]


# -- one person across platforms: /link, /unlink -----------------------------------------------------

LINK_PRIVATE_ONLY = "Linking happens in our private chat: send /link to me there."
NOT_LINKED = "This account isn't linked to another one: there is nothing to unlink."
LINK_REFUSED = {
    "unknown": "That code links nothing: it is wrong, used already or older than 10 minutes. "
    "Send /link from your other account for a new one.",
    "too many tries": "Too many wrong codes from this account: try again in an hour.",
    "own code": "That is this account's own code: send it from your other account.",
}
# the settings a join may find chosen on both sides, as the user calls them
SETTING_NAMES = {"share_in_groups": "/share", "time_zone": "time zone", "checkins": "/checkins"}


def link_code(code: str) -> str:
    """`/link`: the code, as the exact message to send from the other account."""
    return (
        "To join another account of yours (Telegram, Discord, the terminal) to this one, send me this from it, "
        f"in our private chat, within 10 minutes:\n\n/link {code}\n\nIt works once. Your memories of both become one."
    )


def link_refused(reason: str) -> str:
    """`/link <code>` that linked nothing (the reason says nothing of whose the code was)."""
    return LINK_REFUSED[reason]


def linked(identities: Sequence[str], report: JoinReport, *, already: bool = False) -> str:
    """`/link <code>`, done: who is linked now, and what was joined."""
    accounts = ", ".join(identities)
    if already:
        return f"These accounts are one already: {accounts}."
    lines = [
        f"Linked: {accounts} are one person to me now, with one memory.",
        f"Joined {_counted(report.memories, 'memory', 'memories')} and "
        f"{_counted(report.conversations, 'conversation', 'conversations')}"
        + (
            f"; {_counted(report.duplicates, 'memory', 'memories')} both knew, kept once." if report.duplicates else "."
        ),
    ]
    if report.kept_settings:
        kept = ", ".join(dict.fromkeys(SETTING_NAMES.get(name, name) for name in report.kept_settings))
        lines.append(f"You had chosen differently on each ({kept}): I kept the choice of the account I knew first.")
    return "\n".join(lines)


def linked_identities(identities: Sequence[object]) -> str:
    """The line `/memory` ends with for a linked person."""
    return "Linked accounts (one memory): " + ", ".join(map(str, identities)) + ". /unlink detaches the one you use."


def unlinked(rest: Sequence[str]) -> str:
    """`/unlink`, done."""
    return (
        "Unlinked: with this account I start fresh. What I remember stays with your other "
        f"{'account' if len(rest) == 1 else 'accounts'} ({', '.join(rest)})."
    )


# -- time: /timezone ---------------------------------------------------------------------------------

TIME_ZONE_USAGE = (
    "/timezone Area/City sets it (Europe/Berlin, America/New_York, Asia/Shanghai; a city alone works too)."
)


def time_zone_status(now: datetime, chosen: bool) -> str:
    """`/timezone` alone (and the end of `/memory`): the user's zone and their time there."""
    name = getattr(now.tzinfo, "key", str(now.tzinfo))
    origin = "" if chosen else ", the default here"
    return f"Your time zone is {name}{origin}: it is {now:%H:%M} on {now:%A} for you. {TIME_ZONE_USAGE}"


def time_zone_set(now: datetime) -> str:
    """`/timezone Area/City`, done."""
    name = getattr(now.tzinfo, "key", str(now.tzinfo))
    return f"Okay: your time zone is now {name}, where it is {now:%H:%M} on {now:%A}."


def unknown_time_zone(text: str) -> str:
    """`/timezone` named no zone this machine knows (a long text is not echoed back whole)."""
    shown = text if len(text) <= 60 else text[:57] + "..."
    return f"I don't know the time zone {shown!r}. {TIME_ZONE_USAGE}"


# -- check-ins: /checkins ----------------------------------------------------------------------------

CHECKINS_USAGE = (
    "/checkins on: I may write to you first in our private chat (to ask how a plan went, on a date I keep, "
    "after a long silence), at most once a day and never at night; /checkins off: only when you write."
)
CHECKINS_DISABLED = "Check-ins are switched off here: I only write when you do."


def checkins_status(on: bool, off_reason: str = "") -> str:
    """`/checkins` alone (and the end of `/memory`): whether the companion may write first."""
    if on:
        return "Check-ins are on: I may write to you first now and then. /checkins off stops them."
    why = f" (turned off because {off_reason})" if off_reason else ""
    return f"Check-ins are off{why}: I only write when you do. /checkins on lets me write first now and then."


def checkins_switched(on: bool) -> str:
    """`/checkins on|off`, done."""
    if on:
        return (
            "Okay: now and then I may write to you first, in our private chat — at most once a day, "
            "never at night. /checkins off stops it."
        )
    return "Okay: I won't write first any more; anything I had planned is cancelled."


def checkin_reason(rule: str, title: str, remembered: str, since: str, *, threads: bool = False) -> str:
    """Why the companion writes first, as the check-in's prompt states it (so the model invents no reason); after a
    silence, given `threads` (something going on in their life), it may ask how one of them is going."""
    if rule == "plan_passed":
        reason = f"{title} told you about this plan, and its time has now passed:\n{remembered}\nAsk how it went."
    elif rule == "kept_date":
        reason = f"Today is a date you keep for {title}:\n{remembered}\nMark the day warmly."
    else:
        reason = (
            f"{title} has not written for {since}; before that you talked often. Say you thought of them, lightly: "
            "no guilt, no asking why they were away."
        )
        if threads:
            reason += f" If one of the things going on in {title}'s life (under Now) fits, you may ask how it goes."
    return (
        f"{reason}\nWrite to {title} first, in character and in the language of your conversation, in one or two "
        "short sentences. This is the only reason you are writing: do not invent another."
    )


def checkin_cue(title: str) -> str:
    """The last message of a check-in's prompt: nothing new was said, the companion speaks first."""
    return f"({title} has not written anything new. Write your message to {title} now.)"
