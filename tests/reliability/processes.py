"""The real `companion` processes the reliability tests drive: `companion run`, and one-off commands."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bot.control_socket import socket_path

ROOT = Path(__file__).resolve().parents[2]
COMPANION = [sys.executable, "-c", "from bot.cli import main; main()"]
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
        with self.log.open("ab") as log:
            self.process = subprocess.Popen([*COMPANION, *args, "run"], env=self.env, stdout=log, stderr=log)
        deadline = time.monotonic() + START_TIMEOUT
        while not socket_path(self.data_dir).exists():
            if self.process.poll() is not None:
                raise AssertionError(f"companion run ended with {self.process.returncode}: {self.output()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"companion run did not start: {self.output()}")
            time.sleep(0.05)
        return self

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


def companion(
    env: dict[str, str], *args: str, stdin: str | bytes = b"", **extra: Any
) -> subprocess.CompletedProcess[str]:
    """Run one `companion` command in its own process, as an operator would."""
    data = stdin.encode() if isinstance(stdin, str) else stdin
    result = subprocess.run(
        [*COMPANION, *args], check=False, env=env, input=data, capture_output=True, timeout=120, **extra
    )
    return subprocess.CompletedProcess(
        result.args, result.returncode, result.stdout.decode(errors="replace"), result.stderr.decode(errors="replace")
    )
