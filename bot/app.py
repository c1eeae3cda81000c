"""The composition root: turns settings into a running companion, one named builder per part.

`build_app` opens the parts in order: the storage, the SQL stores, the memories, the LLM, the background
work, the companion. Each builder puts what it opened on one `AsyncExitStack`; `App.aclose` (or leaving
`async with app`) closes all of it in the reverse order, and a builder that fails closes at once what the
ones before it opened. The platforms run with a built app (`bot/cli/main.py`).
"""

from __future__ import annotations

import asyncio
import weakref
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack, closing
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

from bot.config import ConfigError, DiscordSettings, LLMSettings, Settings, StorageSettings, TelegramSettings
from bot.ordering import TurnOrder
from bot.platforms.outage import HeldMessages
from bot.platforms.pipeline import PlatformContext
from bot.routing import ChosenPersonas, PersonaChoices, Router
from bot.startup import (
    RESTORE_EMPTIED,
    RESTORE_MEMORIES,
    RESTORE_MESSAGES,
    StartupError,
    ensure_writable,
    opening,
)
from core.background.backlog import BacklogAlarm
from core.background.chapter_writer import ChapterWriter
from core.background.checkpoint import CrashPoint, no_crash
from core.background.consolidation.consolidator import Consolidator
from core.background.conversation_summarizer import ConversationSummarizer
from core.background.knowledge_monitor import KnowledgeMonitor
from core.background.lifecycle import MemoryLifecycle
from core.background.memory_reviewer import MemoryReviewer
from core.background.profile_writer import ProfileWriter
from core.background.scheduler import Scheduler
from core.background.tasks import DEFAULT_BACKOFF, BackgroundTasks
from core.checkins import CheckIns
from core.clock import Clock, SystemClock
from core.companion import Companion, UnknownPersonaError
from core.errors import UserFacingError
from core.forgetting import Forgetting
from core.llm.client import LLMClient, ModelSettings, OpenAIClient, UsageSink
from core.llm.embedded import EMBEDDED_MODEL_NAME, LlamaCppClient
from core.memory_editor import MemoryEditor
from core.rate_limit import DailyQuota, RateLimiter
from core.reply.demo_prompt import DemoPromptBuilder
from core.reply.prompt import Budget, PromptBuilder
from core.reply.response_handler import ResponseHandler
from core.types import ROLES, Role
from core.why import Why
from knowledge.conversations.history import ConversationHistory
from knowledge.conversations.message_log import MessageLog
from knowledge.conversations.spool import MessageSpool
from knowledge.conversations.working_memory import WorkingMemory
from knowledge.errors import StorageUnavailableError
from knowledge.forget.fence import ForgetFence
from knowledge.journal.journal import Journal
from knowledge.journal.place_personas import PlacePersonas
from knowledge.journal.user_settings import UserSettings
from knowledge.memory.chroma_store import COLLECTION, ChromaKnowledgeBase, open_chroma_client
from knowledge.memory.decay_pass import DecayPass
from knowledge.memory.scope_ids import ScopeIds
from knowledge.memory.store_guard import MemoryStoreGuard, MemoryStoreMissingError, MessagesMissingError
from knowledge.people.joining import Joiner
from knowledge.people.links import Links
from knowledge.rules.decay import MemoryPolicy, PolicyFor
from knowledge.search.embedding import Embedder, load_embedder
from knowledge.search.index import QueryEncoder
from knowledge.sql.cluster import ClusterLocks, ForgetLedger, LocalForgetLedger, SingleProcess
from knowledge.sql.database import Database
from knowledge.sql.scheduled_passes import ScheduledPasses
from knowledge.sql.scope_versions import ScopeVersions, SnapshotKind
from personas.loader import PERSONA_DIR, PersonaRegistry

