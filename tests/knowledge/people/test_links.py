"""Links between identities on both backends: codes that work once, for ten minutes, a few wrong tries an hour,
and two links racing for the same identities ending in one person."""

from __future__ import annotations

import threading

import pytest

from knowledge.people.links import (
    CODE_ALPHABET,
    CODE_LENGTH,
    MAX_WRONG_TRIES,
    Joining,
    Links,
    Refusal,
    digest,
    is_person,
)
from tests.conftest import Backend
from tests.fakes.clock import FakeClock

TG, DC, CLI = "telegram:7", "discord:99", "cli:alice"


@pytest.fixture
def links(backend: Backend) -> Links:
    return Links(backend.open())


def test_code_links_two_identities_into_one_person(links: Links, clock: FakeClock) -> None:
    code = links.issue(TG, clock.now())
    assert len(code) == CODE_LENGTH and set(code) <= set(CODE_ALPHABET)
    assert len(CODE_ALPHABET) ** CODE_LENGTH >= 2**30
    assert links.person_of(TG) == TG  # never linked: its own person

    joined = links.redeem(DC, code.lower(), clock.now())  # typed in any case

    assert isinstance(joined, Joining) and is_person(joined.person_id)
    assert set(joined.movers) == {TG, DC}
    assert links.person_of(TG) == links.person_of(DC) == joined.person_id
    assert links.members(joined.person_id) == sorted([TG, DC])


def test_a_code_is_single_use_expires_and_is_stored_only_as_a_digest(
    links: Links, backend: Backend, clock: FakeClock
) -> None:
    code = links.issue(TG, clock.now())
    stored = [str(value) for row in backend.open().query("SELECT * FROM link_codes") for value in row]
    assert code not in " ".join(stored) and digest(code) in stored

    assert isinstance(links.redeem(DC, code, clock.now()), Joining)
    assert links.redeem(CLI, code, clock.now()) is Refusal.UNKNOWN  # used
    assert links.person_of(CLI) == CLI

    late = links.issue(CLI, clock.now())
    clock.advance(minutes=10, seconds=1)
    assert links.redeem("discord:5", late, clock.now()) is Refusal.UNKNOWN
    assert links.person_of("discord:5") == "discord:5" and links.person_of(CLI) == CLI


def test_wrong_tries_are_limited_per_identity_and_hour(links: Links, clock: FakeClock) -> None:
    code = links.issue(TG, clock.now())
    wrong = "".join(CODE_ALPHABET[(CODE_ALPHABET.index(c) + 1) % 32] for c in code)
    for _ in range(MAX_WRONG_TRIES):
        assert links.redeem(DC, wrong, clock.now()) is Refusal.UNKNOWN
    assert links.redeem(DC, code, clock.now()) is Refusal.TOO_MANY_TRIES  # even the right one, for an hour
    assert links.person_of(DC) == DC
    assert isinstance(links.redeem(CLI, code, clock.now()), Joining)  # another identity is not held back

    clock.advance(hours=1, seconds=1)
    again = links.issue(TG, clock.now())
    assert isinstance(links.redeem(DC, again, clock.now()), Joining)


def test_own_code_links_nothing(links: Links, clock: FakeClock) -> None:
    code = links.issue(TG, clock.now())
    assert links.redeem(TG, code, clock.now()) is Refusal.OWN_CODE
    assert links.person_of(TG) == TG


def test_a_third_identity_and_two_persons_join(links: Links, clock: FakeClock) -> None:
    first = links.join(TG, DC, clock.now())
    other = links.join(CLI, "discord:5", clock.now())
    clock.advance(minutes=1)

    both = links.join(TG, CLI, clock.now())

    assert both.person_id == first.person_id and both.movers == (other.person_id,)
    assert links.members(first.person_id) == sorted([TG, DC, CLI, "discord:5"])
    assert links.join(DC, "discord:5", clock.now()).already


def test_unlink_detaches_one_identity_and_the_last_stays(links: Links, clock: FakeClock) -> None:
    person = links.join(TG, DC, clock.now()).person_id
    assert links.detach(DC) == person
    assert links.person_of(DC) == DC and links.person_of(TG) == person
    assert links.detach(TG) is None  # the last identity is the person: its memory stays reachable
    assert links.detach("cli:nobody") is None


def test_two_links_racing_for_the_same_identities_end_in_one_person(backend: Backend, clock: FakeClock) -> None:
    """Each redeems its own code from another connection at the same time (as two processes would)."""
    issuer = Links(backend.open())
    codes = [issuer.issue(TG, clock.now()), issuer.issue(CLI, clock.now())]
    racers = [Links(backend.open()) for _ in codes]
    results: list[Joining | Refusal] = []
    start = threading.Barrier(2)

    def redeem(links: Links, code: str) -> None:
        start.wait()
        results.append(links.redeem(DC, code, clock.now()))

    threads = [threading.Thread(target=redeem, args=pair) for pair in zip(racers, codes, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    persons = {issuer.person_of(identity) for identity in (TG, DC, CLI)}
    assert len(persons) == 1 and is_person(persons.pop())
    assert all(isinstance(result, Joining) for result in results)
    assert sum(len(issuer.people()[person]) for person in issuer.people()) == 3


def test_codes_last_ten_minutes(links: Links, clock: FakeClock) -> None:
    code = links.issue(TG, clock.now())
    clock.advance(minutes=9, seconds=59)
    assert isinstance(links.redeem(DC, code, clock.now()), Joining)
