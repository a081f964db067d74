"""The offsets pipelines as DataFrame functions: commit history, lag history, expiry forecast,
reset audit with an undo plan. Each takes DataFrames and returns DataFrames, so they compose
in any Spark job; `cli.py` wires them to sources and Parquet outputs.

Inputs are offsets-log rows (`offsets_log_source`, schemas.OFFSETS_LOG_FIELDS); "log order"
is (log_partition, log_offset), the order in which the coordinator applied the records - a
group and all its offsets live in one log partition, so per-group order is total.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from pyspark.sql import Column, DataFrame, DataFrameWriter, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from .consumer_groups import consumer_group_states, consumer_rosters, group_type_so_far
from .schemas import GROUP_METADATA, OFFSET_COMMIT, OFFSETS_LOG_FIELDS

DEFAULT_RETENTION_MS = 10080 * 60 * 1000  # offsets.retention.minutes, Kafka's default (7 days)
DEFAULT_JUMP = 1_000_000  # reset-audit: a forward move of more than this many offsets is a jump
LOG_ORDER = ["log_partition", "log_offset"]
TP = ["group", "topic", "partition"]


def load_offsets_log(spark: SparkSession, *, path: str | None = None, bootstrap: str | None = None,
                     options: Mapping[str, str] | None = None, columns: Sequence[str] | None = None) -> DataFrame:
    """The offsets log from segment files (`path`) or a cluster (`bootstrap`); with `columns`,
    only those are decoded (e.g. COMMIT_HISTORY_COLUMNS). The work is spread over the session's
    default parallelism (option minPartitions, which `options` may override)."""
    from . import register

    register(spark)
    reader = spark.read.format("offsetd-offsets-log")
    try:
        reader = reader.option("minPartitions", str(spark.sparkContext.defaultParallelism))
    except NotImplementedError:  # Spark Connect has no SparkContext: the source's own default
        pass
    if columns:
        types = {name: ddl for name, _, ddl in OFFSETS_LOG_FIELDS}
        reader = reader.schema(", ".join(f"`{name}` {types[name]}" for name in columns))
    if path:
        reader = reader.option("path", path)
    if bootstrap:
        reader = reader.option("kafka.bootstrap.servers", bootstrap)
    return reader.options(**(options or {})).load()


def parquet_writer(df: DataFrame) -> DataFrameWriter:
    """An overwriting Parquet writer tuned for offsets data (a caller may override any option):
    * format version 2 (`parquet.writer.version`): integer columns are delta-encoded, and
      offsets, log positions and timestamps grow steadily - the output is about 20x smaller
      than version 1 with snappy, and faster to write. Spark (3.3+) and Arrow read it (the
      tests do both); set the option to v1 for readers without format 2;
    * dictionaries only for the string columns (group, topic, metadata, ... repeat endlessly);
      offsets and timestamps are nearly unique, and building dictionaries for them only to
      abandon them costs about a third of the write."""
    writer = (df.write.mode("overwrite").option("parquet.writer.version", "v2")
              .option("parquet.enable.dictionary", "false"))
    for field in df.schema.fields:
        if isinstance(field.dataType, StringType):
            writer = writer.option(f"parquet.enable.dictionary#{field.name}", "true")
    return writer


def _ms_to_ts(col: Column) -> Column:
    """Epoch milliseconds -> Spark timestamp (null for -1 / null)."""
    return F.when(col >= 0, F.timestamp_millis(col))


# ----------------------------------------------------------------------------- commit history

COMMIT_FIELDS = [*TP, "offset", "leader_epoch", "metadata", "commit_timestamp", "expire_timestamp"]
COMMIT_HISTORY_COLUMNS = [*COMMIT_FIELDS, *LOG_ORDER]
"""The offsets-log columns commit_history reads (load_offsets_log(columns=...) prunes the rest)."""
COMMITS_ONLY = {"recordTypes": OFFSET_COMMIT, "includeTombstones": "false"}
"""Source options that read only live offset commits: with COMMIT_HISTORY_COLUMNS, the read
commit_history needs, selected at the source (no record_type or tombstone column to filter on)."""


def commit_history(log: DataFrame) -> DataFrame:
    """Every offset commit in the log: who committed what, when, where in the log. `log` is the
    whole offsets log, or one read with COMMITS_ONLY (then there is nothing left to filter)."""
    if "record_type" in log.columns:
        log = log.where((F.col("record_type") == OFFSET_COMMIT) & ~F.col("tombstone"))
    return log.select(*COMMIT_FIELDS, _ms_to_ts(F.col("commit_timestamp")).alias("commit_time"), *LOG_ORDER)


# -------------------------------------------------------------------------------- lag history

def lag_history(commits: DataFrame, topic_records: DataFrame, log_end: DataFrame, now_ms: int) -> DataFrame:
    """Committed offset against the log end offset over time, per group and partition.

    One sample per commit - the log end at the commit time is reconstructed from the topic's
    records (the highest offset + 1 among records with timestamp <= commit time: an as-of
    join done as one window over the merged, time-ordered event stream) - plus one sample at
    `now_ms` per group and partition from the current log end offsets (`log_end`: topic,
    partition, log_end_offset) and the last commit. Lag is log end - committed offset, never
    negative (a commit cannot pass the log end; producer CreateTime skew could suggest it).
    A partition whose records before a commit were all deleted has lag null at that commit.
    """
    data = topic_records.select("topic", "partition", (F.unix_millis("timestamp")).alias("time_ms"),
                                F.lit(0).alias("kind"), (F.col("offset") + 1).alias("end"),
                                F.lit(None).cast("string").alias("group"), F.lit(None).cast("long").alias("offset"))
    marks = commits.select("topic", "partition", F.col("commit_timestamp").alias("time_ms"), F.lit(1).alias("kind"),
                           F.lit(None).cast("long").alias("end"), "group", "offset")
    asof = Window.partitionBy("topic", "partition").orderBy("time_ms", "kind") \
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    at_commits = (data.unionByName(marks).withColumn("log_end_offset", F.max("end").over(asof))
                  .where(F.col("kind") == 1)
                  .select(*TP, "time_ms", "offset", "log_end_offset", F.lit("commit").alias("sample")))
    last = Window.partitionBy(*TP).orderBy(F.col("time_ms").desc(), F.col("offset").desc())
    latest = (commits.select(*TP, F.col("commit_timestamp").alias("time_ms"), "offset")
              .withColumn("n", F.row_number().over(last)).where("n = 1").drop("n", "time_ms"))
    at_now = (latest.join(log_end, ["topic", "partition"])
              .select(*TP, F.lit(now_ms).cast("long").alias("time_ms"), "offset", "log_end_offset",
                      F.lit("now").alias("sample")))
    samples = at_commits.unionByName(at_now)
    end = F.greatest("log_end_offset", "offset")
    return samples.select(
        *TP, "time_ms", _ms_to_ts(F.col("time_ms")).alias("time"), F.col("offset").alias("committed_offset"),
        F.when(F.col("log_end_offset").isNotNull(), end).alias("log_end_offset"),
        F.when(F.col("log_end_offset").isNotNull(), end - F.col("offset")).alias("lag"), "sample")


# ---------------------------------------------------------------------------- expiry forecast

def group_states(log: DataFrame) -> DataFrame:
    """Each group's state as a broker would load it from the log: the last GroupMetadata
    record (Stable when it lists members, else Empty), with its subscribed topics, and the log
    position of the group's last tombstone (offsets before it were deleted with the group)."""
    groups = log.where(F.col("record_type") == GROUP_METADATA)
    last = Window.partitionBy("group").orderBy(*[F.col(c).desc() for c in LOG_ORDER])
    final = groups.withColumn("n", F.row_number().over(last)).where("n = 1")
    tombstones = (groups.where("tombstone").groupBy("group")
                  .agg(F.max(F.struct(*LOG_ORDER)).alias("deleted_at")))
    topics = F.flatten(F.transform("members", lambda m: m["subscribed_topics"]))
    unparsable = F.exists("members", lambda m: m["subscribed_topics"].isNull())
    subscribed = (F.when(F.col("protocol_type") != "consumer", F.lit(None))
                  .when(F.size("members") == 0, F.array().cast("array<string>"))
                  .when(F.col("protocol").isNull() | unparsable, F.lit(None))
                  .otherwise(F.array_distinct(topics)))
    live = final.where(~F.col("tombstone")).select(
        "group", F.when(F.col("protocol_type") != "", F.col("protocol_type")).alias("protocol_type"),
        F.when(F.size("members") > 0, "Stable").otherwise("Empty").alias("state"),
        "state_timestamp", subscribed.alias("subscribed_topics"))
    return tombstones.join(live, "group", "full")