# The embedded demo model's replies: a sentence or two (it wanders off after that); its background answers,
# when asked for them (COMPANION_MEMORY_MODE=model), need room for a list of memory operations.
EMBEDDED_REPLY_TOKENS = 48
EMBEDDED_BACKGROUND_TOKENS = 200
# Seconds background jobs get to finish at shutdown; what is left stays pending for the next start, so a
# stop (SIGTERM) returns within a few seconds even while a model hangs.
SHUTDOWN_GRACE = 3.0
EMBEDDED_MODEL_NOTICE = (
    "Using the embedded demo model (SmolLM2-135M, offline, tiny): it runs anywhere but its replies are "
    "simple and it often loses the thread. For real conversations point the companion at an "
    "OpenAI-compatible endpoint: set COMPANION_LLM_BASE_URL (and COMPANION_LLM_API_KEY, COMPANION_CHAT_MODEL)."
)
# Server mode: how often a process looks for background work other processes left (one died mid-job).
WATCH_SECONDS = 5.0
EXPLICIT_MEMORY_NOTICE = (
    'Memory without a model (COMPANION_MEMORY_MODE=explicit): say "remember ..." / "记住…" or '
    '"forget ..." / "忘掉…" and it is done; episodes quote what you said; every message stays searchable.'
)


def startup_notices(settings: Settings) -> list[str]:
    """What a person starting the companion should know about the model and memory they get."""
    notices = [EMBEDDED_MODEL_NOTICE] if settings.llm.uses_embedded_model else []
    if not settings.background_uses_model:
        notices.append(EXPLICIT_MEMORY_NOTICE)
    return notices


async def load_models(app: App) -> None:
    """Load an in-process model before the first message, so a machine it cannot run on is told at once."""
    if isinstance(app.llm, LlamaCppClient):
        await asyncio.to_thread(app.llm.load)


