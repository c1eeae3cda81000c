"""Writes to a chromadb collection made at about the same time by different threads, made in one call.

An embedded chromadb write holds the GIL for its whole call, its SQLite commits and their fsyncs included:
5-15 ms during which no other Python thread runs, the event loop answering users included. Most of that
is paid per call, not per record (four records in one call cost little more than one), so when several
threads write at once (background jobs of different users) what each asks waits a moment for the others
and they are made together. A writer alone is never held back. The writer still waits for its
own write, so nothing about when a write is done changes for it.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

GATHER_SECONDS = 0.02  # how long a write waits for others, only while writes come together
TOGETHER_WITHIN = 0.5  # seconds: a write asked while another waited this recently means more are likely coming
MAX_RECORDS = 256  # records of one call at most (a request larger than this is made alone)
GATHERED = frozenset({"add", "upsert", "update"})


@dataclass(slots=True)
class _Write:
    method: str
    arguments: dict[str, Any]
    done: Future[None] = field(default_factory=Future)

    @property
    def ids(self) -> list[str]:
        return list(self.arguments["ids"])

    @property
    def shape(self) -> tuple[str, tuple[str, ...]]:
        """Writes of the same shape are made in one call: the same method, the same fields given."""
        return self.method, tuple(sorted(name for name, value in self.arguments.items() if value is not None))


class _Waiting:
    """What the writing thread serves: the writes asked, in order, and when writes last came together.

    Writes came together when one was asked while another waited: one writer making its writes one after
    another (even from different threads, as `asyncio.to_thread` does) never does, so it never waits."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.writes: deque[_Write | None] = deque()
        self.together_at = -TOGETHER_WITHIN

    def put(self, write: _Write | None) -> None:
        with self.changed:
            if self.writes:
                self.together_at = time.monotonic()
            self.writes.append(write)
            self.changed.notify()

    def next_batch(self, gather_seconds: float) -> list[_Write] | None:
        """The writes of the next round (None: the end), waiting for others a moment while writes come together."""
        with self.changed:
            self.changed.wait_for(lambda: bool(self.writes))
            if self.writes[0] is not None and time.monotonic() - self.together_at <= TOGETHER_WITHIN:
                deadline = time.monotonic() + gather_seconds
                while (left := deadline - time.monotonic()) > 0 and _records(self.writes) < MAX_RECORDS:
                    self.changed.wait(left)
            return self._take()

    def _take(self) -> list[_Write] | None:
        batch: list[_Write] = []
        named: set[str] = set()
        while self.writes:
            write = self.writes[0]
            if write is None:
                return batch or None  # the end stays queued until what came before it is made
            ids = set(write.ids)
            # a record named twice waits for the next round, so its writes are made in the order asked
            if batch and (ids & named or len(named) + len(ids) > MAX_RECORDS):
                break
            self.writes.popleft()
            batch.append(write)
            named |= ids
        return batch


def _records(writes: Iterable[_Write | None]) -> int:
    return sum(len(write.arguments["ids"]) for write in writes if write is not None)


class GatheredWrites:
    """`add`, `upsert` and `update` of `collection`, made by one thread, gathered while writes come together."""

    def __init__(self, collection: Any, *, at_once: Callable[[], bool] = lambda: False) -> None:
        """`at_once`: whether a write is made at once in the writer's own thread (one that holds what the writing
        thread would wait for)."""
        self._collection = collection
        self._at_once = at_once
        self._waiting = _Waiting()
        worker = threading.Thread(target=_serve, args=(self._waiting, collection), name="chroma-writes", daemon=True)
        worker.start()
        weakref.finalize(self, self._waiting.put, None)  # the thread ends with its owner

    def write(self, method: str, **arguments: Any) -> None:
        """Make `collection.<method>(**arguments)` (add, upsert or update), shared with other threads' writes."""
        if method not in GATHERED:
            raise ValueError(f"{method!r} is not a write that can be gathered")
        if self._at_once():
            getattr(self._collection, method)(**arguments)
            return
        write = _Write(method, arguments)
        self._waiting.put(write)
        write.done.result()


def _serve(waiting: _Waiting, collection: Any) -> None:
    while (batch := waiting.next_batch(GATHER_SECONDS)) is not None:
        shapes: dict[tuple[str, tuple[str, ...]], list[_Write]] = {}
        for write in batch:
            shapes.setdefault(write.shape, []).append(write)
        for writes in shapes.values():
            _make(writes, getattr(collection, writes[0].method))


def _make(writes: list[_Write], call: Callable[..., Any]) -> None:
    """One call for `writes`; if it fails, each is tried alone, so only a write that fails gets the error."""
    try:
        call(**_merged([write.arguments for write in writes]))
    except Exception as error:  # noqa: BLE001 - handed to the writers, who re-raise it
        if len(writes) > 1:
            for write in writes:
                _make([write], call)
        else:
            writes[0].done.set_exception(error)
        return
    for write in writes:
        write.done.set_result(None)


def _merged(arguments: list[dict[str, Any]]) -> dict[str, Any]:
    if len(arguments) == 1:
        return arguments[0]
    merged: dict[str, Any] = {}
    for name, first in arguments[0].items():
        if first is None:
            merged[name] = None
        elif name == "embeddings":
            merged[name] = np.concatenate([np.atleast_2d(np.asarray(each[name], np.float32)) for each in arguments])
        else:
            merged[name] = [value for each in arguments for value in each[name]]
    return merged