def current_offsets(log: DataFrame) -> DataFrame:
    """The offsets a broker would hold after replaying the log: the last OffsetCommit record
    per group and partition, unless it is a tombstone or the group was deleted after it."""
    commits = log.where(F.col("record_type") == OFFSET_COMMIT)
    last = Window.partitionBy(*TP).orderBy(*[F.col(c).desc() for c in LOG_ORDER])
    return (commits.withColumn("n", F.row_number().over(last)).where("n = 1 and not tombstone")
            .select(*TP, "offset", "leader_epoch", "metadata", "commit_timestamp", "expire_timestamp", *LOG_ORDER))


def expiry_forecast(log: DataFrame, retention_ms: int = DEFAULT_RETENTION_MS,
                    group_retention_ms: Mapping[str, int] | None = None, now_ms: int | None = None) -> DataFrame:
    """When each committed offset expires if nothing changes (KIP-211 / KIP-496, reference §2
    and B7; the same rules as the broker's coordinator `expiry_times`):

    * a group is subscribed to a topic per its members' subscriptions (consumer protocol;
      unknown subscriptions count as subscribed): those offsets never expire while so;
    * explicit expire timestamp (OffsetCommit v1 value) wins;
    * no protocol type (standalone, admin-only, Spark commitToGroup): commit time + retention;
    * Empty group: the time it became Empty (state timestamp; commit time when unknown) + retention;
    * consumer-protocol Stable group with known subscriptions: commit time + retention for
      topics it no longer subscribes to;
    * a KIP-848 consumer group (group_type "consumer", consumer_groups.py): each offset its own
      commit time + retention (rule "empty" without members, "unsubscribed" with them), except
      the topics its members subscribe to, by name or regular expression, while it has members;
    * anything else, or retention -1: never (expires_at_ms null).
    `group_retention_ms` holds per-group overrides (offsets.retention.minutes as a group config).
    With `now_ms`, `expired` tells which offsets a sweep at that time would remove.
    """
    offsets = current_offsets(log)
    states = group_states(log)
    joined = (offsets.join(states, "group", "left").join(consumer_group_states(log), "group", "left")
              .where(F.col("deleted_at").isNull() | (F.struct(*LOG_ORDER) > F.col("deleted_at"))))
    consumer = F.col("consumer_state").isNotNull()
    # simple (standalone) group: no protocol type, or no live GroupMetadata record at all (never
    # joined, or deleted and re-created by commits alone)
    simple = ~consumer & (F.col("protocol_type").isNull() | F.col("state").isNull())
    retention = F.lit(retention_ms).cast("long")
    for group, ms in (group_retention_ms or {}).items():
        retention = F.when(F.col("group") == group, F.lit(ms).cast("long")).otherwise(retention)
    subscribed = (F.when(consumer, F.array_contains("consumer_subscribed_topics", F.col("topic")))
                  .otherwise(~simple & F.when(F.col("subscribed_topics").isNotNull(),
                                              F.array_contains("subscribed_topics", F.col("topic")))
                             .otherwise(F.col("protocol_type") == "consumer")))
    rule = (F.when(consumer, F.when(F.col("consumer_members") == 0, "empty").otherwise("unsubscribed"))
            .when(simple, "standalone")
            .when(F.col("state") == "Empty", "empty")
            .when((F.col("protocol_type") == "consumer") & (F.col("state") == "Stable")
                  & F.col("subscribed_topics").isNotNull(), "unsubscribed")
            .otherwise("active"))
    base = (F.when(consumer | (rule == "standalone") | (rule == "unsubscribed"), F.col("commit_timestamp"))
            .when(rule == "empty", F.when(F.col("state_timestamp") != -1, F.col("state_timestamp"))
                  .otherwise(F.col("commit_timestamp"))))
    expires = (F.when(base.isNull() | subscribed, F.lit(None))
               .when(F.col("expire_timestamp") != -1, F.col("expire_timestamp"))
               .when(retention < 0, F.lit(None))
               .otherwise(base + retention))
    out = joined.select(
        *TP, "offset", "commit_timestamp", "expire_timestamp",
        F.when(consumer, F.col("consumer_state")).when(simple, "Empty").otherwise(F.col("state")).alias("group_state"),
        F.when(consumer, "consumer").when(simple, F.lit("")).otherwise(F.col("protocol_type")).alias("protocol_type"),
        F.when(consumer, "consumer").otherwise("classic").alias("group_type"),
        F.when(subscribed, "subscribed").otherwise(rule).alias("rule"), retention.alias("retention_ms"),
        expires.cast("long").alias("expires_at_ms"))
    out = out.withColumn("expires_at", _ms_to_ts(F.col("expires_at_ms")))
    if now_ms is not None:
        out = out.withColumn("expired", F.coalesce(F.col("expires_at_ms") <= F.lit(now_ms), F.lit(False)))
    return out