@dataclass(slots=True)
class App:
    """Everything built once: the `Companion`, which the platforms talk to (`platform`), and the services behind
    it, which the maintenance and the operator's command line use directly; `async with app` closes it."""

    settings: Settings
    companion: Companion
    llm: LLMClient
    clock: Clock
    knowledge: ChromaKnowledgeBase
    working_memory: WorkingMemory
    history: ConversationHistory
    journal: Journal
    user_settings: UserSettings
    editor: MemoryEditor
    forgetting: Forgetting
    checkins: CheckIns
    lifecycle: MemoryLifecycle
    links: Links  # which identities are one person
    why: Why  # what each reply's prompt held, from its trace
    policy_for: PolicyFor  # a persona's memory rules
    storage: Storage
    passes: ScheduledPasses
    exit_stack: AsyncExitStack = field(default_factory=AsyncExitStack, repr=False)  # what closes it, last first
    scheduler: Scheduler | None = None
    backlog_alarm: BacklogAlarm = field(init=False)

    def __post_init__(self) -> None:
        self.backlog_alarm = BacklogAlarm(timedelta(minutes=self.settings.memory.backlog_warning_minutes))

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.aclose()

    @property
    def tasks(self) -> BackgroundTasks:
        """The background job runner."""
        return self.lifecycle.tasks

    def turn_order(self) -> TurnOrder:
        """The order of turns per conversation, kept across every process that shares the stores."""
        return TurnOrder(self.storage.cluster)

    def platform(self, platform: Literal["discord", "telegram"]) -> PlatformContext:
        """What a platform adapter is given: the companion, the platform's rules, the turn order, streaming or not."""
        streaming = self._platform_settings(platform).streaming
        order = self.turn_order()
        held = HeldMessages(order)  # through a database outage; what it holds at the stop goes to the spool file
        self.exit_stack.push_async_callback(held.aclose)
        return PlatformContext(self.companion, self.router(platform), order, streaming=streaming, held=held)

    def _platform_settings(self, platform: Literal["discord", "telegram"]) -> DiscordSettings | TelegramSettings:
        return self.settings.discord if platform == "discord" else self.settings.telegram

    def router(self, platform: Literal["discord", "telegram"]) -> Router:
        """The operator's rules for one platform; every persona they name must exist (checked now, not mid-chat)."""
        rules = self._platform_settings(platform)
        try:
            for persona_id in rules.personas.values():
                self.companion.persona(persona_id)
            choices = self.storage.persona_choices(platform, self.settings.storage.data_dir)
        except (UserFacingError, ValueError) as error:
            raise ConfigError(f"[{platform}] {error}") from error
        return Router(rules, choices, self.companion.persona().id)

    async def start(self, *, schedule: bool = True) -> None:
        """Resume background jobs left by the last run and, for long-running processes, start the scheduler.

        A long-running process first summarises the conversations that went quiet while it was down.
        """
        self.companion.store_spooled_messages()  # kept at the last stop before they were stored
        self.tasks.resume()
        await self.lifecycle.prune_finished_work()
        await self.compact_vectors()  # what a forget left for a compaction the last run did not get to
        if self.storage.server_mode:
            self.tasks.watch(WATCH_SECONDS)  # work left by a process that died mid-job
        if schedule:
            await self.lifecycle.summarize_idle()
            await self.lifecycle.plan_chapters()  # the weeks and months that ended while it was down
            await self.lifecycle.plan_consolidation()  # the night missed while it was down
            self.scheduler = self._scheduler()
            # A clean stop summarises the conversations already idle; ones active until just now keep
            # their window, so a quick restart continues them (the idle pass at the next start closes them).
            self.exit_stack.push_async_callback(self.lifecycle.summarize_idle)
            self.exit_stack.callback(self.scheduler.shutdown)
            self.scheduler.start()
            if self.settings.checkins.enabled:
                await self.checkins.plan()

    def _scheduler(self) -> Scheduler:
        """The maintenance jobs and, if they are on, the check-ins' planning pass."""
        scheduler = Scheduler(now=self.clock.now, claim=self.passes.claim)
        scheduler.add_maintenance(
            decay=self.lifecycle.run_decay,
            summarize_idle=self.idle_pass,
            prune=self.prune,
            compact=self.compact_vectors,
            decay_cron=self.settings.memory.decay_cron,
            idle_check=min(self.lifecycle.idle_timeout / 2, timedelta(minutes=5)),
        )
        scheduler.add_profiles(self.lifecycle.write_profiles)
        if self.settings.memory.consolidation:
            scheduler.add_consolidation(self.lifecycle.plan_consolidation, hour=self.settings.memory.consolidation_hour)
        checkins = self.settings.checkins
        if checkins.enabled:
            # at once, then every few minutes: a check-in due at start-up goes out within a minute
            scheduler.add_checkins(self.checkins.plan, every=timedelta(minutes=checkins.plan_every_minutes))
        return scheduler

    async def prune(self) -> int:
        """Every hour: finished jobs, expired dead letters, unanswered forget questions, threads closed a while
        ago and old reply traces go."""
        pruned = await self.lifecycle.prune_finished_work()
        closed = await asyncio.to_thread(self.journal.threads.prune, self.clock.now())
        old = self.clock.now() - timedelta(days=self.settings.web.trace_days)
        traces = await asyncio.to_thread(self.journal.traces.prune, old)
        return pruned + closed + traces + await self.forgetting.prune_questions()

    async def idle_pass(self) -> int:
        """Every few minutes: store messages held while storage failed (a quiet bot has no next turn to do
        it), say whether the background is behind, then close the conversations that went quiet; returns how
        many were closed."""
        self.companion.store_held_messages()  # on the loop, as in a turn: storing a message starts its jobs
        self.backlog_alarm.check(self.journal.jobs.backlog(), self.clock.now())
        return await self.lifecycle.summarize_idle()

    async def compact_vectors(self) -> bool:
        """Rebuild the embedded vector index if deletes left vectors in it; True if it was rebuilt."""
        return await asyncio.to_thread(self.knowledge.compact)

    async def aclose(self) -> None:
        """Close what was opened, last first: the scheduler, held messages, background work (finished within
        a grace period or left pending), the LLM client, the memories, the SQL stores, the storage."""
        await self.exit_stack.aclose()


