"""Which process carries out a command: one data directory, one truth.

The process that holds a data directory's lock is its only reader and writer: the embedded chromadb
store is not meant to be shared by processes, and the bot answers searches from in-process snapshots
that another process's writes would never reach. So:

- `companion run`, `companion chat` and `companion web` own the directory for as long as they run, and listen on its
  control socket; a second one is refused, naming the PID that holds it.
- Every other command, while an owner runs, is sent to it over the socket (the command path and the
  parsed options), carried out there against the live app, and its output and exit code come back.
  Its writes therefore reach the running bot's snapshots before its next prompt, and reads see
  exactly what the bot sees.
- With no owner running, a command takes the lock itself for its duration (waiting a little for
  another short command to finish).

Interactive steps (a confirmation, `$EDITOR`) stay in the command's own process: the owner answers
with the question, the client asks it, then sends the command again with the answer filled in.

Server mode (PostgreSQL and a Chroma server) has no owner: the stores are servers meant to be shared,
any number of `run` processes use them at once, and every command opens them itself, with neither the
lock nor the socket. What a command writes reaches the running bots all the same: each write bumps
its scope's version, which every process checks before its next search, and a forget fences the
jobs of every process (`knowledge/forget/fence.py`).
"""

from __future__ import annotations

import asyncio
import contextvars
import io
import logging
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from bot.cli.control_socket import ControlServer, NotAnsweringError, Request, Response, send
from bot.cli.data_dir_lock import DataDirLock
from bot.config import Settings
from bot.startup import ensure_writable, opening

if TYPE_CHECKING:  # the app (chromadb, the models) is imported only by the process that builds one
    from bot.app import App

log = logging.getLogger(__name__)

PROTOCOL = 1
OWNER_COMMANDS = frozenset({"run", "chat", "web"})
WAIT_FOR_OWNER = 60.0  # seconds a command waits for a starting owner to listen, or a short command to finish
POLL = 0.05
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class LiveApp:
    """The app of the process that owns the data directory, and the event loop it runs on."""

    app: App
    loop: asyncio.AbstractEventLoop

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Carry out `work` on the owner's loop (called from the thread running a forwarded command)."""
        return asyncio.run_coroutine_threadsafe(work, self.loop).result()


_live: contextvars.ContextVar[LiveApp | None] = contextvars.ContextVar("live_app", default=None)
_output: contextvars.ContextVar[tuple[io.StringIO, io.StringIO] | None] = contextvars.ContextVar(
    "forwarded_output", default=None
)


def live_app() -> LiveApp | None:
    """The live app when this code runs a command forwarded to the owner; None in the command's own process."""
    return _live.get()


class Question(Exception):
    """A forwarded command needs an answer only its caller can give; the caller asks and sends it again."""

    def __init__(self, kind: str, text: str, param: str) -> None:
        super().__init__(text)
        self.kind, self.text, self.param = kind, text, param


def confirm(question: str, *, param: str) -> None:
    """Ask for confirmation (abort on no); `param` is the flag that answers it in advance (`--yes`)."""
    if live_app() is not None:
        raise Question("confirm", question, param)
    click.confirm(question, abort=True)


def edit_text(text: str, *, param: str) -> str | None:
    """Let the user edit `text` in `$EDITOR`; None if they left without saving. `param` takes the text instead."""
    if live_app() is not None:
        raise Question("edit", text, param)
    return click.edit(text)


# --- the command's own process ---------------------------------------------------------------------------


