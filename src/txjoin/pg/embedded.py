"""An embedded PostgreSQL server for tests, scenarios and ``make demo``.

``EmbeddedPostgres(data_dir).start()`` runs ``initdb`` once, then starts the
server on a free loopback port with ``wal_level=logical``. PostgreSQL refuses
to run as root, so when we are root the server runs as an unprivileged OS user
(``postgres`` if it exists, else ``nobody``; ``TXJOIN_PG_OS_USER`` overrides).
With ``stop_with_parent=True`` a small watchdog process stops the server when
the process that started it exits, even on ``kill -9``, so an interrupted test
run leaves no server behind.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from txjoin.errors import ConfigError, MissingDependency, SourceError
from txjoin.pg.names import quote_ident

__all__ = ["EmbeddedPostgres", "ServerStatus", "find_bindir"]

SUPERUSER = "txjoin"
_STATE_FILE = "txjoin-embedded.json"
_CONF_FILE = "txjoin.conf"
_INSTALL_HINT = (
    "install Debian's 'postgresql' package (as root: apt-get install -y postgresql), "
    "or set TXJOIN_PG_BINDIR to the directory holding initdb, pg_ctl and postgres"
)


def find_bindir() -> Path:
    """Locate the PostgreSQL server binaries (initdb, pg_ctl, postgres)."""
    candidates: list[Path] = []
    env = os.environ.get("TXJOIN_PG_BINDIR")
    if env:
        # An explicit setting is the only place we look: a typo must not be
        # hidden by a system install elsewhere.
        candidates.append(Path(env))
    else:
        candidates.extend(_default_bindirs())
    for c in candidates:
        if all((c / b).is_file() and os.access(c / b, os.X_OK) for b in ("initdb", "pg_ctl", "postgres")):
            return c
    searched = ", ".join(str(c) for c in candidates) or "(no candidate directories)"
    raise MissingDependency(
        f"PostgreSQL server binaries (initdb, pg_ctl, postgres) not found in {searched}: " + _INSTALL_HINT,
        package="postgresql",
    )


def _default_bindirs() -> list[Path]:
    candidates: list[Path] = []
    # Debian keeps server binaries out of PATH, one directory per major version.
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
        reverse=True,
    )
    candidates.extend(Path(v) for v in versions)
    on_path = shutil.which("postgres")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    return candidates


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class ServerStatus:
    running: bool
    port: int | None
    pid: int | None
    data_dir: Path

    def describe(self) -> str:
        if not self.running:
            return f"stopped (data directory {self.data_dir})"
        return f"running: pid {self.pid}, port {self.port}, data directory {self.data_dir}"


@dataclass
class _RunAs:
    name: str
    uid: int
    gid: int


def _run_as_user() -> _RunAs | None:
    """The unprivileged OS user to run the server as, or None if we are not root."""
    if os.geteuid() != 0:
        return None
    wanted = os.environ.get("TXJOIN_PG_OS_USER")
    names = [wanted] if wanted else ["postgres", "nobody"]
    for name in names:
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            continue
        if pw.pw_uid == 0:
            raise ConfigError(
                f"TXJOIN_PG_OS_USER={name!r} is root: PostgreSQL refuses to run as root; "
                "name an unprivileged user"
            )
        return _RunAs(name, pw.pw_uid, pw.pw_gid)
    raise ConfigError(
        f"running as root and no unprivileged user to run PostgreSQL as (tried {names}): "
        "create one (useradd -r postgres) or set TXJOIN_PG_OS_USER"
    )


def _check_reachable(path: Path, user: _RunAs) -> None:
    """Every parent of ``path`` must be searchable by ``user``."""
    for parent in reversed(path.resolve().parents):
        st = parent.stat()
        if st.st_uid == user.uid:
            ok = bool(st.st_mode & stat.S_IXUSR)
        elif st.st_gid == user.gid:
            ok = bool(st.st_mode & stat.S_IXGRP)
        else:
            ok = bool(st.st_mode & stat.S_IXOTH)
        if not ok:
            raise ConfigError(
                f"PostgreSQL runs as OS user {user.name!r}, which cannot enter {parent} "
                f"(mode {stat.filemode(st.st_mode)}): choose a data directory under /tmp "
                "or a world-searchable path",
                data_dir=str(path),
            )


class EmbeddedPostgres:
    """One PostgreSQL cluster in ``data_dir``, served on 127.0.0.1."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        port: int | None = None,
        fsync: bool = True,
        settings: dict[str, str] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).absolute()
        self._requested_port = port
        self.fsync = fsync
        self.extra_settings = dict(settings or {})
        self.bindir = find_bindir()
        self.run_as = _run_as_user()
        self.port: int | None = None
        self._watchdog: subprocess.Popen[bytes] | None = None

    # -- connection details -------------------------------------------------
    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def user(self) -> str:
        return SUPERUSER

    def dsn(self, dbname: str = "postgres", user: str | None = None) -> str:
        port = self.port or self.status().port
        if port is None:
            raise SourceError(f"embedded PostgreSQL in {self.data_dir} is not running: start it first")
        return f"host={self.host} port={port} user={user or self.user} dbname={dbname}"

    @property
    def log_file(self) -> Path:
        return self.data_dir.parent / (self.data_dir.name + ".log")

    # -- lifecycle ------------------------------------------------------------
    def _run(
        self, args: Sequence[str], *, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        kwargs: dict[str, Any] = {}
        if self.run_as is not None:
            kwargs.update(user=self.run_as.uid, group=self.run_as.gid, extra_groups=[])
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        proc = subprocess.run(
            list(args),
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
            cwd="/",
            **kwargs,
        )
        if check and proc.returncode != 0:
            raise SourceError(
                f"{Path(args[0]).name} failed with exit code {proc.returncode}: "
                f"{(proc.stderr or proc.stdout).strip()[-2000:]}"
                + (f" (server log: {self.log_file})" if self.log_file.exists() else ""),
                data_dir=str(self.data_dir),
            )
        return proc

    def _chown(self, path: Path) -> None:
        if self.run_as is not None:
            os.chown(path, self.run_as.uid, self.run_as.gid)

    def initialized(self) -> bool:
        return (self.data_dir / "PG_VERSION").is_file()

    def init(self) -> None:
        """Run initdb if the data directory holds no cluster yet."""
        if self.initialized():
            return
        if self.data_dir.exists() and any(self.data_dir.iterdir()):
            raise ConfigError(
                f"data directory {self.data_dir} is not empty and holds no PostgreSQL cluster: "
                "choose an empty or new directory"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.run_as is not None:
            _check_reachable(self.data_dir, self.run_as)
        self._chown(self.data_dir)
        self._run(
            [
                str(self.bindir / "initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-instructions",
            ],
        )
        with (self.data_dir / "postgresql.conf").open("a") as f:
            f.write(f"\ninclude_if_exists = '{_CONF_FILE}'\n")

    def _write_conf(self, port: int) -> None:
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(port),
            # No Unix socket: data directory paths can exceed the socket path limit.
            "unix_socket_directories": "''",
            "wal_level": "logical",
            "max_replication_slots": "20",
            "max_wal_senders": "20",
            "max_connections": "100",
            "fsync": "on" if self.fsync else "off",
            "full_page_writes": "on" if self.fsync else "off",
            "synchronous_commit": "on" if self.fsync else "off",
            "wal_sender_timeout": "60s",
            "log_min_messages": "warning",
            "log_line_prefix": "'%m [%p] '",
        }
        settings.update(self.extra_settings)
        path = self.data_dir / _CONF_FILE
        path.write_text("".join(f"{k} = {v}\n" for k, v in settings.items()))
        self._chown(path)
        state = self.data_dir / _STATE_FILE
        state.write_text(json.dumps({"port": port}))
        self._chown(state)

    def start(self, *, stop_with_parent: bool = False, timeout: float = 60) -> EmbeddedPostgres:
        """Initialize if needed and start; reuse a server already running here."""
        self.init()
        st = self.status()
        if st.running:
            self.port = st.port
        else:
            last_error: SourceError | None = None
            for _attempt in range(3):
                port = self._requested_port or free_port()
                self._write_conf(port)
                if not self.log_file.exists():
                    self.log_file.touch()
                self._chown(self.log_file)
                try:
                    self._run(
                        [
                            str(self.bindir / "pg_ctl"),
                            "-D",
                            str(self.data_dir),
                            "-l",
                            str(self.log_file),
                            "-w",
                            "-t",
                            str(int(timeout)),
                            "start",
                        ],
                        timeout=timeout + 10,
                    )
                except SourceError as e:  # port taken between probe and bind: try another
                    last_error = e
                    if self._requested_port is not None:
                        break
                    continue
                self.port = port
                break
            else:
                assert last_error is not None
                raise last_error
            if self.port is None:
                assert last_error is not None
                raise last_error
        if stop_with_parent:
            self._start_watchdog()
        return self

    def _start_watchdog(self) -> None:
        if self._watchdog is not None and self._watchdog.poll() is None:
            return
        self._watchdog = subprocess.Popen(
            [sys.executable, "-m", "txjoin.pg._watchdog", str(os.getpid()), str(self.data_dir)],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )

    def stop(self, mode: str = "fast") -> None:
        """Stop the server if it runs; safe to call twice."""
        if self.initialized() and self.status().running:
            self._run([str(self.bindir / "pg_ctl"), "-D", str(self.data_dir), "-m", mode, "-w", "stop"])
        if self._watchdog is not None:
            self._watchdog.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._watchdog.wait(5)
            self._watchdog = None

    def destroy(self) -> None:
        """Stop the server and delete its data directory and log."""
        self.stop("immediate")
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.log_file.unlink(missing_ok=True)

    def status(self) -> ServerStatus:
        if not self.initialized():
            return ServerStatus(False, None, None, self.data_dir)
        proc = self._run([str(self.bindir / "pg_ctl"), "-D", str(self.data_dir), "status"], check=False)
        if proc.returncode != 0:
            return ServerStatus(False, None, None, self.data_dir)
        pid = port = None
        try:
            lines = (self.data_dir / "postmaster.pid").read_text().splitlines()
            pid, port = int(lines[0]), int(lines[3])
        except (OSError, IndexError, ValueError):
            pass
        return ServerStatus(True, port, pid, self.data_dir)

    # -- conveniences ---------------------------------------------------------
    def create_database(self, name: str, *, exist_ok: bool = True) -> str:
        """Create database ``name`` and return its DSN."""
        import psycopg2

        conn = psycopg2.connect(self.dsn())
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cur.fetchone() is None:
                    cur.execute(f"CREATE DATABASE {quote_ident(name)}")
                elif not exist_ok:
                    raise ConfigError(f"database {name!r} already exists")
        finally:
            conn.close()
        return self.dsn(name)

    @contextlib.contextmanager
    def running(self) -> Iterator[EmbeddedPostgres]:
        """``with EmbeddedPostgres(d).running() as pg:`` starts and always stops."""
        self.start(stop_with_parent=True)
        try:
            yield self
        finally:
            self.stop()