# -------------------------------------------------------------------------------- reset audit

def reset_audit(log: DataFrame, jump_threshold: int = DEFAULT_JUMP) -> DataFrame:
    """Commits that moved a partition backwards (`rewind`) or forwards by more than
    `jump_threshold` offsets (`jump`), with when and by whom.

    By whom: the group's membership at the commit, in log order - for a classic group the last
    GroupMetadata record before it, for a KIP-848 consumer group its live members (records 5,
    consumer_groups.consumer_rosters; a group moving between the kinds has members in one of the
    two only). `member` when the group had members (a consumer of the group committed; a
    consumer group accepts no other commit then), `admin` when it had none
    (kafka-consumer-groups --reset-offsets, which needs an inactive group, or a standalone
    consumer such as a Spark job's commitToGroup). `members` lists the client ids of the members
    at the time, `group_type` whether the group was a classic or a consumer group.
    """
    ordered = Window.partitionBy("group").orderBy(*LOG_ORDER)
    state_so_far = ordered.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    strings = F.array().cast("array<string>")
    members = F.when(F.col("record_type") == GROUP_METADATA,
                     F.coalesce(F.transform("members", lambda m: m["client_id"]), strings))
    rosters = consumer_rosters(log)
    with_members = (log.join(rosters, ["group", *LOG_ORDER], "left")
                    .select("*", members.alias("group_members"))
                    .withColumn("group_members", F.last("group_members", ignorenulls=True).over(state_so_far))
                    .withColumn("consumer_roster", F.last("consumer_roster", ignorenulls=True).over(state_so_far))
                    .withColumn("group_type", group_type_so_far()))
    commits = with_members.where((F.col("record_type") == OFFSET_COMMIT) & ~F.col("tombstone"))
    per_tp = Window.partitionBy(*TP).orderBy(*LOG_ORDER)
    moves = (commits.withColumn("from_offset", F.lag("offset").over(per_tp))
             .withColumn("from_commit_timestamp", F.lag("commit_timestamp").over(per_tp))
             .where(F.col("from_offset").isNotNull()))
    kind = (F.when(F.col("offset") < F.col("from_offset"), "rewind")
            .when(F.col("offset") - F.col("from_offset") > jump_threshold, "jump"))
    who = F.concat(F.coalesce(F.col("group_members"), strings), F.coalesce(F.col("consumer_roster"), strings))
    return (moves.select(*TP, "from_offset", F.col("offset").alias("to_offset"),
                         (F.col("offset") - F.col("from_offset")).alias("delta"), kind.alias("kind"),
                         "commit_timestamp", _ms_to_ts(F.col("commit_timestamp")).alias("commit_time"),
                         "from_commit_timestamp",
                         F.when(F.size(who) > 0, "member").otherwise("admin").alias("committer"),
                         who.alias("members"), "group_type", *LOG_ORDER)
            .where(F.col("kind").isNotNull()))


