"""The monitor's op language (DESIGN §3.2): op values, a tolerant parser, and their canonical text."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypeAlias


@dataclass(frozen=True)
class Add:
    """[ADD] content: a new fact about the user."""

    content: str


@dataclass(frozen=True)
class Update:
    """[UPDATE:id] content: a wrong or outdated memory replaced."""

    memory_id: str
    content: str


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


Op: TypeAlias = Add | Update | Boost | Delete | Skip


@dataclass(frozen=True)
class ParseResult:
    """The ops found, and lines that tried to be an op but could not be read (prose is not listed)."""

    ops: list[Op]
    unreadable_lines: list[str]


_FULL_WIDTH = str.maketrans({"【": "[", "】": "]", "［": "[", "］": "]", "：": ":", "　": " "})
_TAG = re.compile(r"\[\s*([A-Za-z]+)\s*(?::\s*([^\]]*?)\s*)?\]")
_LIST_MARKER = re.compile(r"^\s*(?:[-*•·]+|\d+\s*[.)、]|\(\d+\))\s*")
_BARE_SKIP = re.compile(r"^\W*skip\W*$", re.IGNORECASE)
_MEMORY_ID = re.compile(r"^[A-Za-z0-9_-]+$")
_OP_WORDS = {"add", "update", "boost", "delete", "skip"}


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
        op = _op(tag.group(1).lower(), tag.group(2), _clean_content(line[tag.end() : end]))
        if op is None:
            bad = True
        else:
            ops.append(op)
    return ops, bad


def _op(word: str, memory_id: str | None, content: str) -> Op | None:
    if memory_id is not None and not _MEMORY_ID.match(memory_id):
        return None
    if word == "skip" and memory_id is None:
        return Skip()
    if word == "add" and memory_id is None and content:
        return Add(content)
    if word == "update" and memory_id and content:
        return Update(memory_id, content)
    if word == "boost" and memory_id:
        return Boost(memory_id)
    if word == "delete" and memory_id:
        return Delete(memory_id)
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
        case Update(memory_id, _):
            return f"[update:{memory_id}]".lower()
        case Boost(memory_id):
            return f"[boost:{memory_id}]".lower()
        case Delete(memory_id):
            return f"[delete:{memory_id}]".lower()
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
