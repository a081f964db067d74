"""`python -m offsetd.dev.cluster [--brokers 3] [--dir DIR] [--base-port 9092] [--standby]` (`make
cluster`): a local PostgreSQL and N `offsetd serve` brokers in cluster mode on 127.0.0.1, for trying
cluster mode on one machine. Prints the bootstrap list and the PostgreSQL URL, then runs until
Ctrl-C or SIGTERM, which stop the brokers gracefully and then PostgreSQL.

With --standby, PostgreSQL is a primary and a synchronous streaming standby, and the brokers use
the multi-host URL `postgresql://postgres@127.0.0.1:P1,127.0.0.1:P2/offsetd?target_session_attrs=read-write`:
kill the primary, `pg_ctl promote` the standby (the commands are printed) and watch them carry on."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from .broker import BrokerProcess
from .postgres import LocalPostgres, PostgresError, PostgresNotFound, postmaster_pid
from .postgres_standby import multi_host_dsn, start_standby

DATABASE = "offsetd"
_DEFAULT_CONFIG = Path("config/server.properties")


def _parser() -> argparse.ArgumentParser:
    """The command line of the dev cluster."""
    parser = argparse.ArgumentParser(prog="python -m offsetd.dev.cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", type=int, default=3, help="how many brokers (node.id 1..N; default 3)")
    parser.add_argument("--dir", type=Path, help="keep PostgreSQL's data, broker logs and log.dirs here "
                        "(reused by the next run); default: a temporary directory removed at exit")
    parser.add_argument("--base-port", type=int, default=9092, help="broker N listens on base-port + N - 1")
    parser.add_argument("--metrics-base-port", type=int, default=9404,
                        help="broker N's metrics listener and console on this + N - 1 (0: free ports)")
    parser.add_argument("--config", type=Path, default=_DEFAULT_CONFIG if _DEFAULT_CONFIG.exists() else None,
                        help="broker config file (default: config/server.properties when present)")
    parser.add_argument("--standby", action="store_true",
                        help="a synchronous standby beside the primary, and the brokers on both (failover)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="an extra broker setting for every broker, e.g. broker.session.timeout.ms=3000")
    return parser


def broker_overrides(dsn: str, node_id: int, port: int, metrics_port: int, extra: list[str]) -> dict[str, str]:
    """The cluster-mode settings of broker `node_id`, then the user's --override values."""
    overrides = {
        "storage.engine": dsn,
        "node.id": str(node_id),
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "metrics.listener": f"http://127.0.0.1:{metrics_port}",
    }
    for item in extra:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--override {item!r}: expected KEY=VALUE")
        overrides[key.strip()] = value.strip()
    return overrides


