"""`companion doctor`: one line per check of the installation and settings, each failure with its fix.

Nothing is changed and the data directory is not taken: a bot may be running on it. Every check
catches its own failures, so one broken part is one line, never a traceback; the exit status is 1
when any check failed.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import secrets
import shutil
import stat
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click
import tzlocal
from pydantic import SecretStr

from bot.cli.data_dir_lock import DataDirLock
from bot.config import Settings, StorageSettings, load_settings, renamed_settings
from core.errors import CompanionError

if TYPE_CHECKING:
    from core.llm.embedded import LlamaCppClient

DISCORD_API = "https://discord.com/api/v10"
TIMEOUT = 10.0  # seconds for each network check
MIN_FREE_BYTES = 500 * 1024 * 1024  # below this the stores soon refuse writes
TELEGRAM_TOKEN = re.compile(r"^\d{5,}:[A-Za-z0-9_-]{30,}$")
DISCORD_TOKEN = re.compile(r"^[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{20,}$")
# The packages whose version matters most, shown in the versions line.
SHOWN_PACKAGES = ("chromadb", "openai", "python-telegram-bot", "discord.py", "xllamacpp")


@dataclass(frozen=True, slots=True)
class Finding:
    """What one check found: whether it passed, and one line saying what (and, if not, how to fix it)."""

    check: str
    ok: bool
    text: str

    def __str__(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'}  {self.check}: {self.text}"


def passed(check: str, text: str) -> Finding:
    return Finding(check, True, text)


def failed(check: str, text: str) -> Finding:
    return Finding(check, False, text)


# -- the checks ----------------------------------------------------------------------------------


def check_versions(settings: Settings, version_of: Callable[[str], str] = importlib.metadata.version) -> Finding:
    """Python, and every package the installed companion requires (with the extras its settings need);
    `version_of` tells a package's installed version (tests give their own)."""
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    python = sys.version.split()[0]
    supported = SpecifierSet(importlib.metadata.metadata("companion")["Requires-Python"] or "")
    if not supported.contains(python):
        return failed("versions", f"Python {python} is not supported ({supported}); install a supported Python")

    extras = {"embedded"} if settings.llm.uses_embedded_model else set()
    extras |= {"server"} if settings.storage.server_mode else set()
    problems = []
    for line in importlib.metadata.requires("companion") or []:
        requirement = Requirement(line)
        needed = any(
            requirement.marker is None or requirement.marker.evaluate({"extra": extra}) for extra in extras | {""}
        )
        if not needed or requirement.name == "companion":
            continue
        try:
            version = version_of(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            problems.append(f"{requirement.name} is missing")
            continue
        if not requirement.specifier.contains(version, prereleases=True):
            problems.append(f"{requirement.name} {version} is installed, {requirement.specifier} is needed")
    if problems:
        return failed("versions", "; ".join(problems) + "; run `make install` (pip install -e '.[embedded,server]')")
    shown = ", ".join(f"{name} {_version(name)}" for name in SHOWN_PACKAGES if _version(name))
    return passed("versions", f"Python {python}, companion {_version('companion')}, {shown}")


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_names() -> Finding:
    """Settings set under the names of earlier releases: they still work, each said with the name to use."""
    renamed = renamed_settings()
    return passed("setting names", "; ".join(renamed) if renamed else "all current")


def check_data_dir(settings: Settings) -> Finding:
    """The data directory: writable, its owner's alone, and whether a bot holds it now."""
    directory = settings.storage.data_dir
    if not directory.exists():
        parent = next(parent for parent in directory.parents if parent.exists())
        if not os.access(parent, os.W_OK):
            return failed("data directory", f"{directory} cannot be created ({parent} is not writable); {_OTHER_DIR}")
        return passed("data directory", f"{directory} will be created at the first start (owner-only)")
    if not directory.is_dir():
        return failed("data directory", f"{directory} is not a directory; {_OTHER_DIR}")
    if not os.access(directory, os.W_OK | os.X_OK):
        return failed("data directory", f"{directory} is not writable for this user; {_OTHER_DIR}")
    mode = stat.S_IMODE(directory.stat().st_mode)
    if mode & 0o077:
        return failed(
            "data directory",
            f"{directory} is open to other users (mode {mode:o}): it holds every conversation; chmod 700 {directory}",
        )
    holder = DataDirLock(directory).holder_if_held()
    held = "free" if holder is None else f"held by {holder}: commands beside it are carried out by that bot"
    return passed("data directory", f"{directory}, writable, owner-only; {held}")


_OTHER_DIR = "set COMPANION_DATA_DIR to a directory of your own"


def check_model(settings: Settings, embedded: LlamaCppClient | None = None) -> Finding:
    """The endpoint (reachable, its models there, one tiny completion) or, without one, that the embedded
    model loads on this CPU (`embedded`: the client to load, by default the one the settings make)."""
    if not settings.llm.uses_embedded_model:
        return _check_endpoint(settings)
    from bot.app import build_llm
    from core.llm.embedded import EmbeddedModelUnavailable, LlamaCppClient

    llm = embedded or build_llm(settings.llm)
    assert isinstance(llm, LlamaCppClient)
    try:
        llm.load()
    except EmbeddedModelUnavailable as error:
        return failed("model", str(error))
    return passed("model", "no COMPANION_LLM_BASE_URL: the embedded demo model loads on this CPU")


def _check_endpoint(settings: Settings) -> Finding:
    import openai

    from bot.app import model_settings

    url = settings.llm.base_url
    key = settings.llm.api_key.get_secret_value() if settings.llm.api_key else "not-needed"
    client = openai.OpenAI(base_url=url, api_key=key, timeout=TIMEOUT, max_retries=0)
    fix = "start the server or correct COMPANION_LLM_BASE_URL"
    wanted = sorted({chosen.model for chosen in model_settings(settings.llm).values()})
    try:
        available = {model.id for model in client.models.list()}
    except openai.APIConnectionError as error:
        return failed("model", f"the endpoint {url} is not reachable ({_cause(error)}); {fix}")
    except openai.AuthenticationError:
        return failed(
            "model", f"the endpoint {url} refused the key (HTTP 401); set COMPANION_LLM_API_KEY to a valid key"
        )
    except openai.APIStatusError as error:  # some servers do not list models: the completion below still tells
        available = set(wanted) if error.status_code == 404 else set()
        if not available:
            return failed("model", f"the endpoint {url} answered HTTP {error.status_code}; {fix}")
    missing = [model for model in wanted if model not in available]
    if missing:
        return failed(
            "model",
            f"the endpoint {url} has no model {', '.join(missing)}; set COMPANION_CHAT_MODEL (and the other "
            f"COMPANION_*_MODEL) to one it has: {', '.join(sorted(available)[:8]) or 'none listed'}",
        )
    chat = model_settings(settings.llm)["chat"].model
    try:
        client.chat.completions.create(
            model=chat, messages=[{"role": "user", "content": "Say OK."}], max_tokens=5, temperature=0
        )
    except openai.APITimeoutError:
        return failed("model", f"{chat} at {url} did not answer a tiny completion within {TIMEOUT:g} s; {fix}")
    except openai.APIError as error:
        return failed("model", f"{chat} at {url} failed a tiny completion ({_cause(error)}); {fix}")
    return passed("model", f"{url} answers, with {', '.join(wanted)}")


def _cause(error: BaseException) -> str:
    status = getattr(error, "status_code", None)
    if status:
        return f"HTTP {status}"
    cause = error.__cause__ or error
    return f"{type(cause).__name__}: {cause}".rstrip(": ")


def check_tokens(settings: Settings, *, online: bool, discord_api: str = DISCORD_API) -> list[Finding]:
    """The platform tokens: present and well-formed; `online`: accepted by Telegram and Discord."""

    def telegram(token: str) -> Finding:
        return _telegram_accepts(settings, token)

    def discord(token: str) -> Finding:
        return _discord_accepts(discord_api, token)

    return [
        _token_finding("telegram", settings.telegram.token, TELEGRAM_TOKEN, telegram if online else None),
        _token_finding("discord", settings.discord.token, DISCORD_TOKEN, discord if online else None),
    ]


def _token_finding(
    check: str, token: SecretStr | None, shape: re.Pattern[str], accepted: Callable[[str], Finding] | None
) -> Finding:
    name = f"COMPANION_{check.upper()}_TOKEN"
    if token is None:
        return passed(check, f"{name} is not set (needed by `companion run` for that platform)")
    if not shape.match(token.get_secret_value()):
        return failed(check, f"{name} is not shaped like a bot token; copy it again from {_ISSUER[name]}")
    return passed(check, f"{name} is set and well-formed") if accepted is None else accepted(token.get_secret_value())


_ISSUER = {
    "COMPANION_TELEGRAM_TOKEN": "@BotFather",
    "COMPANION_DISCORD_TOKEN": "the Discord developer portal (Bot, Reset Token)",
}


def _telegram_accepts(settings: Settings, token: str) -> Finding:
    import httpx

    base_url = settings.telegram.base_url
    try:
        answer = httpx.post(f"{base_url.rstrip('/')}/bot{token}/getMe", timeout=TIMEOUT)
    except httpx.HTTPError as error:
        return failed("telegram", f"{base_url} is not reachable ({type(error).__name__})")
    if answer.status_code == 200 and answer.json().get("ok"):
        bot = answer.json()["result"].get("username")
        return passed("telegram", f"COMPANION_TELEGRAM_TOKEN is accepted: the bot is @{bot}")
    return failed(
        "telegram", f"Telegram refused COMPANION_TELEGRAM_TOKEN (HTTP {answer.status_code}); {_NEW_TOKEN['telegram']}"
    )


def _discord_accepts(api: str, token: str) -> Finding:
    import httpx

    try:
        answer = httpx.get(f"{api.rstrip('/')}/users/@me", headers={"Authorization": f"Bot {token}"}, timeout=TIMEOUT)
    except httpx.HTTPError as error:
        return failed("discord", f"{api} is not reachable ({type(error).__name__})")
    if answer.status_code == 200:
        return passed("discord", f"COMPANION_DISCORD_TOKEN is accepted: the bot is {answer.json().get('username')}")
    return failed(
        "discord", f"Discord refused COMPANION_DISCORD_TOKEN (HTTP {answer.status_code}); {_NEW_TOKEN['discord']}"
    )


_NEW_TOKEN = {
    "telegram": "ask @BotFather for the token again (/token) and set COMPANION_TELEGRAM_TOKEN",
    "discord": "reset the token in the Discord developer portal and set COMPANION_DISCORD_TOKEN",
}


def check_server_mode(settings: Settings) -> list[Finding]:
    """Server mode: PostgreSQL reachable with every migration applied, and the Chroma server reachable."""
    storage = settings.storage
    if storage.database_url is None:
        return [passed("server mode", "off: SQLite and chromadb in the data directory")]
    return [_check_postgres(storage.database_url.get_secret_value()), _check_chroma(storage)]


def _check_postgres(url: str) -> Finding:
    try:
        import psycopg

        from knowledge.sql.postgres import pending_migrations
    except ImportError:
        return failed("postgresql", "server mode needs the server extra: pip install -e '.[server]'")
    try:
        psycopg.connect(url, connect_timeout=int(TIMEOUT)).close()
        pending = pending_migrations(url)
    except Exception as error:  # noqa: BLE001 - psycopg's and yoyo's errors alike: the server is what to look at
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return failed("postgresql", f"COMPANION_DATABASE_URL cannot be used ({first}); start the server or fix the URL")
    if pending:
        return failed(
            "postgresql",
            f"{len(pending)} migrations are not applied ({', '.join(pending)}); `companion run` applies them at start",
        )
    return passed("postgresql", "reachable, every migration applied")


def _check_chroma(settings: StorageSettings) -> Finding:
    from knowledge.memory.chroma_store import COLLECTION, open_chroma_client

    where = f"{settings.chroma_host}:{settings.chroma_port}"
    try:
        client = open_chroma_client(
            path=settings.data_dir / "chroma", host=settings.chroma_host, port=settings.chroma_port
        )
        client.heartbeat()
        names = [getattr(collection, "name", collection) for collection in client.list_collections()]
    except Exception as error:  # noqa: BLE001 - chromadb raises plain exceptions for a refused connection
        return failed(
            "chroma", f"the Chroma server {where} is not reachable ({type(error).__name__}); start `chroma run`"
        )
    store = "holds the memories" if COLLECTION in names else "has no memories yet (the first start creates them)"
    return passed("chroma", f"the Chroma server {where} is reachable and {store}")


def check_time_zone(settings: Settings, machine_zone: Callable[[], str | None] = tzlocal.get_localzone_name) -> Finding:
    """The users' default time zone: COMPANION_TIMEZONE, or this machine's (`machine_zone`), which must have
    an IANA name."""
    if settings.timezone is not None:
        return passed("time zone", f"{settings.timezone} (COMPANION_TIMEZONE)")
    try:
        name = machine_zone()
    except (ValueError, OSError, LookupError) as error:  # tzlocal's errors for an unreadable or unknown zone
        name, why = None, str(error).splitlines()[0]
    else:
        why = "it has no IANA name"
    if name is None:
        return failed("time zone", f"this machine's time zone is unusable ({why}); set COMPANION_TIMEZONE=Area/City")
    return passed("time zone", f"{name} (this machine's; COMPANION_TIMEZONE chooses another)")


def check_personas(settings: Settings) -> Finding:
    """Every persona file (yours and the bundled ones) valid, the default persona among them."""
    from bot.cli.persona import every_persona
    from personas.loader import PERSONA_DIR, PersonaError, PersonaRegistry

    registry = PersonaRegistry(settings.own_persona_dir, PERSONA_DIR)
    broken = [
        f"{path}: {checked}" if path else str(checked)
        for _, path, checked in every_persona(registry)
        if isinstance(checked, PersonaError)
    ]
    if broken:
        return failed("personas", "; ".join(broken) + "; fix the file (`companion persona validate FILE`)")
    if settings.default_persona not in registry.ids():
        return failed(
            "personas",
            f"the default persona {settings.default_persona!r} has no file; set COMPANION_DEFAULT_PERSONA to one of "
            + ", ".join(registry.ids()),
        )
    return passed("personas", f"{len(registry.ids())} valid: {', '.join(registry.ids())}")


def check_disk(settings: Settings, free: Callable[[Path], int] | None = None) -> Finding:
    """Free space where the data directory is (`free`: bytes free at a path; tests give their own)."""
    data_dir = settings.storage.data_dir
    where = next(path for path in (data_dir, *data_dir.parents) if path.exists())
    available = (free or (lambda path: shutil.disk_usage(path).free))(where)
    megabytes = available // (1024 * 1024)
    if available < MIN_FREE_BYTES:
        return failed("disk", f"{megabytes:,} MB free at {where}; free at least {MIN_FREE_BYTES // 2**20:,} MB there")
    return passed("disk", f"{megabytes:,} MB free at {where}")


def check_privacy(settings: Settings) -> Finding:
    """What `privacy-check` would report about the data directory: files others can read, rows it cannot
    read (a forget could not be proven there), vectors of deleted memories not yet rebuilt away."""
    from knowledge.forget.privacy_scan import scan_directory
    from knowledge.memory.chroma_erasure import COMPACTION_DUE

    directory = settings.storage.data_dir
    if not directory.is_dir():
        return passed("privacy", "nothing stored yet")
    report = scan_directory(directory, f"doctor-{secrets.token_hex(8)}")  # a text found nowhere: only the scan
    open_files = [path for path in report.scanned if stat.S_IMODE(path.stat().st_mode) & 0o077]
    problems = []
    if open_files:
        names = ", ".join(str(path.relative_to(directory)) for path in open_files[:3])
        problems.append(f"{len(open_files)} files others may read ({names}): chmod -R go= {directory}")
    if report.unreadable:
        problems.append(f"rows it cannot read in {', '.join(report.unreadable)}: a forget there cannot be proven")
    held = DataDirLock(directory).holder_if_held() is not None
    if (directory / "chroma" / COMPACTION_DUE).exists() and not held:
        problems.append("the vector index keeps vectors of deleted memories: run `companion maintenance`")
    if problems:
        return failed("privacy", "; ".join(problems))
    return passed("privacy", f"{len(report.scanned)} files scanned, all private and readable")


def findings(
    settings: Settings, *, online: bool, discord_api: str = DISCORD_API, debug: bool = False
) -> Iterator[Finding]:
    """Every check's finding, in order; a check that crashes is a failed finding naming the error (`debug`:
    its traceback instead)."""
    checks: list[tuple[str, Callable[[], Finding | list[Finding]]]] = [
        ("versions", lambda: check_versions(settings)),
        ("setting names", check_names),
        ("data directory", lambda: check_data_dir(settings)),
        ("model", lambda: check_model(settings)),
        ("tokens", lambda: check_tokens(settings, online=online, discord_api=discord_api)),
        ("server mode", lambda: check_server_mode(settings)),
        ("time zone", lambda: check_time_zone(settings)),
        ("personas", lambda: check_personas(settings)),
        ("disk", lambda: check_disk(settings)),
        ("privacy", lambda: check_privacy(settings)),
    ]
    for name, check in checks:
        try:
            found = check()
        except Exception as error:  # a check that breaks is one failed line, not a traceback
            if debug:
                raise
            found = failed(
                name,
                f"the check itself failed ({type(error).__name__}: {error}); `companion --debug doctor` shows where",
            )
        yield from found if isinstance(found, list) else [found]


@click.command()
@click.option("--online", is_flag=True, help="Also ask Telegram and Discord whether they accept the tokens.")
@click.option("--discord-api", default=DISCORD_API, show_default=True, hidden=True, help="Discord's API base URL.")
@click.pass_context
def doctor(ctx: click.Context, online: bool, discord_api: str) -> None:
    """Check the installation and the settings: one line per check, each failure with its fix; exit 1 if any failed."""
    try:
        settings = load_settings(data_dir=ctx.obj.get("data_dir"))
    except CompanionError as error:
        click.echo(str(failed("settings", f"{error}; fix the variable or companion.toml")))
        raise SystemExit(1) from None
    ok = True
    for finding in findings(settings, online=online, discord_api=discord_api, debug=bool(ctx.obj.get("debug"))):
        click.echo(str(finding))
        ok = ok and finding.ok
    if not ok:
        raise SystemExit(1)
