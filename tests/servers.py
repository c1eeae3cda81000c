"""Real servers the tests start themselves on loopback: PostgreSQL (Debian's package) and `chroma run`.

PostgreSQL's `initdb` refuses to run as root, so under root the server runs as the `postgres`
system user that Debian's package creates, in a temporary directory that user owns. Nothing is
skipped: a server that cannot start fails the tests that need it, saying why.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psycopg

CHROMA = Path(sys.executable).with_name("chroma")
PG_BIN_DIRS = "/usr/lib/postgresql/*/bin"
START_TIMEOUT = 60.0
SUPERUSER = "companion"


class ServerStartError(RuntimeError):
    """A server the tests need did not start."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen[bytes], what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    tail = log.read_text(errors="replace")[-2000:] if log is not None and log.exists() else ""
    process.kill()
    raise ServerStartError(f"{what} did not start on port {port}:\n{tail}")


def postgres_bin() -> Path:
    """The directory of PostgreSQL's server programs (newest version installed)."""
    found = sorted(Path("/").glob(PG_BIN_DIRS.lstrip("/")), key=lambda path: int(path.parent.name))
    if not found or not (found[-1] / "initdb").exists():
        raise ServerStartError(
            "PostgreSQL's server programs are not installed (/usr/lib/postgresql/*/bin/initdb): "
            "apt-get install -y postgresql (.ci/run does it)"
        )
    return found[-1]


class PostgresServer:
    """A throwaway PostgreSQL cluster on a free loopback port; `url(database)` connects to it."""

    def __init__(self, *, survives_crashes: bool = False) -> None:
        """`survives_crashes`: a commit is kept through `crash` (the default loses the last few, for speed)."""
        self.survives_crashes = survives_crashes
        self.bin = postgres_bin()
        self.root = Path(tempfile.mkdtemp(prefix="companion-pg-"))
        self.port = free_port()
        self._as_user: list[str] = []
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> PostgresServer:
        if os.geteuid() == 0:  # initdb refuses root: run the cluster as Debian's postgres user
            if shutil.which("runuser") is None:
                raise ServerStartError("running as root, and runuser is missing to start PostgreSQL as postgres")
            try:
                shutil.chown(self.root, user="postgres")
            except LookupError as error:
                raise ServerStartError("running as root, and there is no postgres user to run PostgreSQL") from error
            self._as_user = ["runuser", "-u", "postgres", "--"]
        data = self.root / "data"
        self._run(
            [str(self.bin / "initdb"), "-D", str(data), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8", "--no-sync"]
        )
        self._launch()
        return self

    def crash(self) -> None:
        """Stop at once, as `pg_ctl stop -m immediate` does: every connection drops, nothing is shut down cleanly."""
        assert self._process is not None
        self._run([str(self.bin / "pg_ctl"), "stop", "-D", str(self.root / "data"), "-m", "immediate"])
        self._process.wait(timeout=20)

    def restart(self) -> None:
        """Start again on the same files and port, after `crash` (the server recovers what it had)."""
        self._launch()

    def _launch(self) -> None:
        data = self.root / "data"
        log = self.root / "server.log"
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(self.root),
            "max_connections": "500",
            "fsync": "off",  # a throwaway cluster: durability is not what the tests measure
            "synchronous_commit": "on" if self.survives_crashes else "off",
            "full_page_writes": "off",
        }
        command = [str(self.bin / "postgres"), "-D", str(data)]
        for name, value in settings.items():
            command += ["-c", f"{name}={value}"]
        with open(log, "ab") as output:
            self._process = subprocess.Popen(self._as_user + command, stdout=output, stderr=subprocess.STDOUT)
        wait_for_port(self.port, self._process, "PostgreSQL", log)
        self._wait_until_accepting()

    @property
    def pid(self) -> int:
        """The process the server runs under (its backends are below it)."""
        assert self._process is not None
        return self._process.pid

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str, *, template: str | None = None) -> str:
        """A new, empty database (or a copy of `template`); returns its URL."""
        with psycopg.connect(self.url(), autocommit=True) as admin:
            copy = f" TEMPLATE {template}" if template else ""
            admin.execute(f"CREATE DATABASE {name}{copy}")
        return self.url(name)

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        shutil.rmtree(self.root, ignore_errors=True)

    def _run(self, command: Sequence[str]) -> None:
        done = subprocess.run([*self._as_user, *command], check=False, capture_output=True, text=True)
        if done.returncode != 0:
            raise ServerStartError(f"{Path(command[0]).name} failed: {done.stderr.strip() or done.stdout.strip()}")

    def _wait_until_accepting(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                psycopg.connect(self.url(), connect_timeout=2).close()
                return
            except psycopg.OperationalError as error:  # "the database system is starting up"
                if time.monotonic() > deadline:
                    raise ServerStartError(f"PostgreSQL does not accept connections: {error}") from error
                time.sleep(0.1)


class ChromaServer:
    """`chroma run` on a free loopback port, storing under `path`."""

    def __init__(self, path: Path) -> None:
        if not CHROMA.exists():
            raise ServerStartError(f"the chroma server command is not installed next to this Python ({CHROMA})")
        self.path = path
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> ChromaServer:
        log = self.path / "chroma.log"
        self.path.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as output:
            self._process = subprocess.Popen(
                [
                    str(CHROMA),
                    "run",
                    "--path",
                    str(self.path / "data"),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                ],
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        wait_for_port(self.port, self._process, "the chroma server", log)
        return self

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=20)