def _stop_brokers(brokers: list[BrokerProcess]) -> None:
    """SIGTERM every running broker at once (one thread each) and wait; SIGKILL after 30 s."""
    def stop(broker: BrokerProcess) -> None:
        try:
            broker.stop(timeout=30)
        except subprocess.TimeoutExpired:
            print(f"offsetd.dev.cluster: broker {broker.bootstrap} did not stop in 30 s; killed", file=sys.stderr)
            broker.kill9()

    threads = [threading.Thread(target=stop, args=(b,)) for b in brokers if b.alive()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def main(argv: list[str] | None = None) -> int:
    """Start PostgreSQL and the brokers, print where they are, wait for a stop signal."""
    args = _parser().parse_args(argv)
    if args.brokers < 1:
        raise SystemExit("--brokers must be at least 1")
    temporary = args.dir is None
    directory = Path(tempfile.mkdtemp(prefix="offsetd-cluster-") if temporary else args.dir).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    if temporary:
        os.chmod(directory, 0o755)  # PostgreSQL runs as an unprivileged user when we are root
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    brokers: list[BrokerProcess] = []
    servers: list[LocalPostgres] = []
    try:
        pg = LocalPostgres(directory / "postgres")
        servers.append(pg.start())
        if not pg.execute(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'").strip():
            pg.create_database(DATABASE)
        if args.standby:
            servers.append(start_standby(pg, directory / "postgres-standby"))
    except (PostgresNotFound, PostgresError) as exc:
        print(f"offsetd.dev.cluster: {exc}", file=sys.stderr)
        _stop_servers(servers, temporary)
        return 1
    try:
        dsn = multi_host_dsn(servers, DATABASE) if args.standby else pg.dsn(DATABASE)
        for node_id in range(1, args.brokers + 1):
            broker = BrokerProcess(directory / f"broker-{node_id}",
                                   broker_overrides(dsn, node_id, args.base_port + node_id - 1,
                                                    args.metrics_base_port and args.metrics_base_port + node_id - 1,
                                                    args.override),
                                   config=args.config.resolve() if args.config else None, start_new_session=True)
            broker.port = args.base_port + node_id - 1
            brokers.append(broker.launch())  # all boot at once; waited for below
        for node_id, broker in enumerate(brokers, 1):
            try:
                broker.wait_listening(timeout=60)
            except AssertionError as exc:
                print(f"offsetd.dev.cluster: broker {node_id} did not start: {exc}", file=sys.stderr)
                return 1
        consoles = ", ".join(f"http://127.0.0.1:{args.metrics_base_port + n}/console/" for n in range(len(brokers)))
        print(f"offsetd cluster: {len(brokers)} brokers on PostgreSQL, files in {directory}\n"
              f"  bootstrap servers: {','.join(b.bootstrap for b in brokers)}\n"
              f"  storage.engine:    {dsn}\n"
              f"  logs:              {directory}/broker-N.log, {', '.join(str(s.log_path) for s in servers)}\n"
              + (_failover_hint(servers) if args.standby else "")
              + (f"  lag consoles:      {consoles}\n" if args.metrics_base_port else "") +
              "Ctrl-C (or SIGTERM) stops the brokers, then PostgreSQL.", flush=True)
        reported: set[int] = set()
        while not stop.wait(1.0):
            for node_id, broker in enumerate(brokers, 1):
                if not broker.alive() and node_id not in reported:
                    reported.add(node_id)  # say so once; the others keep running (a failover to watch)
                    print(f"offsetd.dev.cluster: broker {node_id} exited (rc={broker.proc.poll()}); "  # type: ignore[union-attr]
                          f"see {broker.log_path}", file=sys.stderr, flush=True)
        print("offsetd.dev.cluster: stopping brokers", flush=True)
        return 0
    finally:
        _stop_brokers(brokers)
        _stop_servers(servers, temporary)
        if temporary:
            shutil.rmtree(directory, ignore_errors=True)
        print("offsetd.dev.cluster: stopped", flush=True)


def _stop_servers(servers: list[LocalPostgres], temporary: bool) -> None:
    """Stop PostgreSQL (the standby first): removed with its data when the directory is temporary."""
    for server in reversed(servers):
        if temporary:
            server.close()
        else:
            try:
                server.stop("fast")
            except PostgresError as exc:  # killed from outside (a failover tried): nothing to stop
                print(f"offsetd.dev.cluster: {exc}", file=sys.stderr)


def _failover_hint(servers: list[LocalPostgres]) -> str:
    """The lines that tell how to try a failover on the primary and standby just started."""
    primary, standby = servers
    pid = postmaster_pid(primary.data_dir)
    runas = f"sudo -u {standby.user.pw_name} " if standby.user is not None else ""
    return (f"  PostgreSQL:        primary 127.0.0.1:{primary.port}, synchronous standby 127.0.0.1:{standby.port}\n"
            f"  failover:          kill -9 {pid} $(pgrep -P {pid})   # the primary's postmaster and backends\n"
            f"                     {runas}{standby.bindir}/pg_ctl promote -D {standby.data_dir}\n")


if __name__ == "__main__":
    sys.exit(main())
