"""Benchmark of the offline demo's first chats: does the embedded model say back what it was told, and how soon?

What runs: the real `companion chat` command, piped, on the embedded SmolLM2-135M model, in a fresh data
directory; each newcomer (two writing English, two Chinese) tells four things in one run of the process
(a pet's name, a relative's city, a birthday, a food they love; two of them as "remember that …", which
explicit memory mode stores as facts), then a later run starts a new conversation (`/new`, as the idle
close does for a chat taken up again later) and asks about each. An answer counts when it carries the
right name, place, date or food, as the model wrote it. Timings are read from the command's output as it
comes: the first reply from the start of the command (imports and model load included), later replies
from the end of the one before. A `/help` after each message marks where its reply ends.

`--checkout DIR` runs the command of another checkout of the project (for the figures before a change):

    python -m bench.demo
    python -m bench.demo --checkout ../main --newcomers alice,li --json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.stats import cpu_model, load_average, summarize


@dataclass(frozen=True)
class Fact:
    """One thing a newcomer tells, the question that asks for it later, and the words a right answer holds."""

    told: str
    asked: str
    answers: tuple[str, ...]


@dataclass(frozen=True)
class Newcomer:
    name: str
    language: str
    facts: tuple[Fact, ...]


NEWCOMERS = (
    Newcomer(
        "alice",
        "en",
        (
            Fact("I just adopted a cat called Mochi.", "What is my cat called?", ("Mochi",)),
            Fact("Remember that my sister lives in Lisbon.", "Where does my sister live?", ("Lisbon",)),
            Fact("My birthday is on March 14.", "When is my birthday?", ("March 14", "14 March", "March 14th")),
            Fact("Remember that I love ramen more than any other food.", "What food do I love?", ("ramen",)),
        ),
    ),
    Newcomer(
        "ben",
        "en",
        (
            Fact("Remember that my dog's name is Biscuit.", "Do you remember my dog's name?", ("Biscuit",)),
            Fact("My grandmother lives in Dublin.", "Which city does my grandmother live in?", ("Dublin",)),
            Fact("Remember that my birthday is July 2.", "What day is my birthday?", ("July 2", "2 July", "July 2nd")),
            Fact("Pizza is my favourite food.", "What is my favourite food?", ("pizza",)),
        ),
    ),
    Newcomer(
        "li",
        "zh",
        (
            Fact("我刚养了一只猫，叫团子。", "我的猫叫什么名字？", ("团子",)),
            Fact("记住我姐姐住在成都。", "我姐姐住在哪里？", ("成都",)),
            Fact("我的生日是十月三日。", "我的生日是哪天？", ("十月三日", "10月3日", "十月三号", "10月3号")),
            Fact("记住我最爱吃火锅。", "我最爱吃什么？", ("火锅",)),
        ),
    ),
    Newcomer(
        "wang",
        "zh",
        (
            Fact("记住我家的狗叫豆豆。", "你还记得我的狗叫什么吗？", ("豆豆",)),
            Fact("我妈妈住在杭州。", "我妈妈住在哪个城市？", ("杭州",)),
            Fact(
                "记住我的生日是五月二十日。", "我生日是几月几号？", ("五月二十日", "5月20日", "五月二十号", "5月20号")
            ),
            Fact("我最喜欢吃饺子。", "我最喜欢吃什么？", ("饺子",)),
        ),
    ),
)


def carries(answer: str, words: tuple[str, ...]) -> bool:
    """Whether `answer` holds one of `words` (a date's number not part of a longer one: "July 24" is not "July 2")."""
    return any(re.search(rf"(?<!\d){re.escape(word)}(?!\d)", answer, re.IGNORECASE) for word in words)


@dataclass
class Run:
    """One run of the command: each reply, and when it was complete (seconds since the command started)."""

    replies: list[str]
    done_at: list[float]

    @property
    def waits(self) -> list[float]:
        """How long each reply took: the first from the start of the command, the others from the one before."""
        return [end - start for start, end in zip([0.0, *self.done_at], self.done_at, strict=False)]


def chat(lines: list[str], user: str, data_dir: Path, checkout: Path, help_lines: list[str]) -> Run:
    """Run `companion chat --user USER` once with `lines` piped in, a /help after each: its text (`help_lines`)
    marks where the reply ends."""
    process, started = _start(user, data_dir, checkout, "".join(f"{line}\n/help\n" for line in lines))
    run, output = Run([], []), []
    assert process.stdout is not None
    for line in process.stdout:
        output.append(line.rstrip("\n"))
        if output[-len(help_lines) :] == help_lines:
            run.replies.append("\n".join(output[: -len(help_lines)]).strip())
            run.done_at.append(time.monotonic() - started)
            output = []
    if process.wait() != 0 or len(run.replies) != len(lines):
        raise SystemExit(f"companion chat --user {user} failed (exit {process.returncode}) after {run.replies}")
    return run


def help_of(data_dir: Path, checkout: Path) -> list[str]:
    """What the checkout's terminal prints for /help."""
    process, _ = _start("help", data_dir, checkout, "/help\n")
    assert process.stdout is not None
    lines = [line.rstrip("\n") for line in process.stdout]
    if process.wait() != 0 or not lines:
        raise SystemExit(f"companion chat failed (exit {process.returncode}) before answering /help")
    return lines


def _start(user: str, data_dir: Path, checkout: Path, script: str) -> tuple[subprocess.Popen[str], float]:
    """`companion chat --user USER` of the checkout, on the embedded model in `data_dir`, `script` piped in."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("OPENAI_", "COMPANION_"))}
    env |= {"COMPANION_DATA_DIR": str(data_dir), "PYTHONPATH": str(checkout), "COMPANION_CONFIG": os.devnull}
    command = [sys.executable, "-c", "from bot.cli.main import main; main()", "chat", "--user", user]
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        cwd=checkout,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdin is not None
    process.stdin.write(script)
    process.stdin.close()
    return process, started


def measure(checkout: Path, newcomers: tuple[Newcomer, ...] = NEWCOMERS, *, verbose: bool) -> dict[str, object]:
    """Each newcomer's two runs; the share of right answers per language, and the reply times."""
    right: dict[str, list[bool]] = {"en": [], "zh": []}
    first: list[float] = []
    later: list[float] = []
    with tempfile.TemporaryDirectory(prefix="companion-demo-") as data_dir:
        help_lines = help_of(Path(data_dir), checkout)
        for newcomer in newcomers:
            told = chat([fact.told for fact in newcomer.facts], newcomer.name, Path(data_dir), checkout, help_lines)
            questions = ["/new", *(fact.asked for fact in newcomer.facts)]
            asked = chat(questions, newcomer.name, Path(data_dir), checkout, help_lines)
            first += [told.done_at[0], asked.done_at[1]]  # the ask run's first line is /new: a greeting
            later += told.waits[1:] + asked.waits[2:]
            for fact, answer in zip(newcomer.facts, asked.replies[1:], strict=True):
                right[newcomer.language].append(carries(answer, fact.answers))
                if verbose:
                    print(f"{'right' if right[newcomer.language][-1] else 'wrong'}  {fact.asked}  ->  {answer}")
    return {
        "right": {language: f"{sum(found)}/{len(found)}" for language, found in right.items() if found},
        "share": round(sum(map(sum, right.values())) / sum(map(len, right.values())), 3),
        "first_reply_s": summarize(first),
        "later_reply_s": summarize(later),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkout", type=Path, default=Path.cwd(), help="the checkout whose command runs")
    parser.add_argument("--newcomers", help="only these, as alice,li (default: all four)")
    parser.add_argument("--quiet", action="store_true", help="no line per question")
    parser.add_argument("--json", action="store_true", help="also print one JSON line with every figure")
    args = parser.parse_args()
    chosen = tuple(n for n in NEWCOMERS if args.newcomers is None or n.name in args.newcomers.split(","))
    figures = measure(args.checkout.resolve(), chosen, verbose=not args.quiet)
    right = figures["right"]
    assert isinstance(right, dict)
    print(
        f"right answers: {right} (share {figures['share']:.0%}); "
        f"first reply (command start, model load included) {figures['first_reply_s']} s; "
        f"later replies {figures['later_reply_s']} s; CPU {cpu_model()}, {os.cpu_count()} cores, "
        f"load average {load_average()} at the end"
    )
    if args.json:
        print(json.dumps({"cpu": cpu_model(), "load": load_average(), **figures}))


if __name__ == "__main__":
    main()