def run_in_data_dir(
    settings: Settings, work: Callable[[App], Coroutine[Any, Any, T]], *, start: bool, schedule: bool, owner: bool
) -> T:
    """Run `work` with an app on the settings' data directory, as the one process using it (see the module).

    An `owner` (run, chat) keeps the directory and serves the control socket while `work` runs; any other
    command is carried out by the running owner if there is one, else here with the directory held.
    """
    if (live := live_app()) is not None:
        return live.run(work(live.app))  # a command forwarded to us: the app is already running
    if settings.storage.server_mode:
        return asyncio.run(_with_app(settings, work, start=start, schedule=schedule, serve=False))
    lock = claim(settings.storage.data_dir, owner=owner)
    try:
        with serving_commands() if owner else nullcontext():
            return asyncio.run(_with_app(settings, work, start=start, schedule=schedule, serve=owner))
    finally:
        lock.release()


async def _with_app(
    settings: Settings, work: Callable[[App], Coroutine[Any, Any, T]], *, start: bool, schedule: bool, serve: bool
) -> T:
    """Build the app, serve the control socket if `serve`, run `work`, and close everything."""
    from bot.app import build_app

    root_ctx = click.get_current_context().find_root()
    root = root_ctx.command
    assert isinstance(root, click.Group)
    accept_empty_memory = bool((root_ctx.obj or {}).get("accept_empty_memory"))
    async with await build_app(settings, accept_empty_memory=accept_empty_memory) as app:
        control = ControlServer(settings.storage.data_dir, CommandRunner(root, app)) if serve else None
        try:
            if control is not None:
                await control.start()
            if start:
                await app.start(schedule=schedule)
            return await work(app)
        finally:
            if control is not None:
                await control.aclose()


def claim(data_dir: Path, *, owner: bool) -> DataDirLock:
    """Take the data directory for this command, or have its running owner carry the command out.

    Returns the lock held; after forwarding, exits with the owner's exit code instead of returning.
    """
    ctx = click.get_current_context()
    command = " ".join(_command_path(ctx))
    lock = DataDirLock(ensure_writable(data_dir))
    deadline = time.monotonic() + WAIT_FOR_OWNER
    while not _try_acquire(lock, command):
        holder = lock.holder()
        if owner and holder.command in OWNER_COMMANDS:
            raise click.ClickException(
                f"{data_dir} is in use by {holder}; stop it first, or give this one another data directory "
                "(--data-dir or COMPANION_DATA_DIR)"
            )
        if not owner and (response := _send(data_dir, _request(ctx))) is not None:
            raise click.exceptions.Exit(_finish(ctx, data_dir, response))
        if time.monotonic() > deadline:
            raise click.ClickException(f"{data_dir} is in use by {holder}, which did not answer; try again later")
        time.sleep(POLL)
    return lock


def _try_acquire(lock: DataDirLock, command: str) -> bool:
    with opening(lock.path, if_damaged=f"delete {lock.path.name} (it holds only the PID of its holder)"):
        return lock.try_acquire(command)


def _send(data_dir: Path, request: Request) -> Response | None:
    try:
        return send(data_dir, request)
    except NotAnsweringError as error:
        raise click.ClickException(
            f"the running companion holds {data_dir} but {error}: it is stopped or hung; nothing was done"
        ) from error
    except (ConnectionError, ValueError) as error:
        raise click.ClickException(
            f"the running companion did not answer ({error}); check with `memory list` whether the command was done"
        ) from error


def _command_path(ctx: click.Context) -> list[str]:
    names = []
    while ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return names[::-1]


def _request(ctx: click.Context) -> Request:
    return {"protocol": PROTOCOL, "command": _command_path(ctx), "params": _portable(ctx.params)}


def _portable(params: dict[str, Any]) -> dict[str, Any]:
    """Parsed options as JSON; paths made absolute, since the owner runs in another directory."""

    def portable(value: Any) -> Any:
        if isinstance(value, Path):
            return str(value.absolute())
        if isinstance(value, tuple | list):
            return [portable(item) for item in value]
        return value

    return {name: portable(value) for name, value in params.items()}


