"""`offsetd console`: the broker's lag console (pages, /v1/lag, history, /metrics' lag families)
served against any Kafka cluster through the admin clients. It sees what the `--command-config`
principal may describe - the cluster's ACLs decide - and changes nothing.

    offsetd console --bootstrap-server HOST:PORT [--command-config FILE] [--listen http://127.0.0.1:9405]
"""

from __future__ import annotations

import asyncio
import signal
import sys

from ..config import BrokerConfig, ConfigError
from ..metrics.http import MetricsHttpServer
from .client_config import build_client_config
from .cluster import Cluster
from .console_source import AdminHistory
from .errors import ToolError, ToolParser, UsageError
from .lag_source import AdminLagSource


def build_parser() -> ToolParser:
    p = ToolParser(prog="offsetd console", description="The lag web console against any Kafka cluster.")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", required=True, help="the server(s) to connect to")
    p.add_argument("--command-config", metavar="FILE", help="properties file with client configs (security etc.)")
    p.add_argument("--timeout", type=int, default=10000, metavar="MS", help="timeout of each request (default 10000)")
    p.add_argument("--listen", default="http://127.0.0.1:9405", metavar="URL",
                   help="where to serve the console (default http://127.0.0.1:9405; port 0: any free port)")
    return p


async def serve(cluster: Cluster, host: str, port: int) -> int:
    server = MetricsHttpServer([], lag=AdminLagSource(cluster), history=AdminHistory(cluster))
    await server.start(host, port)
    print(f"offsetd console on {server.url}/console/ for {cluster.client_config['bootstrap.servers']} "
          "(Ctrl-C stops it)", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await server.stop()
    return 0


def main(argv: list[str]) -> int:
    """Run `offsetd console ARGV` until Ctrl-C or SIGTERM (exit 0; 1: cannot listen; 2: bad input)."""
    try:
        args = build_parser().parse_args(argv)
        try:
            listen = BrokerConfig({"metrics.listener": args.listen}).get("metrics.listener")
        except ConfigError as exc:
            raise UsageError(f"--listen: {exc}") from None
        if listen is None:
            raise UsageError("--listen: expected http://host:port")
        cluster = Cluster(build_client_config(args.bootstrap_server, args.command_config), args.timeout / 1000)
        try:
            return asyncio.run(serve(cluster, listen.host, listen.port))
        finally:
            cluster.close()
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    except UsageError as exc:
        sys.stderr.write(f"offsetd console: {exc}\n")
        return 2
    except (ToolError, OSError) as exc:
        sys.stderr.write(f"offsetd console: {exc}\n")
        return 1