# Threads for `asyncio.to_thread`: most of a turn's and a job's work there waits (for an embedding lane, a store's
# lock, chromadb), so asyncio's default of cores + 4 (6 here) let six searches waiting for their query's embedding
# hold every thread while the rest of the work queued behind them. Threads are made as needed, up to this.
WORKER_THREADS = 64
_widened: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def widen_default_executor(loop: asyncio.AbstractEventLoop) -> None:
    """Give `loop` a default executor of `WORKER_THREADS` threads (once per loop; `asyncio.run` shuts it down)."""
    if loop not in _widened:
        loop.set_default_executor(ThreadPoolExecutor(WORKER_THREADS, thread_name_prefix="asyncio"))
        _widened.add(loop)


async def build_app(
    settings: Settings,
    *,
    clock: Clock | None = None,
    llm: LLMClient | None = None,
    embedder: Embedder | None = None,
    backoff: tuple[float, ...] = DEFAULT_BACKOFF,
    background: bool = True,
    accept_empty_memory: bool = False,
    crash_point: CrashPoint = no_crash,
) -> App:
    """Open every part and wire them into a ready `App`; tests pass their own clock, LLM, embedder or backoff.

    `background=False` submits no monitor, summarizer or review job, so benchmarks can measure what
    the background costs the reply path. A memory store that went missing is refused (`StartupError`)
    unless `accept_empty_memory`. `crash_point` is told of every point between two writes of a
    background job; tests raise there to leave what a crash would.
    """
    ensure_writable(settings.storage.data_dir)
    widen_default_executor(asyncio.get_running_loop())
    queries = QueryEncoder(embedder or load_embedder(settings.memory.embedder))
    basics = Basics(settings, clock or SystemClock(), PersonaRegistry(settings.own_persona_dir, PERSONA_DIR), queries)
    async with AsyncExitStack() as opened:  # a part that fails closes the parts opened before it
        storage = open_storage(settings.storage, opened)
        stores = open_stores(basics, storage, opened)
        knowledge = open_memories(basics, storage, stores, opened, accept_empty_memory=accept_empty_memory)
        llm = open_llm(basics, stores.journal, opened, given=llm)
        fence = ForgetFence(storage.forgets, storage.cluster)  # a forget wins over work that began before it, anywhere
        tasks = open_tasks(basics, storage, stores, fence, opened, backoff=backoff, crash_point=crash_point)
        services = build_services(basics, stores, knowledge, llm, tasks, fence, background=background)
        # joining two memories moves what one holds, in every store, under the fence that forgets respect
        joiner = opened.enter_context(closing(Joiner(storage.where, knowledge, stores.history, fence)))
        companion = build_companion(basics, stores, knowledge, llm, services, joiner, opened)
        return App(
            settings=settings,
            companion=companion,
            llm=llm,
            clock=basics.clock,
            knowledge=knowledge,
            working_memory=stores.working_memory,
            history=stores.history,
            journal=stores.journal,
            user_settings=stores.user_settings,
            editor=services.editor,
            forgetting=services.forgetting,
            checkins=services.checkins,
            lifecycle=services.lifecycle,
            links=stores.links,
            why=services.why,
            policy_for=basics.policy_for,
            storage=storage,
            passes=stores.passes,
            exit_stack=opened.pop_all(),
        )


@dataclass(frozen=True, slots=True)
class Basics:
    """What every part is built with: the settings, the clock, the personas, one query encoder."""

    settings: Settings
    clock: Clock
    personas: PersonaRegistry
    queries: QueryEncoder  # one embedding per message for memories and history alike

    def policy_for(self, persona_id: str) -> MemoryPolicy:
        """A persona's memory rules."""
        return MemoryPolicy().overridden(self.personas.get(persona_id).memory_rules)


