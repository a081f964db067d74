"""A throwaway PostgreSQL server in a directory, for tests and `make cluster`: initdb (once per
process, then copies of that template), pg_ctl start on 127.0.0.1 with durable settings, databases
on demand, a fast or an immediate (crash) stop, a kill -9 of every process, a restart on the same
data, and promotion of a standby (dev/postgres_standby.py makes one)."""

from __future__ import annotations

import atexit
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Literal, Mapping

SUPERUSER = "postgres"  # initdb -U: the same role name whichever OS user runs the server
_UNPRIVILEGED_USERS = ("postgres", "nobody")  # PostgreSQL refuses to run as root
_DB_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
DEBIAN_ROOT = Path("/usr/lib/postgresql")  # Debian's /usr/lib/postgresql/<version>/bin
_SOCKET_PATH_MAX = 107  # sun_path of a unix socket, with room for the NUL
_INSTALL_HINT = ("install Debian's `postgresql` package (`make tools` does), or set OFFSETD_PG_BINDIR to "
                 "the directory holding initdb, pg_ctl and psql")

StopMode = Literal["smart", "fast", "immediate"]


class PostgresNotFound(RuntimeError):
    """No PostgreSQL server binaries on this machine."""


class PostgresError(RuntimeError):
    """A PostgreSQL command (initdb, pg_ctl, psql) failed; the message carries its output."""


