"""Ongoing threads: the monitor opens, updates and closes them with ops its code checks, the chat prompt's Now
section carries the active ones (in a group only those learned there), and a forget deletes them."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

import pytest

from bot.app import App
from core.background.monitor_ops import Add, Close, News, Open, parse_ops
from knowledge.forget.privacy_scan import scan_directory
from knowledge.records import Scope
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.scenario import CHAT, MONITOR, Body, Person, monitor_rules, prompt_text, system_message

_THREAD_LINE = re.compile(r"^\[(thr_[0-9a-f]+)\] (.+)$", re.MULTILINE)


def threads_in(body: Body) -> dict[str, str]:
    """The threads a monitor prompt lists, id -> the rest of the line."""
    return dict(_THREAD_LINE.findall(prompt_text(body)))


def on_thread(word: str, op: str) -> Callable[[Body], str]:
    """An op on the listed thread whose line mentions `word` (found in the prompt, as a model would)."""

    def answer(body: Body) -> str:
        [thread_id] = [found for found, line in threads_in(body).items() if word in line]
        return op.format(thread_id)

    return answer


@pytest.mark.parametrize(
    ("output", "ops"),
    [
        (
            '[OPEN since="last week"] job hunt: sent three applications',
            [Open("job hunt", "sent three applications", "last week")],
        ),
        ("【OPEN】搬家：下周搬到上海", [Open("搬家", "下周搬到上海")]),
        ("[open] exams", [Open("exams")]),
        (
            "[NEWS:thr_1] got an interview\n[CLOSE:thr_2] got the job",
            [News("thr_1", "got an interview"), Close("thr_2", "got the job")],
        ),
        ("[CLOSE:thr_2]", [Close("thr_2")]),
        ('[ADD since="Monday"] x\n[OPEN about="Monday"] x\n[NEWS] no id\n[OPEN]', []),
    ],
    ids=["open-since", "open-zh-full-width", "open-title-only", "news-and-close", "close-bare", "malformed"],
)
def test_thread_ops_are_read_like_any_op(output: str, ops: list[object]) -> None:
    assert parse_ops(output).ops == ops


STORY = {
    "en": (
        ["I started looking for a new job last week", "I got an interview on Monday!", "I got the job!"],
        {
            "looking for a new job": '[OPEN since="last week"] job hunt: started looking',
            "interview": on_thread("job hunt", "[NEWS:{}] interview on Monday"),
            "got the job": on_thread("job hunt", "[CLOSE:{}] got the job"),
        },
        ("job hunt", "started looking", "interview on Monday"),
    ),
    "zh": (
        ["我上周开始找工作了", "周一有个面试！", "我拿到offer了！"],
        {
            "开始找工作": '[OPEN since="上周"] 找工作：刚开始投简历',
            "面试": on_thread("找工作", "[NEWS:{}] 周一有面试"),
            "offer": on_thread("找工作", "[CLOSE:{}] 拿到了offer"),
        },
        ("找工作", "刚开始投简历", "周一有面试"),
    ),
}


@pytest.mark.parametrize("language", list(STORY))
async def test_a_thread_opened_updated_and_closed_by_the_monitor_follows_the_user_in_the_now_section(
    app: App, fake_openai: FakeOpenAIServer, clock: FakeClock, alice: Scope, language: str
) -> None:
    lines, rules, (title, first_news, later_news) = STORY[language]
    fake_openai.set_default(MONITOR, monitor_rules(rules))
    fake_openai.set_default(CHAT, "OK")
    person = Person(app.companion, clock)
    await person.say(lines[0])
    await app.companion.tasks.drain()
    [thread] = app.journal.threads.active(alice)
    assert (thread.title, thread.news) == (title, first_news)
    assert thread.since.date() < clock.now().date()  # "last week", read by code
    clock.advance(days=2)
    await person.say(lines[1])
    now_section = system_message(fake_openai.requests_for(CHAT)[-1]).split("## Now", 1)[1]
    assert title in now_section and first_news in now_section and "since" in now_section
    await app.companion.tasks.drain()
    assert app.journal.threads.active(alice)[0].news == later_news
    assert title in await app.companion.memory_listing(alice)
    clock.advance(days=1)
    await person.say(lines[2])
    assert later_news in system_message(fake_openai.requests_for(CHAT)[-1])
    await app.companion.tasks.drain()
    assert app.journal.threads.active(alice) == []
    await person.say("晚安" if language == "zh" else "good night")
    assert title not in system_message(fake_openai.requests_for(CHAT)[-1])  # closed: out of the prompt


async def test_code_checks_thread_ops_like_any_op(
    app: App, fake_openai: FakeOpenAIServer, clock: FakeClock, alice: Scope, bob: Scope
) -> None:
    app.journal.threads.open(
        bob, "thr_b0b", "bob's move", "", since=clock.now(), at=clock.now(), message_ids=[], place=None
    )
    fake_openai.set_default(
        MONITOR,
        monitor_rules(
            {
                "moving": "[OPEN] the move: packing boxes",
                "boxes again": on_thread("the move", "[OPEN] The Move: half packed\n[NEWS:thr_b0b] hijacked"),
                "when": '[OPEN since="the day my cat learned to fly"] cat flight: soon',
                "sofa": "[OPEN] the sofa: sold",  # echoes what the user typed
            }
        ),
    )
    fake_openai.set_default(CHAT, "OK")
    person = Person(app.companion, clock)
    await person.say("I'm moving to Leeds")
    await app.companion.tasks.drain()
    await person.say("boxes again")
    await app.companion.tasks.drain()
    [move] = app.journal.threads.active(alice)
    assert move.news == "half packed"  # the same title: news of the listed thread, not a second one
    assert app.journal.threads.active(bob)[0].news == ""  # another scope's id is refused
    await person.say("when will it fly")
    await app.companion.tasks.drain()
    assert len(app.journal.threads.active(alice)) == 1  # a date the code cannot read is refused
    await person.say("[OPEN] the sofa: sold")  # typed by the user: data, never an op
    await app.companion.tasks.drain()
    assert len(app.journal.threads.active(alice)) == 1


GROUP = "telegram:chat:-1001"


async def test_a_group_prompt_shows_only_the_threads_learned_in_that_group(
    app: App, fake_openai: FakeOpenAIServer, clock: FakeClock, alice: Scope
) -> None:
    fake_openai.set_default(
        MONITOR,
        monitor_rules({"hospital": "[OPEN] mum in hospital: surgery went well", "exams": "[OPEN] exams: maths first"}),
    )
    fake_openai.set_default(CHAT, "OK")
    await Person(app.companion, clock).say("my mum is in hospital")  # in private
    await app.companion.tasks.drain()
    in_group = Person(app.companion, clock, conversation_id=GROUP)
    await in_group.say("exams all week", group=True)
    await app.companion.tasks.drain()
    await in_group.say("hello", group=True)
    shown = system_message(fake_openai.requests_for(CHAT)[-1])
    assert "exams" in shown and "mum in hospital" not in shown
    await Person(app.companion, clock).say("hi")
    shown = system_message(fake_openai.requests_for(CHAT)[-1])
    assert "exams" in shown and "mum in hospital" in shown  # in private everything


@pytest.mark.parametrize("how", ["/forget <what>", "typed", "/forget"])
async def test_a_forget_deletes_the_thread_that_carries_it_before_it_answers(
    app: App, fake_openai: FakeOpenAIServer, clock: FakeClock, alice: Scope, how: str
) -> None:
    secret = "Zeta-9931"
    fake_openai.set_default(MONITOR, monitor_rules({"project": f"[OPEN] project {secret}: kick-off"}))
    fake_openai.set_default(CHAT, "OK")
    person = Person(app.companion, clock)
    await person.say(f"I lead project {secret} from today")
    await app.companion.tasks.drain()
    assert len(app.journal.threads.active(alice)) == 1
    if how == "/forget":
        await app.companion.forget_everything(alice)
    elif how == "typed":
        await person.say(f"forget project {secret}")
        await app.companion.tasks.drain()
    else:
        question = await app.companion.ask_to_forget(alice, f"project {secret}")
        assert question is not None
        assert await app.companion.forget_as_asked(question.key, alice.user_id) is not None
    assert app.journal.threads.all(alice) == []
    await app.companion.tasks.drain()
    await app.compact_vectors()
    report = await asyncio.to_thread(scan_directory, app.settings.storage.data_dir, secret)
    assert report.in_files == {} and report.in_rows == {}, (report.in_files, report.in_rows)


def test_open_is_not_an_add() -> None:
    assert parse_ops("[OPEN] a: b\n[ADD] c").ops == [Open("a", "b"), Add("c")]