# --- storage ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Storage:
    """Where the SQL stores live, and how this process keeps in step with others that share them."""

    where: Database | Path  # what each store opens (embedded: the SQLite file, a connection per store)
    cluster: ClusterLocks = field(default_factory=SingleProcess)
    forgets: ForgetLedger = field(default_factory=LocalForgetLedger)
    shared: Database | None = None  # server mode: the one PostgreSQL pool every store uses

    @property
    def server_mode(self) -> bool:
        return self.shared is not None

    def versions(self, kind: SnapshotKind) -> ScopeVersions | None:
        """Scope versions for snapshots that other processes' writes must reach (server mode only)."""
        return None if self.shared is None else ScopeVersions(self.shared, kind)

    def persona_choices(self, platform: str, data_dir: Path) -> ChosenPersonas:
        """The `/persona` choices of a platform: a JSON file in the data directory, or the shared database."""
        if self.shared is None:
            return PersonaChoices(data_dir / f"{platform}-personas.json")
        return PlacePersonas(self.shared, platform)


def open_storage(settings: StorageSettings, opened: AsyncExitStack) -> Storage:
    """The embedded SQLite file, or in server mode the PostgreSQL database (migrated) shared by every process."""
    if settings.database_url is None:
        return Storage(settings.data_dir / "companion.sqlite3")
    from knowledge.sql.postgres import PostgresCluster, PostgresDatabase, PostgresForgetLedger

    url = settings.database_url.get_secret_value()
    try:
        database = opened.enter_context(closing(PostgresDatabase(url)))
        cluster = PostgresCluster(url, pool_size=settings.database_turn_connections)
    except StorageUnavailableError as error:
        raise StartupError(f"COMPANION_DATABASE_URL: {error}; start the server or correct the URL") from error
    opened.push_async_callback(cluster.aclose)
    return Storage(database, cluster, PostgresForgetLedger(database), shared=database)


@dataclass(frozen=True, slots=True)
class Stores:
    """What the SQL database holds: conversations, the journal, user settings, the scheduled passes' runs."""

    working_memory: WorkingMemory
    history: ConversationHistory
    journal: Journal
    user_settings: UserSettings
    passes: ScheduledPasses
    links: Links


def open_stores(basics: Basics, storage: Storage, opened: AsyncExitStack) -> Stores:
    """The SQL stores, each on `storage`; a damaged database or a full disk is a `StartupError` saying what to do."""
    settings = basics.settings
    memory = settings.memory
    with opening(settings.storage.data_dir / "companion.sqlite3", if_damaged=RESTORE_MESSAGES):
        working_memory = opened.enter_context(
            closing(
                WorkingMemory(
                    MessageLog(storage.where),
                    window_size=memory.working_memory_size,
                    overflow_batch=min(memory.summary_batch, memory.working_memory_size),
                )
            )
        )
        history = ConversationHistory(
            working_memory.log,
            basics.queries.embedder,
            storage.where,
            queries=basics.queries,
            locks=storage.cluster,
            versions=storage.versions("history"),
        )
        return Stores(
            working_memory=working_memory,
            history=opened.enter_context(closing(history)),
            journal=opened.enter_context(closing(Journal(storage.where))),
            user_settings=opened.enter_context(
                closing(UserSettings(storage.where, default_time_zone=settings.default_time_zone))
            ),
            passes=opened.enter_context(closing(ScheduledPasses(storage.where))),
            links=opened.enter_context(closing(Links(storage.where))),
        )