def find_bindir() -> Path:
    """The directory of initdb/pg_ctl/psql: $OFFSETD_PG_BINDIR, `pg_config --bindir`, the newest
    /usr/lib/postgresql/<version>/bin (Debian), or initdb on PATH."""
    candidates: list[Path] = []
    if os.environ.get("OFFSETD_PG_BINDIR"):
        candidates.append(Path(os.environ["OFFSETD_PG_BINDIR"]))
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip():
            candidates.append(Path(out.stdout.strip()))
    if DEBIAN_ROOT.is_dir():
        versions = [p for p in DEBIAN_ROOT.iterdir() if p.name.replace(".", "").isdigit()]
        candidates += [p / "bin" for p in sorted(versions, key=lambda p: float(p.name), reverse=True)]
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    for bindir in candidates:
        if all((bindir / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres", "psql")):
            return bindir
    looked = ", ".join(str(c) for c in candidates) or "nowhere (no pg_config, no /usr/lib/postgresql)"
    raise PostgresNotFound(f"PostgreSQL server binaries not found (looked in {looked}): {_INSTALL_HINT}")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the kernel's pick for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _server_user() -> pwd.struct_passwd | None:
    """The OS user to run PostgreSQL as: None (ourselves) unless we are root, which it refuses."""
    if os.geteuid() != 0:
        return None
    for name in _UNPRIVILEGED_USERS:
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise PostgresError("running as root, and PostgreSQL refuses root: no unprivileged OS user "
                        f"({' or '.join(_UNPRIVILEGED_USERS)}) to run it as; create one (useradd postgres)")


def _check_reachable(path: Path, user: pwd.struct_passwd) -> None:
    """Fail clearly when `user` cannot traverse every ancestor of `path` (e.g. a 0700 /root or a
    pytest tmp dir), which would otherwise surface as an obscure initdb or pg_ctl error."""
    for parent in path.resolve().parents:
        st = parent.stat()
        if st.st_uid == user.pw_uid:
            ok = st.st_mode & stat.S_IXUSR
        elif st.st_gid == user.pw_gid:
            ok = st.st_mode & stat.S_IXGRP
        else:
            ok = st.st_mode & stat.S_IXOTH
        if not ok:
            raise PostgresError(f"PostgreSQL runs as OS user {user.pw_name!r}, which cannot enter {parent} "
                                f"(mode {stat.filemode(st.st_mode)}); put the server directory elsewhere, "
                                f"e.g. under {tempfile.gettempdir()}")


def _run(cmd: list[str], user: pwd.struct_passwd | None, cwd: Path, timeout: float = 120.0,
         env: Mapping[str, str] | None = None) -> str:
    """Run a PostgreSQL tool as `user` (None: ourselves); its output, or PostgresError with it."""
    ids: dict[str, object] = {}
    if user is not None:
        # Popen's user/group switch is runuser's without the dependency; no supplementary groups.
        ids = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
    full_env = {**os.environ, **(env or {})}
    if user is not None:
        full_env.update(HOME=str(cwd), USER=user.pw_name, LOGNAME=user.pw_name)
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=full_env, **ids)  # type: ignore[call-overload]
    if proc.returncode != 0:
        raise PostgresError(f"{Path(cmd[0]).name} failed (rc={proc.returncode}): "
                            f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
    return str(proc.stdout)


# initdb once per process and bindir; each server's data dir starts as a copy (0.1 s vs 0.9 s).
_TEMPLATES: dict[Path, Path] = {}


def _template(bindir: Path, user: pwd.struct_passwd | None) -> Path:
    """A freshly initdb'ed data dir to copy, made on first use and removed at exit."""
    if bindir in _TEMPLATES and (_TEMPLATES[bindir] / "PG_VERSION").exists():
        return _TEMPLATES[bindir]
    root = Path(tempfile.mkdtemp(prefix="offsetd-pg-template-"))
    atexit.register(shutil.rmtree, root, True)
    if user is not None:
        os.chown(root, user.pw_uid, user.pw_gid)
    data = root / "data"
    # --no-sync: initdb's own final fsync only; the server itself runs with fsync=on.
    _run([str(bindir / "initdb"), "-D", str(data), "-U", SUPERUSER, "--auth=trust", "--encoding=UTF8",
          "--locale=C", "--no-sync", "--no-instructions"], user, cwd=root)
    with open(data / "postgresql.conf", "a") as conf:
        conf.write("\n# offsetd.dev.postgres: settings of this throwaway server\ninclude 'offsetd.conf'\n")
    _TEMPLATES[bindir] = data
    return data


class LocalPostgres:
    """A PostgreSQL server in `directory` (a new temp dir when None; data in `directory/data`, its
    log in `directory/postgres.log`), on 127.0.0.1, trust auth, superuser `postgres`.

    An existing data dir is reused, so a server can be stopped (even `stop("immediate")`, a crash)
    and started again on the same data. fsync and synchronous_commit stay on: a committed row
    survives a crash. `close()` stops it and removes what it created."""

    def __init__(self, directory: Path | str | None = None, *, port: int = 0, max_connections: int = 300,
                 settings: Mapping[str, str] | None = None, bindir: Path | None = None) -> None:
        self.bindir = bindir or find_bindir()
        self.user = _server_user()
        self._own_directory = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="offsetd-pg-")).resolve()
        self.data_dir = self.directory / "data"
        self.log_path = self.directory / "postgres.log"
        self.port = port
        self.settings: dict[str, str] = {
            "listen_addresses": "127.0.0.1",
            "max_connections": str(max_connections),
            "fsync": "on",
            "synchronous_commit": "on",
            "full_page_writes": "on",
            # a stuck test client must not hold row locks for ever (see cluster-on-postgres.md)
            "idle_in_transaction_session_timeout": "60s",
            **(settings or {}),
        }
        self._running = False
        atexit.register(self._at_exit)

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> "LocalPostgres":
        """Create the data dir if there is none, then start the server and wait until it accepts
        connections. A port of 0 picks a free one (kept for later restarts). No-op when running."""
        if self._running:
            return self
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.user is not None:
            _check_reachable(self.directory, self.user)
            os.chown(self.directory, self.user.pw_uid, self.user.pw_gid)
        if not (self.data_dir / "PG_VERSION").exists():
            # cp -a as the server's user: the copy is its own, with initdb's 0700 modes.
            self.run_tool(["cp", "-a", str(_template(self.bindir, self.user)), str(self.data_dir)])
        attempts = 5 if self.port == 0 else 1
        for attempt in range(attempts):
            port = self.port or free_port()
            self._write_settings(port)
            try:
                self.run_tool([str(self.bindir / "pg_ctl"), "start", "-D", str(self.data_dir), "-l", str(self.log_path),
                          "-w", "-t", str(int(timeout)), "-s"], timeout=timeout + 10)
            except PostgresError as exc:
                # another process took the free port between our pick and the bind: pick again
                if attempt + 1 < attempts and "already in use" in self.log()[-4000:]:
                    continue
                raise PostgresError(f"{exc}\n--- {self.log_path} (tail) ---\n{self.log()[-3000:]}") from None
            self.port = port
            self._running = True
            return self
        raise AssertionError("unreachable")

    def stop(self, mode: StopMode = "fast", timeout: float = 60.0) -> None:
        """Stop the server: "fast" (clients disconnected, checkpoint), or "immediate": a crash
        (no checkpoint; the next start replays the WAL)."""
        if not self._running:
            return
        self.run_tool([str(self.bindir / "pg_ctl"), "stop", "-D", str(self.data_dir), "-m", mode, "-w",
                  "-t", str(int(timeout)), "-s"], timeout=timeout + 10)
        self._running = False

    def kill9(self) -> None:
        """SIGKILL the postmaster and every backend at once (a machine loss, not a clean crash:
        nothing is told to finish); the data dir stays for a later start()."""
        postmaster = postmaster_pid(self.data_dir)
        if postmaster is None:
            self._running = False
            return
        os.kill(postmaster, signal.SIGSTOP)  # it starts no backend between the look below and the kill
        for pid in [postmaster, *children_of(postmaster)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._running = False

    def promote(self, timeout: float = 60.0) -> None:
        """`pg_ctl promote -w`: a standby leaves recovery and accepts writes (returns once it does)."""
        self.run_tool([str(self.bindir / "pg_ctl"), "promote", "-D", str(self.data_dir), "-w", "-t", str(int(timeout)),
                  "-s"], timeout=timeout + 10)

    @property
    def running(self) -> bool:
        """Whether start() succeeded and no stop() followed (a server killed from outside still
        counts as running)."""
        return self._running

    def close(self) -> None:
        """Stop the server (fast) and remove its data dir and log, or its whole directory when it
        made that directory itself."""
        atexit.unregister(self._at_exit)
        if self._running:
            try:
                self.stop("fast")
            except (PostgresError, subprocess.TimeoutExpired):
                try:
                    self.stop("immediate")
                except (PostgresError, subprocess.TimeoutExpired):
                    self._running = False  # killed from outside: nothing left to stop
        if self._own_directory:
            shutil.rmtree(self.directory, ignore_errors=True)
        else:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> "LocalPostgres":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _at_exit(self) -> None:
        """An interpreter exiting without close() must not leave a postmaster running."""
        if self._running:
            try:
                self.stop("immediate", timeout=10)
            except (PostgresError, subprocess.TimeoutExpired):
                pass

    # -- databases ------------------------------------------------------------------------------

    def dsn(self, dbname: str = "postgres") -> str:
        """A libpq/asyncpg URL for `dbname` on this server."""
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, name: str) -> str:
        """CREATE DATABASE `name`; returns its dsn."""
        self.execute(f'CREATE DATABASE "{_check_name(name)}"')
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        """DROP DATABASE `name` if it exists, disconnecting its clients first (WITH FORCE)."""
        self.execute(f'DROP DATABASE IF EXISTS "{_check_name(name)}" WITH (FORCE)')

    def execute(self, sql: str, dbname: str = "postgres", timeout: float = 60.0) -> str:
        """Run SQL through psql (unaligned, tuples only): what it printed. Synchronous on purpose,
        so fixtures and tools can call it inside or outside an event loop."""
        cmd = [str(self.bindir / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1",
               "-p", str(self.port), "-U", SUPERUSER, "-d", dbname, "-c", sql]
        return _run(cmd, None, cwd=self.directory, timeout=timeout, env={"PGCONNECT_TIMEOUT": "10"})

    def log(self) -> str:
        """The server's log so far (for failure messages)."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    # -- internals ------------------------------------------------------------------------------

    def run_tool(self, cmd: list[str], timeout: float = 120.0) -> str:
        """Run a PostgreSQL tool (pg_ctl, pg_basebackup, ...) as the server's OS user, in its directory."""
        return _run(cmd, self.user, cwd=self.directory, timeout=timeout)

    def _write_settings(self, port: int) -> None:
        """offsetd.conf, included by postgresql.conf: this run's port, socket dir and settings."""
        socket_dir = str(self.data_dir)
        if len(socket_dir) + len("/.s.PGSQL.65535") >= _SOCKET_PATH_MAX:
            socket_dir = ""  # path too long for a unix socket: TCP only
        values = {**self.settings, "port": str(port), "unix_socket_directories": socket_dir}
        lines = [f"{key} = '{value.replace(chr(39), chr(39) * 2)}'" for key, value in values.items()]
        conf = self.data_dir / "offsetd.conf"
        conf.write_text("\n".join(lines) + "\n")
        if self.user is not None:
            os.chown(conf, self.user.pw_uid, self.user.pw_gid)


def postmaster_pid(data_dir: Path) -> int | None:
    """The pid of the postmaster running on `data_dir` (its postmaster.pid), or None."""
    try:
        pid = int((data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None
    return pid if Path(f"/proc/{pid}").exists() else None


def children_of(parent: int) -> list[int]:
    """The processes whose parent is `parent` (a postmaster's backends, WAL writer, ...), from /proc."""
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat_line = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ')'
        if int(stat_line.rsplit(")", 1)[1].split()[1]) == parent:
            children.append(int(entry.name))
    return children


def _check_name(name: str) -> str:
    """A database name we can quote safely (letters, digits, underscores)."""
    if not _DB_NAME.match(name):
        raise ValueError(f"database name {name!r}: use letters, digits and underscores (at most 63)")
    return name
