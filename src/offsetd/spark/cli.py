"""`offsetd spark <pipeline> ...`: run a pipeline in a local Spark (local[*] by default) or
under spark-submit, with Parquet output in `--output DIR/<pipeline>`.

    offsetd spark commit-history  (--log-dirs PATH | --bootstrap-server HOST:PORT) --output DIR
    offsetd spark lag-history     --bootstrap-server HOST:PORT [--log-dirs PATH] --output DIR
    offsetd spark expiry-forecast (...) --output DIR [--retention-minutes N] [--group-retention G=MIN]
    offsetd spark reset-audit     (...) --output DIR [--jump-threshold N] [--as-of TIME] [--undo-file F]
    offsetd spark report          --output DIR        (reads the outputs above, writes DIR/report.html)

Under spark-submit the master comes from spark-submit (`--master`); run this file as the
application: `spark-submit --master spark://host:7077 .../offsetd/spark/cli.py commit-history ...`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime, timezone
from typing import Callable, Mapping

from pyspark.sql import DataFrame, SparkSession

# absolute imports: spark-submit runs this file as a script
from offsetd.config import parse_properties
from offsetd.spark import pipelines, register
from offsetd.spark.report import build_report


def _time_ms(text: str) -> int:
    """Epoch milliseconds, or an ISO-8601 time (UTC unless it names a zone) -> epoch ms."""
    if text.lstrip("-").isdigit():
        return int(text)
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return int(parsed.timestamp() * 1000)


def _group_retention(items: list[str]) -> dict[str, int]:
    """GROUP=MINUTES pairs -> {group: retention ms} (-1 = never)."""
    out = {}
    for item in items:
        group, _, minutes = item.rpartition("=")
        if not group:
            raise argparse.ArgumentTypeError(f"--group-retention wants GROUP=MINUTES, got {item!r}")
        out[group] = int(minutes) * 60_000 if int(minutes) >= 0 else -1
    return out


def build_parser() -> argparse.ArgumentParser:
    """One sub-command per pipeline, sharing the input / output / Spark options."""
    parser = argparse.ArgumentParser(prog="offsetd spark", description="PySpark pipelines over the offsets log")
    sub = parser.add_subparsers(dest="pipeline", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--output", required=True, help="output directory; each pipeline writes <output>/<name>")
    common.add_argument("--master", help="Spark master (default local[*]; ignored under spark-submit)")
    common.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting")
    source = argparse.ArgumentParser(add_help=False)
    source.add_argument("--bootstrap-server", help="read __consumer_offsets (and topics) from this cluster")
    source.add_argument("--log-dirs", help="read __consumer_offsets segment files under this directory")
    source.add_argument("--command-config", help="client properties file (security settings)")
    sub.add_parser("commit-history", parents=[common, source], help="every commit ever seen")
    sub.add_parser("lag-history", parents=[common, source], help="committed offset vs log end over time")
    expiry = sub.add_parser("expiry-forecast", parents=[common, source], help="when offsets expire (KIP-211/496)")
    expiry.add_argument("--retention-minutes", type=int, default=10080, help="offsets.retention.minutes")
    expiry.add_argument("--group-retention", action="append", default=[], metavar="GROUP=MINUTES",
                        help="a group's own offsets.retention.minutes")
    expiry.add_argument("--now", help="also flag offsets expired at this time (ISO-8601 or epoch ms)")
    audit = sub.add_parser("reset-audit", parents=[common, source], help="rewinds and jumps, with an undo plan")
    audit.add_argument("--jump-threshold", type=int, default=pipelines.DEFAULT_JUMP,
                       help="forward moves larger than this are reported as jumps")
    audit.add_argument("--as-of", help="undo plan restores offsets as of this time (default: before each reset)")
    audit.add_argument("--undo-file", help="undo plan CSV path (default <output>/reset-audit-undo.csv)")
    sub.add_parser("report", parents=[common], help="HTML report with plots from the outputs above")
    return parser


# Session settings of every pipeline run (overridable with --conf): Parquet timestamps as plain
# int64 microseconds (the current standard; INT96 needs a calendar conversion per value).
SPARK_DEFAULTS = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}


def session(args: argparse.Namespace) -> SparkSession:
    """The SparkSession: spark-submit's when run under it, else local[*] (or --master)."""
    builder = SparkSession.builder.appName(f"offsetd {args.pipeline}")
    for key, value in SPARK_DEFAULTS.items():
        builder = builder.config(key, value)
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not launched by spark-submit / a running JVM
        builder = builder.master(args.master or "local[*]")
        # Python workers run this interpreter (where offsetd is installed), not `python3` on PATH
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    for item in args.conf:
        key, _, value = item.partition("=")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


def _client_options(args: argparse.Namespace) -> dict[str, str]:
    """`kafka.*` source options from --command-config (Java `.properties`, as Kafka's tools read it)."""
    if not getattr(args, "command_config", None):
        return {}
    with open(args.command_config, encoding="utf-8") as f:
        return {f"kafka.{key}": value for key, value in parse_properties(f.read()).items()}