def open_memories(
    basics: Basics, storage: Storage, stores: Stores, opened: AsyncExitStack, *, accept_empty_memory: bool
) -> ChromaKnowledgeBase:
    """The memories: an embedded chromadb store in the data directory, or a Chroma server; one that went
    missing while the messages stayed is refused (`StartupError`) unless `accept_empty_memory`."""
    settings = basics.settings.storage
    files = settings.data_dir / "chroma"
    embedded = settings.chroma_host is None
    with opening(files / "chroma.sqlite3", if_damaged=RESTORE_MEMORIES):
        client = opened.enter_context(
            closing(open_chroma_client(path=files, host=settings.chroma_host, port=settings.chroma_port))
        )
        # The store that records which collection holds the memories: the data directory's SQLite file, or in
        # server mode the shared database, for the Chroma server (a Chroma server alone records nothing).
        guarded = embedded or storage.server_mode
        guard = MemoryStoreGuard(storage.where, COLLECTION)
        if guarded and not accept_empty_memory:
            where = str(files) if embedded else f"the Chroma server {settings.chroma_host}"
            messages = str(settings.data_dir / "companion.sqlite3") if embedded else "COMPANION_DATABASE_URL"
            _check_memory_store(guard, client, where, messages, messages_held=stores.working_memory.log.any_stored())
        knowledge = ChromaKnowledgeBase(
            client,
            basics.queries.embedder,
            queries=basics.queries,
            now=basics.clock.now,
            policy_for=basics.policy_for,  # a memory's importance at any moment depends on its persona's rules
            # A Chroma server is shared with other bot processes: snapshots, and the list of each scope's memory
            # ids, only where the SQL store that keeps versions and the list is shared with them too.
            cache_scopes=guarded,
            versions=storage.versions("memories"),
            files=files if embedded else None,
            ids=opened.enter_context(closing(ScopeIds(storage.where))) if guarded else None,
        )
        if guarded:
            guard.record(client)
    return knowledge


def _check_memory_store(
    guard: MemoryStoreGuard, client: Any, where: str, messages: str, *, messages_held: bool
) -> None:
    try:
        guard.check(client, messages_held=messages_held)
    except MemoryStoreMissingError as error:
        raise StartupError(f"{where}: {error}; refusing to start without the memories: {RESTORE_MEMORIES}") from error
    except MessagesMissingError as error:
        raise StartupError(f"{messages}: {error}; refusing to start without them: {RESTORE_EMPTIED}") from error


# --- the LLM ---------------------------------------------------------------------------------------------


def open_llm(basics: Basics, journal: Journal, opened: AsyncExitStack, *, given: LLMClient | None) -> LLMClient:
    """The LLM client given, or the configured one with every call's tokens recorded in the journal."""

    def record_usage(role: Role, model: str, prompt_tokens: int, completion_tokens: int) -> None:
        journal.usage.record(role, model, prompt_tokens, completion_tokens, at=basics.clock.now())

    llm = given or build_llm(basics.settings.llm, usage=record_usage)
    close = getattr(llm, "close", None)
    if close is not None:
        opened.push_async_callback(close)
    return llm


def model_settings(settings: LLMSettings) -> dict[Role, ModelSettings]:
    """Per-role model settings; background roles fall back to the chat model and run cooler."""
    if settings.uses_embedded_model:
        names = dict.fromkeys(ROLES, EMBEDDED_MODEL_NAME)
    else:
        names = {
            "chat": settings.chat_model,
            "monitor": settings.monitor_model or settings.chat_model,
            "summarizer": settings.summarizer_model or settings.chat_model,
            "reviewer": settings.reviewer_model or settings.chat_model,
        }
    window = settings.effective_context_window

    def reply_tokens(role: Role) -> int:
        if not settings.uses_embedded_model:
            return settings.reply_tokens
        return min(settings.reply_tokens, EMBEDDED_REPLY_TOKENS if role == "chat" else EMBEDDED_BACKGROUND_TOKENS)

    return {
        role: ModelSettings(
            model=names[role],
            temperature=0.7 if role == "chat" else 0.2,
            max_tokens=reply_tokens(role),
            context_window=window,
            vision=settings.vision and role == "chat" and not settings.uses_embedded_model,
            tools=settings.tools and role == "chat" and not settings.uses_embedded_model,
        )
        for role in ROLES
    }


def prompt_builder(llm: LLMClient) -> PromptBuilder:
    """The full persona prompt for a real model; a few lines the tiny embedded demo model can follow."""
    chat = llm.settings("chat")
    budget = Budget(chat.context_window, chat.max_tokens)
    return DemoPromptBuilder(budget) if isinstance(llm, LlamaCppClient) else PromptBuilder(budget)


