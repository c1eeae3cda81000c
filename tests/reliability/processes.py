"""The real `companion` processes the reliability tests drive: `companion run`, and one-off commands."""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bot.cli.control_socket import socket_path

ROOT = Path(__file__).resolve().parents[2]
COMPANION = [sys.executable, "-c", "from bot.cli.main import main; main()"]
START_TIMEOUT = 60.0


class Bot:
    """One `companion run` process; its stderr is kept in a file to read after it ended."""

    def __init__(self, env: dict[str, str], data_dir: Path, log: Path) -> None:
        self.env = env
        self.data_dir = data_dir
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, *args: str) -> Bot:
        """Start serving and wait until its control socket answers (the app is built by then)."""
        return self._start([*COMPANION, *args, "run"])

    def _start(self, command: list[str]) -> Bot:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(command, env=self.env, stdout=log, stderr=log)
        self.data_dir = self.data_dir_of(self.process.pid)
        deadline = time.monotonic() + START_TIMEOUT
        while not socket_path(self.data_dir).exists():
            if self.process.poll() is not None:
                raise AssertionError(f"companion run ended with {self.process.returncode}: {self.output()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"companion run did not start: {self.output()}")
            time.sleep(0.05)
        return self

    def data_dir_of(self, pid: int) -> Path:
        """The data directory as this test process reaches it."""
        return self.data_dir

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self, how: int = signal.SIGTERM, timeout: float = 30.0) -> float:
        """Send `how` and wait for the end; returns the seconds it took."""
        assert self.process is not None
        began = time.monotonic()
        self.process.send_signal(how)
        self.process.wait(timeout=timeout)
        return time.monotonic() - began

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class BotOnASmallDisk(Bot):
    """`companion run` with its data directory on a 16 MB file system of its own, which the test can fill.

    The file system is a tmpfs mounted in a user and mount namespace (no privileges needed where the
    kernel allows unprivileged user namespaces; the test is skipped where it does not). The test reaches
    it through the bot's `/proc/<pid>/root`.
    """

    MOUNT = "/mnt"

    def start(self, *args: str) -> Bot:
        skip_without_namespaces()
        command = " ".join(shlex.quote(part) for part in [*COMPANION, *args, "run"])
        script = f"mount -t tmpfs -o size=16m tmpfs {self.MOUNT} && COMPANION_DATA_DIR={self.MOUNT}/data exec {command}"
        return self._start(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script])

    @property
    def disk(self) -> Path:
        return Path(f"/proc/{self.pid}/root{self.MOUNT}")

    def data_dir_of(self, pid: int) -> Path:
        return Path(f"/proc/{pid}/root{self.MOUNT}/data")

    def fill(self) -> None:
        """Fill the disk to its last byte."""
        with (self.disk / "filler").open("wb", buffering=0) as filler:
            try:
                while filler.write(bytes(65536)):
                    pass
            except OSError:  # no space left: what we meant
                pass

    def make_room(self) -> None:
        (self.disk / "filler").unlink()


def skip_without_namespaces() -> None:
    probe = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "true"], check=False, capture_output=True
    )
    if probe.returncode != 0:
        pytest.skip("unprivileged user and mount namespaces are not available here")


def companion(
    env: dict[str, str], *args: str, stdin: str | bytes = b"", **extra: Any
) -> subprocess.CompletedProcess[str]:
    """Run one `companion` command in its own process, as an operator would."""
    return run([*COMPANION, *args], env, stdin, **extra)


def run(command: list[str], env: dict[str, str], stdin: str | bytes, **extra: Any) -> subprocess.CompletedProcess[str]:
    """Run `command` to its end; its output is text (bytes that are not UTF-8 shown as U+FFFD)."""
    data = stdin.encode() if isinstance(stdin, str) else stdin
    done = subprocess.run(command, check=False, env=env, input=data, capture_output=True, timeout=120, **extra)
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    )


def on_a_full_disk(
    env: dict[str, str], data_dir: Path, *args: str, stdin: bytes = b""
) -> subprocess.CompletedProcess[str]:
    """Run a `companion` command with a copy of `data_dir` on a small file system filled to the last byte.

    The file system is a tmpfs mounted in a user and mount namespace of its own (no privileges needed
    where the kernel allows unprivileged user namespaces; the test is skipped where it does not).
    """
    probe = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "true"], check=False, capture_output=True
    )
    if probe.returncode != 0:
        pytest.skip("unprivileged user and mount namespaces are not available here")
    mount = data_dir.parent / "small-disk"
    mount.mkdir()
    command = " ".join(shlex.quote(part) for part in [*COMPANION, *args])
    script = (
        f"mount -t tmpfs -o size=4m tmpfs {mount} && cp -r {data_dir} {mount}/data && "
        f"(dd if=/dev/zero of={mount}/filler bs=64k 2>/dev/null; true) && "
        f"COMPANION_DATA_DIR={mount}/data exec {command}"
    )
    return run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script], env, stdin)