def undo_plan(log: DataFrame, resets: DataFrame, as_of_ms: int | None = None) -> DataFrame:
    """Offsets that undo the resets: for every partition with a reset, its committed offset as
    of `as_of_ms` (the last commit at or before that time, in log order); without a time, the
    offset just before the partition's first reset. Partitions with no commit before `as_of_ms`
    are left out (nothing to restore). Columns group, topic, partition, offset: Kafka's
    multi-group `--from-file` CSV layout."""
    touched = resets.groupBy(*TP).agg(F.min(F.struct(*LOG_ORDER, "from_offset")).alias("first"))
    if as_of_ms is None:
        return touched.select(*TP, F.col("first.from_offset").alias("offset")).orderBy(*TP)
    commits = commit_history(log).where(F.col("commit_timestamp") <= as_of_ms)
    last = Window.partitionBy(*TP).orderBy(*[F.col(c).desc() for c in LOG_ORDER])
    before = commits.withColumn("n", F.row_number().over(last)).where("n = 1").select(*TP, "offset")
    return touched.join(before, TP).select(*TP, "offset").orderBy(*TP)


def write_undo_csv(plan: DataFrame, path: str) -> int:
    """Write the plan as kafka-consumer-groups `--reset-offsets --from-file` CSV (what
    `--export` prints for several groups: `group,topic,partition,offset` lines, no header);
    returns the number of lines. Small by nature: collected to the driver."""
    rows = plan.collect()
    with open(path, "w", encoding="utf-8", newline="") as out:
        for r in rows:
            out.write(f"{r['group']},{r['topic']},{r['partition']},{r['offset']}\n")
    return len(rows)