def _finish(ctx: click.Context, data_dir: Path, response: Response) -> int:
    """Print what the owner printed, asking its questions here first; returns the exit code."""
    request = _request(ctx)
    while (question := response.get("ask")) is not None:
        request["params"][question["param"]] = _answer(question)
        answered = _send(data_dir, request)
        if answered is None:
            raise click.ClickException("the running companion stopped before the command was done")
        response = answered
    if "error" in response:
        raise click.ClickException(f"the running companion could not carry out the command: {response['error']}")
    click.echo(response["stdout"], nl=False)
    click.echo(response["stderr"], nl=False, err=True)
    return int(response["exit_code"])


def _answer(question: dict[str, str]) -> Any:
    if question["kind"] == "confirm":
        click.confirm(question["text"], abort=True)
        return True
    edited = click.edit(question["text"])
    if edited is None or edited.strip() == question["text"].strip():
        click.echo("Nothing changed.")
        raise click.exceptions.Exit(0)
    return edited


# --- the owner's process ---------------------------------------------------------------------------------


class _RoutedStream(io.TextIOBase):
    """sys.stdout or sys.stderr of the owner: a forwarded command's output goes to its buffer, the rest on."""

    def __init__(self, stream: Any, index: int) -> None:
        self.stream = stream
        self._index = index

    def _target(self) -> Any:
        buffers = _output.get()
        return self.stream if buffers is None else buffers[self._index]

    def write(self, text: str) -> int:
        written: int = self._target().write(text)
        return written

    def flush(self) -> None:
        self._target().flush()

    def isatty(self) -> bool:
        return _output.get() is None and self.stream.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"


@contextmanager
def serving_commands() -> Iterator[None]:
    """While the owner serves the control socket, route forwarded commands' output to their buffers."""
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _RoutedStream(stdout, 0), _RoutedStream(stderr, 1)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = stdout, stderr


class CommandRunner:
    """The owner's side: carries out forwarded commands against the live app, one at a time."""

    def __init__(self, root: click.Group, app: App) -> None:
        self._root = root
        self._app = app
        self._one_at_a_time = asyncio.Lock()

    async def __call__(self, request: Request) -> Response:
        if request.get("protocol") != PROTOCOL:
            return {"error": f"protocol {request.get('protocol')} is not {PROTOCOL}: the CLI and the bot differ"}
        live = LiveApp(self._app, asyncio.get_running_loop())
        async with self._one_at_a_time:
            return await asyncio.to_thread(self._execute, live, request)

    def _execute(self, live: LiveApp, request: Request) -> Response:
        out, err = io.StringIO(), io.StringIO()
        _live.set(live)
        _output.set((out, err))
        try:
            code = self._invoke(request["command"], request["params"])
        except Question as question:
            return {"ask": {"kind": question.kind, "text": question.text, "param": question.param}}
        except click.exceptions.Exit as exit_:
            code = exit_.exit_code
        except click.ClickException as error:
            error.show(file=err)
            code = error.exit_code
        except click.Abort:
            err.write("Aborted!\n")
            code = 1
        return {"stdout": out.getvalue(), "stderr": err.getvalue(), "exit_code": code}

    def _invoke(self, path: list[str], given: dict[str, Any]) -> int:
        data_dir = self._app.settings.storage.data_dir
        ctx = click.Context(self._root, info_name="companion", obj={"data_dir": str(data_dir)})
        command: click.Command = self._root
        for name in path:
            assert isinstance(command, click.Group)
            found = command.get_command(ctx, name)
            if found is None:
                raise click.UsageError(f"the running companion has no command {' '.join(path)}")
            command = found
            ctx = click.Context(command, info_name=name, parent=ctx)
        if command.name in OWNER_COMMANDS:
            raise click.ClickException(f"{data_dir} is in use by the running companion")
        params = {
            param.name: None if given.get(param.name) is None else param.type_cast_value(ctx, given[param.name])
            for param in command.params
            if param.name is not None
        }
        assert command.callback is not None
        ctx.invoke(command.callback, **params)
        return 0