def build_llm(settings: LLMSettings, usage: UsageSink | None = None) -> LLMClient:
    """The configured endpoint, or the embedded model when none is set; `usage` hears of every call's tokens."""
    models = model_settings(settings)
    if settings.uses_embedded_model:
        return LlamaCppClient(models, usage=usage)
    return OpenAIClient(
        base_url=settings.base_url,
        api_key=settings.api_key.get_secret_value() if settings.api_key else None,
        models=models,
        timeout=settings.timeout,
        max_retries=settings.max_retries,
        usage=usage,
    )


# --- the background and the companion -------------------------------------------------------------------


def open_tasks(
    basics: Basics,
    storage: Storage,
    stores: Stores,
    fence: ForgetFence,
    opened: AsyncExitStack,
    *,
    backoff: tuple[float, ...],
    crash_point: CrashPoint,
) -> BackgroundTasks:
    """The background job queue; at shutdown its running jobs get a grace period, the rest stays pending."""
    tasks = BackgroundTasks(
        stores.journal.jobs,
        basics.clock,
        backoff=backoff,
        concurrency=basics.settings.background_concurrency,
        fence=fence,
        crash_point=crash_point,
        cluster=storage.cluster,
    )
    opened.push_async_callback(tasks.aclose, grace=SHUTDOWN_GRACE)
    return tasks


def build_lifecycle(
    basics: Basics,
    stores: Stores,
    knowledge: ChromaKnowledgeBase,
    llm: LLMClient,
    tasks: BackgroundTasks,
    forgetting: Forgetting,
    checkins: CheckIns,
    *,
    enabled: bool,
) -> MemoryLifecycle:
    """The background roles (monitor, summarizer, reviewer, decay) and the events that give them work."""
    settings, clock, policy_for = basics.settings, basics.clock, basics.policy_for
    use_model = settings.background_uses_model
    journal = stores.journal
    monitor = KnowledgeMonitor(
        llm,
        knowledge,
        journal.changes,
        journal.jobs,
        clock,
        policy_for,
        forgetting,
        max_ops=settings.memory.monitor_max_ops,
        use_model=use_model,
        user_settings=stores.user_settings,
        threads=journal.threads,
    )
    return MemoryLifecycle(
        tasks=tasks,
        monitor=monitor,
        summarizer=ConversationSummarizer(
            llm,
            knowledge,
            stores.working_memory,
            use_model=use_model,
            min_user_messages=settings.memory.episode_min_user_messages,
        ),
        chapters=ChapterWriter(
            llm, knowledge, stores.working_memory.log, stores.user_settings.time_zone, use_model=use_model
        ),
        reviewer=MemoryReviewer(llm, knowledge, journal.changes, clock, policy_for, use_model=use_model),
        decay_pass=DecayPass(knowledge, journal.changes, clock.now),
        working_memory=stores.working_memory,
        history=stores.history,
        persona=basics.personas.get,
        clock=clock,
        idle_timeout=timedelta(minutes=settings.memory.idle_timeout_minutes),
        dead_letter_retention=timedelta(days=settings.memory.dead_letter_days),
        enabled=enabled,
        keep_open=checkins.awaiting_answer,
        profile_writer=ProfileWriter(llm, knowledge, journal.profiles, clock, policy_for, use_model=use_model),
        consolidator=None
        if not settings.memory.consolidation
        else Consolidator(
            llm,
            knowledge,
            journal.changes,
            journal.jobs,
            stores.working_memory.log,
            clock,
            last_pass=stores.passes.last,
            claim=stores.passes.claim,
            hour=settings.memory.consolidation_hour,
            use_model=use_model,
        ),
        spare_small_talk=use_model and settings.memory.spare_small_talk,  # without a model nothing is asked anyway
        spared=lambda: journal.usage.spared("monitor", at=clock.now()),
    )


@dataclass(frozen=True, slots=True)
class Services:
    """What the companion remembers and forgets with; the maintenance and the operator's commands use them too."""

    editor: MemoryEditor
    forgetting: Forgetting
    checkins: CheckIns
    lifecycle: MemoryLifecycle
    why: Why


