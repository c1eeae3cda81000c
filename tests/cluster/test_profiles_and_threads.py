"""The profile and ongoing threads in server mode: written once though every process runs the pass, read by every
process's prompt, and gone from all of them after a forget in one."""

from __future__ import annotations

from knowledge.records import Scope
from tests.cluster.conftest import OpenApp
from tests.fakes.clock import FakeClock
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.scenario import CHAT, MONITOR, SUMMARIZER, Body, Person, monitor_rules, prompt_text, system_message

ALICE = Scope("xiaoxiang", "cli:alice")
PORTRAIT = "Alice is a nurse in Leeds; her sister Anna visits on Sundays; she loves ramen."


def summarizer(body: Body) -> str:
    return PORTRAIT if "<<<MEMORIES" in prompt_text(body) else "They chatted."


async def test_a_profile_and_a_thread_written_in_one_process_are_in_every_prompt_and_forgotten_everywhere(
    open_app: OpenApp, fake_openai: FakeOpenAIServer, clock: FakeClock
) -> None:
    fake_openai.set_default(
        MONITOR,
        monitor_rules(
            {
                "nurse": "[ADD] Alice works as a nurse in Leeds",
                "sister": "[ADD] Alice's sister Anna visits on Sundays",
                "ramen": "[ADD] Alice loves ramen",
                "moving": "[OPEN] move to Kyoto-7731: boxes packed",
            }
        ),
    )
    fake_openai.set_default(SUMMARIZER, summarizer)
    fake_openai.set_default(CHAT, "OK")
    first, second = await open_app("a"), await open_app("b")
    alice = Person(first.companion, clock)
    for line in ("I'm a nurse in Leeds", "my sister Anna comes on Sundays", "I love ramen", "I'm moving to Kyoto-7731"):
        await alice.say(line)
        await first.companion.tasks.drain()

    assert await first.lifecycle.write_profiles() == 1 and await second.lifecycle.write_profiles() == 1
    await first.companion.tasks.drain()
    await second.companion.tasks.drain()
    assert len([r for r in fake_openai.requests_for(SUMMARIZER) if "<<<MEMORIES" in prompt_text(r)]) == 1
    await Person(second.companion, clock).say("hi")
    shown = system_message(fake_openai.requests_for(CHAT)[-1])
    assert PORTRAIT in shown and "move to Kyoto-7731" in shown

    question = await first.companion.ask_to_forget(ALICE, "Kyoto-7731")
    assert question is not None and await first.companion.forget_as_asked(question.key, ALICE.user_id)
    assert second.journal.threads.all(ALICE) == []
    await Person(second.companion, clock).say("hello again")
    assert "Kyoto-7731" not in system_message(fake_openai.requests_for(CHAT)[-1])
