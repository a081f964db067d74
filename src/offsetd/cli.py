"""The `offsetd` command. `offsetd serve [CONFIG_FILE] [--override key=value ...]` mirrors
`kafka-server-start.sh`; `groups`, `share-groups`, `transactions`, `acls`, `configs`, `offsets-log` and `spark`
are client-side tools with their own option parsers (they work against any Kafka cluster)."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import signal
import sys

# kio registers Hypothesis strategies for its types whenever hypothesis can be imported (it can
# where the test extras are installed). The command has no use for them and the import costs a
# broker 0.2 s of start-up, 1.5 s in a directory without a ./.hypothesis (which it then creates);
# a process that already has hypothesis (pytest, calling main() in-process) keeps it.
sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]

from .config import BrokerConfig, ConfigError  # noqa: E402

log = logging.getLogger("offsetd")


def _serve(args: argparse.Namespace) -> int:
    try:
        config = BrokerConfig.load(args.config, args.override or [])
    except ConfigError as exc:
        print(f"offsetd: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(_run(config))


async def _run(config: BrokerConfig) -> int:
    from .server.app import ClusterJoinError, KafkaServer

    try:
        server = KafkaServer(config)
        await server.start()
    except ConfigError as exc:  # a TLS setting ssl cannot use, found as the listeners' contexts are built
        print(f"offsetd: {exc}", file=sys.stderr)
        return 2
    except ClusterJoinError as exc:
        print(f"offsetd: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        listener = config.listener
        print(f"offsetd: cannot listen on {listener.host}:{listener.port}: {exc.strerror}", file=sys.stderr)
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # only now: whoever waits for this line may send SIGTERM at once and expect a clean stop
    listener, advertised = config.listener, config.advertised_listener
    print(f"offsetd listening on {listener.host or '0.0.0.0'}:{server.port} "
          f"(advertised {advertised.host}:{advertised.port}), data in {config.log_dir.resolve()}",
          flush=True)
    await stop.wait()
    log.info("shutting down")
    await server.stop()
    print("offsetd stopped cleanly", flush=True)
    return 0


# Sub-commands that own their argument parsing: name -> (module, help). Each module has
# `main(argv: list[str]) -> int`; they are imported only when used (the Spark tools need pyspark).
TOOLS: dict[str, tuple[str, str]] = {
    "groups": ("offsetd.admin.groups_cli", "kafka-consumer-groups compatible group tool"),
    "share-groups": ("offsetd.admin.share_groups_cli", "kafka-share-groups compatible share-group tool"),
    "transactions": ("offsetd.admin.transactions_cli", "kafka-transactions compatible transaction tool"),
    "acls": ("offsetd.admin.acls_cli", "kafka-acls compatible ACL tool"),
    "configs": ("offsetd.admin.configs_cli", "kafka-configs compatible SCRAM user tool (and first-admin bootstrap)"),
    "offsets-log": ("offsetd.admin.offsets_log_cli", "decode __consumer_offsets (dump)"),
    "lag": ("offsetd.admin.lag_cli", "lag alerts against any Kafka cluster (the broker's lag.alert rules as a daemon)"),
    "console": ("offsetd.admin.console_cli", "the lag web console against any Kafka cluster"),
    "spark": ("offsetd.spark.cli", "PySpark pipelines over the offsets log"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="offsetd", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the broker",
                                description="Run the broker, like kafka-server-start.sh.")
    serve.add_argument("config", nargs="?", help="server.properties file (Kafka's key names)")
    serve.add_argument("--override", action="append", metavar="KEY=VALUE",
                       help="override a config key (repeatable)")
    serve.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    serve.set_defaults(run=_serve)
    for name, (_module, help_text) in TOOLS.items():
        commands.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in TOOLS:
        return importlib.import_module(TOOLS[argv[0]][0]).main(argv[1:])
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=getattr(args, "log_level", "INFO"), stream=sys.stderr,
                        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s")
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
