"""The monitor's op language: op values, a tolerant parser, and their canonical text.

The operations: docs/development/design-rules.md#monitor-operations.

An ADD, UPDATE or CHANGE may carry dates as attributes inside its tag, in the user's own words:
`[ADD about="next Monday 10:00"] 主人有面试`, `[UPDATE:mem_1 until="Friday"]`. They stay text here;
the monitor resolves them against the turn's local time in code (`knowledge/dates/moments.py`). An ADD may
say how long a state lasts instead: `[ADD lasts=today] 主人今天很累` (today, week or ongoing; code sets its end),
and how much it weighs: `[ADD weight=2] 主人的外婆去世了` (a number; code holds it to its range).

Ongoing threads (what is going on in the user's life now) have three ops of their own: `[OPEN since="last
week"] job hunt: sent three applications` (title, then the latest news after a colon), `[NEWS:thr_1] got an
interview` and `[CLOSE:thr_1] got the job`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypeAlias


@dataclass(frozen=True)
class Add:
    """[ADD] content: a new fact about the user; `about`: the moment a plan or event refers to, `until`:
    when a state ends (each as the model wrote it), `lasts`: how long a state lasts, `weight`: how much it
    matters (both checked by the monitor)."""

    content: str
    about: str | None = None
    until: str | None = None
    lasts: str | None = None
    weight: str | None = None


@dataclass(frozen=True)
class Update:
    """[UPDATE:id] content: a wrong memory corrected (its content, its dates, or both; "" keeps the content)."""

    memory_id: str
    content: str
    about: str | None = None
    until: str | None = None


@dataclass(frozen=True)
class Change:
    """[CHANGE:id] content: the same thing about the same subject changed over time ("moved from Beijing to
    Shanghai"); the old value stays as the past, true until now."""

    memory_id: str
    content: str
    about: str | None = None
    until: str | None = None


@dataclass(frozen=True)
class Boost:
    """[BOOST:id]: the memory really shaped the reply."""

    memory_id: str


@dataclass(frozen=True)
class Delete:
    """[DELETE:id]: the memory is wrong or the user asked to forget it."""

    memory_id: str


@dataclass(frozen=True)
class Skip:
    """[SKIP]: nothing to do."""


@dataclass(frozen=True)
class Open:
    """[OPEN] title: news: something going on in the user's life now (a job hunt, a move); `since`: when it
    began, as the model wrote it."""

    title: str
    news: str = ""
    since: str | None = None


@dataclass(frozen=True)
class News:
    """[NEWS:thread_id] news: the latest news of an ongoing thread."""

    thread_id: str
    news: str


@dataclass(frozen=True)
class Close:
    """[CLOSE:thread_id] how it ended: the thread is over."""

    thread_id: str
    news: str = ""


Op: TypeAlias = Add | Update | Change | Boost | Delete | Skip | Open | News | Close
Dated: TypeAlias = Add | Update | Change  # the ops that may carry `about` / `until`
ThreadOp: TypeAlias = Open | News | Close


@dataclass(frozen=True)
class ParseResult:
    """The ops found, and lines that tried to be an op but could not be read (prose is not listed)."""

    ops: list[Op]
    unreadable_lines: list[str]


_FULL_WIDTH = str.maketrans({"【": "[", "】": "]", "［": "[", "］": "]", "：": ":", "　": " ", "＝": "="})
# [WORD], [WORD:id], then attributes up to the bracket: [ADD about="next Monday"], [UPDATE:mem_1 until=Friday]
_TAG = re.compile(r"\[\s*([A-Za-z]+)\s*(?::\s*([^\]\s]*))?\s*([^\]]*?)\s*\]")
_ATTRIBUTE = re.compile(
    r"\s*(?P<name>about|until|since|lasts|weight)\s*[=:]\s*"
    r"(?:\"(?P<double>[^\"]*)\"|'(?P<single>[^']*)'|“(?P<curly>[^”]*)”|「(?P<corner>[^」]*)」|(?P<bare>[^\s\"']+))",
    re.IGNORECASE,
)
_LIST_MARKER = re.compile(r"^\s*(?:[-*•·]+|\d+\s*[.)、]|\(\d+\))\s*")
_BARE_SKIP = re.compile(r"^\W*skip\W*$", re.IGNORECASE)
_MEMORY_ID = re.compile(r"^[A-Za-z0-9_-]+$")
_OP_WORDS = {"add", "update", "change", "boost", "delete", "skip", "open", "news", "close"}
# the attributes each op may carry; the others carry none
_ATTRIBUTES = {
    "add": {"about", "until", "lasts", "weight"},
    "update": {"about", "until"},
    "change": {"about", "until"},
    "open": {"since"},
}


def _ascii_brackets(text: str) -> str:
    """Full-width brackets and colons made ASCII, so 【BOOST：mem_1】 reads as [BOOST:mem_1]."""
    return text.translate(_FULL_WIDTH)


def parse_ops(text: str) -> ParseResult:
    """Read the op language tolerantly: prose, list markers, lower case, full width, fences, several per line."""
    ops: list[Op] = []
    unreadable: list[str] = []
    for raw in _ascii_brackets(text).splitlines():
        line = _LIST_MARKER.sub("", raw.strip()).strip()
        if not line or line.startswith("```"):
            continue
        if _BARE_SKIP.match(line):
            ops.append(Skip())
            continue
        found, bad = _parse_line(line)
        ops.extend(found)
        if bad:
            unreadable.append(raw)
    return ParseResult(ops, unreadable)


def _parse_line(line: str) -> tuple[list[Op], bool]:
    """The ops of one line, and whether some op-like tag on it could not be read."""
    tags = [tag for tag in _TAG.finditer(line) if tag.group(1).lower() in _OP_WORDS]
    ops: list[Op] = []
    bad = False
    for index, tag in enumerate(tags):
        end = tags[index + 1].start() if index + 1 < len(tags) else len(line)
        op = _op(tag.group(1).lower(), tag.group(2), _clean_content(line[tag.end() : end]), tag.group(3))
        if op is None:
            bad = True
        else:
            ops.append(op)
    return ops, bad


def _attributes(text: str) -> dict[str, str] | None:
    """`about="…" until=…` as a dict; None if anything else is there, or a name comes twice."""
    found: dict[str, str] = {}
    position = 0
    while position < len(text):
        match = _ATTRIBUTE.match(text, position)
        if match is None or match["name"].lower() in found:
            return None
        value = next(value for key, value in match.groupdict().items() if key != "name" and value is not None)
        found[match["name"].lower()] = value.strip()
        position = match.end()
    return found if all(found.values()) else None


def _op(word: str, memory_id: str | None, content: str, attributes: str) -> Op | None:
    if memory_id is not None and not _MEMORY_ID.match(memory_id):
        return None
    dates = _attributes(attributes)
    if dates is None or set(dates) - _ATTRIBUTES.get(word, set()):
        return None
    if word == "skip" and memory_id is None:
        return Skip()
    if word == "add" and memory_id is None and content:
        return Add(content, **dates)
    if word == "update" and memory_id and (content or dates):
        return Update(memory_id, content, **dates)
    if word == "change" and memory_id and content:
        return Change(memory_id, content, **dates)
    if word == "boost" and memory_id:
        return Boost(memory_id)
    if word == "delete" and memory_id:
        return Delete(memory_id)
    if word == "open" and memory_id is None and content:
        title, _, news = content.partition(":")
        return Open(title.strip(), news.strip(), **dates) if title.strip() else None
    if word == "news" and memory_id and content:
        return News(memory_id, content)
    if word == "close" and memory_id:
        return Close(memory_id, content)
    return None


_QUOTES = {'"': '"', "'": "'", "“": "”", "「": "」"}


def _clean_content(text: str) -> str:
    """Op content without surrounding backticks or one pair of quotes."""
    text = text.strip().strip("`").strip()
    if len(text) >= 2 and text[0] in _QUOTES and text[-1] == _QUOTES[text[0]]:
        text = text[1:-1].strip()
    return text


def op_text(op: Op) -> str:
    """The canonical text of an op, lower case, as a user could have typed it."""
    match op:
        case Add(content):
            return _spaced(f"[add] {content}".lower())
        case Update(memory_id) | Change(memory_id):
            return f"[{type(op).__name__}:{memory_id}]".lower()
        case Boost(memory_id):
            return f"[boost:{memory_id}]".lower()
        case Delete(memory_id):
            return f"[delete:{memory_id}]".lower()
        case Open(title):
            return _spaced(f"[open] {title}".lower())
        case News(thread_id) | Close(thread_id):
            return f"[{type(op).__name__}:{thread_id}]".lower()
    return "[skip]"


def _spaced(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def squash_tags(text: str) -> str:
    """Chat text as the op-echo check compares it: ASCII brackets, no spaces inside tags, lower case."""
    squashed = _TAG.sub(
        lambda tag: f"[{tag.group(1)}" + (f":{tag.group(2)}]" if tag.group(2) is not None else "]"),
        _ascii_brackets(text),
    )
    return _spaced(squashed.lower())