def offsets_log(spark: SparkSession, args: argparse.Namespace, columns: list[str] | None = None,
                options: Mapping[str, str] | None = None) -> DataFrame:
    """The offsets-log input (only `columns`, if given; more source `options`): segment files
    when --log-dirs is given, else the cluster."""
    if not args.log_dirs and not args.bootstrap_server:
        raise SystemExit("give --log-dirs or --bootstrap-server")
    if args.log_dirs:
        return pipelines.load_offsets_log(spark, path=args.log_dirs, options=options, columns=columns)
    return pipelines.load_offsets_log(spark, bootstrap=args.bootstrap_server,
                                      options={**_client_options(args), **(options or {})}, columns=columns)


def read_commit_history(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    """commit_history over the offsets log, reading only live commits and the columns it needs."""
    log = offsets_log(spark, args, pipelines.COMMIT_HISTORY_COLUMNS, pipelines.COMMITS_ONLY)
    return pipelines.commit_history(log)


def _lag_inputs(spark: SparkSession, args: argparse.Namespace, commits: DataFrame) -> tuple[DataFrame, DataFrame]:
    """The committed topics' records (offset, timestamp) and their current log end offsets."""
    from offsetd.spark.kafka_client import LATEST, Cluster

    if not args.bootstrap_server:
        raise SystemExit("lag-history reads the topics: give --bootstrap-server")
    options = {"kafka.bootstrap.servers": args.bootstrap_server, **_client_options(args)}
    cluster = Cluster(options)
    existing = cluster.topics()
    topics = sorted(t for t in (r["topic"] for r in commits.select("topic").distinct().collect()) if t in existing)
    parts = cluster.partitions_of(topics)
    ends = cluster.list_offsets(parts, LATEST)
    log_end = spark.createDataFrame([(t, p, o) for (t, p), o in ends.items()],
                                    "topic string, partition int, log_end_offset long")
    reader = spark.read.format("offsetd").option("startingOffsets", "earliest").options(**options)
    if topics:
        records = reader.option("subscribe", ",".join(topics)).load().select("topic", "partition", "offset",
                                                                            "timestamp")
    else:
        records = spark.createDataFrame([], "topic string, partition int, offset long, timestamp timestamp")
    return records, log_end


def run_commit_history(spark: SparkSession, args: argparse.Namespace) -> str:
    """commit-history: every commit, from the pruned offsets log."""
    return _write(read_commit_history(spark, args), args, "commit-history")


def run_lag_history(spark: SparkSession, args: argparse.Namespace) -> str:
    """lag-history: commits against the topics' records and current log end offsets."""
    history = read_commit_history(spark, args).cache()
    records, log_end = _lag_inputs(spark, args, history)
    return _write(pipelines.lag_history(history, records, log_end, int(time.time() * 1000)), args, "lag-history")


def run_expiry_forecast(spark: SparkSession, args: argparse.Namespace) -> str:
    """expiry-forecast with the given retention settings (the log is read once, cached: the
    offsets, the classic and the consumer groups' states are three passes over it)."""
    forecast = pipelines.expiry_forecast(
        offsets_log(spark, args).cache(), args.retention_minutes * 60_000, _group_retention(args.group_retention),
        _time_ms(args.now) if args.now else None)
    return _write(forecast, args, "expiry-forecast")


def run_reset_audit(spark: SparkSession, args: argparse.Namespace) -> str:
    """reset-audit plus its undo plan CSV."""
    log = offsets_log(spark, args).cache()
    resets = pipelines.reset_audit(log, args.jump_threshold).cache()
    target = _write(resets, args, "reset-audit")
    undo = args.undo_file or os.path.join(args.output, "reset-audit-undo.csv")
    lines = pipelines.write_undo_csv(pipelines.undo_plan(log, resets, _time_ms(args.as_of) if args.as_of else None),
                                     undo)
    print(f"undo plan: {undo} ({lines} partitions); apply with kafka-consumer-groups --reset-offsets "
          f"--from-file {undo} --all-groups --execute (groups must be inactive)")
    return target


def run_report(spark: SparkSession, args: argparse.Namespace) -> str:
    """report.html from the outputs already under --output."""
    return build_report(spark, args.output, os.path.join(args.output, "report.html"))


def _write(df: DataFrame, args: argparse.Namespace, name: str) -> str:
    """Overwrite <output>/<name> with the DataFrame as Parquet."""
    target = os.path.join(args.output, name)
    pipelines.parquet_writer(df).parquet(target)
    return target


PIPELINES: dict[str, Callable[[SparkSession, argparse.Namespace], str]] = {
    "commit-history": run_commit_history,
    "lag-history": run_lag_history,
    "expiry-forecast": run_expiry_forecast,
    "reset-audit": run_reset_audit,
    "report": run_report,
}


def main(argv: list[str]) -> int:
    """Entry point of `offsetd spark`; returns the exit status."""
    args = build_parser().parse_args(argv)
    os.makedirs(args.output, exist_ok=True)
    spark = session(args)
    started = time.monotonic()
    target = PIPELINES[args.pipeline](spark, args)
    print(f"{args.pipeline}: wrote {target} in {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":  # spark-submit runs this file as the application
    sys.exit(main(sys.argv[1:]))
