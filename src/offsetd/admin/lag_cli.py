"""`offsetd lag`: the broker's lag alert rules (`lag.alert.*`) as a small daemon against any Kafka
cluster, through the admin clients. Every `lag.alert.interval.ms` it takes a look at lag (the
numbers of `offsetd groups --describe --verbose`), judges the rules and notifies: a line on
stdout per event (JSON lines with `--output json`), the log, and the webhook if one is set.

    offsetd lag --bootstrap-server HOST:PORT [--command-config FILE] [--config alerts.properties]
                [--set lag.alert.KEY=VALUE ...] [--once] [--output text|json]

`--once` judges a single look with `lag.alert.for.ms` taken as 0 and exits 1 when an alert
fires (for cron jobs and CI checks); otherwise it runs until Ctrl-C or SIGTERM."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from dataclasses import replace
from pathlib import Path

from ..config import BrokerConfig, ConfigError, parse_properties
from ..config_keys import SCHEMA
from ..lag.alerts import AlertEvaluator, AlertEvent, rules_from_config
from ..lag.notify import Notifier, log_line
from .client_config import build_client_config
from .cluster import Cluster
from .errors import ToolError, ToolParser, UsageError
from .lag_source import AdminLagSource

PREFIX = "lag.alert."


def build_parser() -> ToolParser:
    p = ToolParser(prog="offsetd lag", description="Lag alert rules (lag.alert.* keys) against any Kafka cluster.")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", required=True, help="the server(s) to connect to")
    p.add_argument("--command-config", metavar="FILE", help="properties file with client configs (security etc.)")
    p.add_argument("--timeout", type=int, default=10000, metavar="MS", help="timeout of each request (default 10000)")
    p.add_argument("--config", metavar="FILE", help="properties file with lag.alert.* keys (e.g. server.properties)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a lag.alert.* key (repeatable)")
    p.add_argument("--once", action="store_true", help="judge one look (for.ms as 0), exit 1 if an alert fires")
    p.add_argument("--output", choices=("text", "json"), default="text", help="events as lines or JSON lines")
    return p


def alert_config(path: str | None, settings: list[str]) -> BrokerConfig:
    """The lag.alert.* keys of the file (others in it are ignored: a server.properties works) and
    of --set (anything else there is an error), validated as the broker validates them."""
    values: dict[str, str] = {}
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read --config {path}: {exc.strerror}") from None
        values.update({k: v for k, v in parse_properties(text).items() if k.startswith(PREFIX)})
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep or not key.strip().startswith(PREFIX):
            raise UsageError(f"--set {item!r}: expected lag.alert.KEY=VALUE")
        values[key.strip()] = value.strip()
    unknown = sorted(key for key in values if key not in SCHEMA)
    if unknown:
        raise UsageError(f"unknown key(s): {', '.join(unknown)}")
    try:
        return BrokerConfig(values)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def print_events(events: list[AlertEvent], source: str, as_json: bool) -> None:
    for event in events:
        print(json.dumps({**event.to_json(), "source": source}) if as_json else log_line(event, source), flush=True)


async def run(source: AdminLagSource, evaluator: AlertEvaluator, notifier: Notifier, interval_ms: int,
              as_json: bool, once: bool) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        while True:
            snapshot = await source.snapshot()
            events = evaluator.evaluate(snapshot, snapshot.taken_at_ms)
            print_events(events, notifier.source, as_json)
            notifier.notify(events)
            if once:
                await notifier.drain()
                return 1 if evaluator.firing() else 0
            try:
                await asyncio.wait_for(stop.wait(), interval_ms / 1000)
                await notifier.drain()
                return 0
            except asyncio.TimeoutError:
                pass
    finally:
        notifier.close()


def main(argv: list[str]) -> int:
    """Run `offsetd lag ARGV`; exit status 0 (1: --once found an alert firing or the cluster
    failed, 2: bad input)."""
    try:
        args = build_parser().parse_args(argv)
        config = alert_config(args.config, args.set)
        rules = rules_from_config(config.get)
        if not rules.any:
            raise UsageError("no rule is set: give at least one of lag.alert.lag.threshold, "
                             "lag.alert.lag.growth.rate, lag.alert.time.lag.threshold.ms, lag.alert.expiry.warning.ms")
        if args.once:
            rules = replace(rules, for_ms=0)
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                            format="[%(asctime)s] %(levelname)s %(name)s: %(message)s")
        cluster = Cluster(build_client_config(args.bootstrap_server, args.command_config), args.timeout / 1000)
        try:
            notifier = Notifier(args.bootstrap_server, config.get("lag.alert.webhook.url"),
                                config.get("lag.alert.webhook.timeout.ms"))
            return asyncio.run(run(AdminLagSource(cluster, rules.include), AlertEvaluator(rules), notifier,
                                   config.get("lag.alert.interval.ms"), args.output == "json", args.once))
        finally:
            cluster.close()
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    except UsageError as exc:
        sys.stderr.write(f"offsetd lag: {exc}\n")
        return 2
    except ToolError as exc:
        sys.stderr.write(f"offsetd lag: {exc}\n")
        return 1
