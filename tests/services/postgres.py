"""A real Postgres for tests: a throwaway cluster in a temporary directory, on loopback.

    with postgres_server(databases=("catalog", "dagster")) as pg:
        pg.url("catalog", driver="postgresql+psycopg2")  # with the password

The server binaries are the machine's PostgreSQL (`initdb`, `pg_ctl` on PATH or under
/usr/lib/postgresql/*/bin). `initdb` refuses to run as root, so as root both run as the
unprivileged `postgres` user in a directory that user owns. Logins need a password (scram),
so a client with a wrong one is refused as in production. The server listens on 127.0.0.1 and
a unix socket in its own directory only, and is stopped by its own pid (`pg_ctl stop -m fast`,
then SIGKILL of the postmaster pid if it did not exit).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

USER = "fm"
STARTUP_TIMEOUT_S = 60


@dataclass(frozen=True)
class PostgresServer:
    """A running throwaway Postgres and the login it accepts."""

    host: str
    port: int
    user: str
    password: str = field(repr=False)
    pid: int  # the postmaster's

    def url(self, database: str, *, driver: str = "postgresql", password: str | None = None) -> str:
        secret = self.password if password is None else password
        return f"{driver}://{self.user}:{secret}@{self.host}:{self.port}/{database}"

    def query(self, database: str, sql: str) -> list[tuple]:
        """Rows of `sql` run as the test user (psycopg2, no ORM)."""
        import psycopg2

        with (
            contextlib.closing(
                psycopg2.connect(
                    host=self.host,
                    port=self.port,
                    user=self.user,
                    password=self.password,
                    dbname=database,
                    connect_timeout=5,
                )
            ) as connection,
            connection.cursor() as cursor,
        ):
            cursor.execute(sql)
            return list(cursor.fetchall())


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for candidate in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True):
        return str(candidate)
    raise FileNotFoundError(
        f"PostgreSQL server binary {name!r} not found on PATH or under /usr/lib/postgresql; "
        "install the Debian package postgresql (`make install-system` does)"
    )


def _as_server_user(command: list[str]) -> list[str]:
    """Run as `postgres` when we are root (initdb and postgres refuse root)."""
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", "postgres", "--", *command]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _postmaster_pid(data: Path) -> int:
    return int((data / "postmaster.pid").read_text().splitlines()[0])


@contextlib.contextmanager
def postgres_server(databases: Sequence[str] = ("fm",)) -> Iterator[PostgresServer]:
    """initdb a cluster in a fresh temp dir, start it on a free loopback port, create
    `databases` owned by a password login, yield; stop it by its pid and remove the dir."""
    # Not pytest's tmp dirs: they are private to root, and the server user must own its dir.
    root = Path(tempfile.mkdtemp(prefix="fm-pg-"))
    data, password = root / "data", secrets.token_urlsafe(18)
    pwfile = root / "pwfile"
    pwfile.write_text(password + "\n")
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chown(root, owner.pw_uid, owner.pw_gid)
        os.chown(pwfile, owner.pw_uid, owner.pw_gid)
    port = _free_port()
    log = root / "postgres.log"
    pid: int | None = None
    try:
        subprocess.run(
            _as_server_user(
                [
                    _binary("initdb"),
                    "-D",
                    str(data),
                    "-U",
                    "postgres",
                    "--auth-local=trust",  # the owner's socket, for setting the cluster up
                    "--auth-host=scram-sha-256",  # every TCP login needs the password
                    f"--pwfile={pwfile}",
                    "--encoding=UTF8",
                    "--no-instructions",
                ]
            ),
            check=True,
            capture_output=True,
        )
        pwfile.unlink()
        options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
        subprocess.run(
            _as_server_user(
                [
                    _binary("pg_ctl"),
                    "-D",
                    str(data),
                    "-o",
                    options,
                    "-l",
                    str(log),
                    "-w",
                    "-t",
                    str(STARTUP_TIMEOUT_S),
                    "start",
                ]
            ),
            check=True,
            capture_output=True,
        )
        pid = _postmaster_pid(data)
        psql = [_binary("psql"), "-h", str(root), "-p", str(port), "-U", "postgres", "-q"]
        # CREATEROLE: tests of the catalog policy make the roles it names (deploy/iam/).
        statements = [f"CREATE ROLE {USER} LOGIN CREATEDB CREATEROLE PASSWORD '{password}'"]
        statements += [f"CREATE DATABASE {db} OWNER {USER}" for db in databases]
        for statement in statements:
            subprocess.run(
                _as_server_user([*psql, "-d", "postgres", "-c", statement]),
                check=True,
                capture_output=True,
            )
        yield PostgresServer(host="127.0.0.1", port=port, user=USER, password=password, pid=pid)
    finally:
        if pid is not None:
            subprocess.run(
                _as_server_user([_binary("pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]),
                capture_output=True,
                timeout=60,
            )
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.2)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