def build_services(
    basics: Basics,
    stores: Stores,
    knowledge: ChromaKnowledgeBase,
    llm: LLMClient,
    tasks: BackgroundTasks,
    fence: ForgetFence,
    *,
    background: bool,
) -> Services:
    """Editing, forgetting, check-ins, the background roles and the replies' traces read back, on the stores and
    the memories."""
    settings, clock = basics.settings, basics.clock
    editor = MemoryEditor(knowledge, stores.journal.changes, clock)
    forgetting = Forgetting(
        knowledge=knowledge,
        history=stores.history,
        journal=stores.journal,
        editor=editor,
        user_settings=stores.user_settings,
        fence=fence,
        now=clock.now,
        files=settings.storage.data_dir,
        members=stores.links.members,  # the spool keeps a linked person's words under the identity that said them
    )
    checkins = CheckIns(
        log=stores.journal.checkins,
        user_settings=stores.user_settings,
        knowledge=knowledge,
        working_memory=stores.working_memory,
        llm=llm,
        persona=basics.personas.get,
        tasks=tasks,
        clock=clock,
        policy=settings.checkins.policy,
        defaults=settings.checkins.switches,
        memory_policy=basics.policy_for,
        members=stores.links.members,  # a linked person's check-ins go to the identity they last wrote from
        threads=stores.journal.threads,
    )
    lifecycle = build_lifecycle(basics, stores, knowledge, llm, tasks, forgetting, checkins, enabled=background)
    why = Why(stores.journal.traces, knowledge, stores.working_memory.log)
    return Services(editor, forgetting, checkins, lifecycle, why)


def build_companion(
    basics: Basics,
    stores: Stores,
    knowledge: ChromaKnowledgeBase,
    llm: LLMClient,
    services: Services,
    joiner: Joiner,
    opened: AsyncExitStack,
) -> Companion:
    """The companion, the facade the platforms talk to; fails at start-up, not at the first message, if the
    default persona or its memory rules are broken."""
    settings, clock = basics.settings, basics.clock
    responses = ResponseHandler(
        working_memory=stores.working_memory,
        knowledge=knowledge,
        history=stores.history,
        llm=llm,
        prompt_builder=prompt_builder(llm),
        clock=clock,
        retrieval_limit=settings.memory.retrieval_limit,
        policy_for=basics.policy_for,
        image_limits=settings.image_limits,
        profiles=stores.journal.profiles,
        threads=stores.journal.threads,
        traces=stores.journal.traces,
        idle_timeout=timedelta(minutes=settings.memory.idle_timeout_minutes),
    )
    companion = Companion(
        personas=basics.personas,
        knowledge=knowledge,
        history=stores.history,
        responses=responses,
        lifecycle=services.lifecycle,
        journal=stores.journal,
        user_settings=stores.user_settings,
        editor=services.editor,
        forgetting=services.forgetting,
        clock=clock,
        default_persona=settings.default_persona,
        rate_limiter=RateLimiter(clock, settings.rate_limit_per_minute),
        quota=DailyQuota(
            stores.journal.traces.tokens_since,
            settings.usage.daily_tokens,
            settings.usage.exempt,
            persona_tokens=lambda persona_id: basics.personas.get(persona_id).daily_tokens,
            members=stores.links.members,  # an exempt account stays exempt once linked into a person
        ),
        checkins=services.checkins,
        links=stores.links,
        joiner=joiner,
        why=services.why,
        spool=MessageSpool(settings.storage.data_dir),
    )
    # At shutdown, messages held while storage failed are stored if it works again, else dropped with an error.
    opened.callback(companion.store_held_messages, last_chance=True)
    try:
        basics.policy_for(companion.persona().id)
    except UnknownPersonaError as error:
        files = ", ".join(map(str, basics.personas.files(settings.default_persona)))
        raise StartupError(
            f"{error}{f' ({files})' if files else ''}; fix the file (`companion persona validate` says what is "
            "wrong) or choose another COMPANION_DEFAULT_PERSONA"
        ) from error
    return companion
