"""KIP-848 consumer groups as the pipelines see them, from the offsets-log rows of records 3-8
and 16 (schemas.OFFSETS_LOG_FIELDS says which columns each fills): the state a broker would load
for each live consumer group, its members over time, and which kind of group a group id was at
each point of the log. Reference B3 (states), B6 (records), B7 (offsets).

A consumer group lives while its last record 3 (ConsumerGroupMetadata) is not a tombstone; a
downgrade or a deletion tombstones it, an upgrade or a consumer-protocol join writes it.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from ..records import consumer_group_records as cgr

_NAMES = cgr.RECORD_TYPE_NAMES
METADATA = _NAMES[cgr.ConsumerGroupMetadataKey]
MEMBER_METADATA = _NAMES[cgr.ConsumerGroupMemberMetadataKey]
TARGET_ASSIGNMENT_METADATA = _NAMES[cgr.ConsumerGroupTargetAssignmentMetadataKey]
CURRENT_MEMBER_ASSIGNMENT = _NAMES[cgr.ConsumerGroupCurrentMemberAssignmentKey]
REGULAR_EXPRESSION = _NAMES[cgr.ConsumerGroupRegularExpressionKey]
LOG_ORDER = ["log_partition", "log_offset"]


def _live_records(log: DataFrame) -> DataFrame:
    """The last record of every consumer-group key (group, type, member or regular expression),
    kept when it is not a tombstone: what replaying the log leaves."""
    rows = log.where(F.col("record_type").isin(*_NAMES.values()))
    key = F.coalesce(F.col("member_id"),
                     F.when(F.col("record_type") == REGULAR_EXPRESSION, F.col("regular_expression")), F.lit(""))
    last = Window.partitionBy("group", "record_type", "key").orderBy(*[F.col(c).desc() for c in LOG_ORDER])
    return (rows.withColumn("key", key).withColumn("n", F.row_number().over(last))
            .where("n = 1 and not tombstone"))


def consumer_group_states(log: DataFrame) -> DataFrame:
    """One row per live consumer group: `consumer_state` (Empty, Assigning, Reconciling or
    Stable, as ConsumerGroup.state() computes it), `consumer_members` (how many) and
    `consumer_subscribed_topics` (the members' topic names and the topics their regular
    expressions resolved to; empty without members: then nothing is subscribed, B7). One
    aggregation over the live records."""
    kind = F.col("record_type")

    def of(record_type: str, value: Column) -> Column:
        return F.when(kind == record_type, value)

    strings = F.array().cast("array<string>")
    groups = _live_records(log).groupBy("group").agg(
        F.max(of(METADATA, F.col("generation"))).alias("group_epoch"),
        F.coalesce(F.max(of(TARGET_ASSIGNMENT_METADATA, F.col("generation"))), F.lit(0)).alias("assignment_epoch"),
        F.count(of(MEMBER_METADATA, F.lit(1))).alias("consumer_members"),
        F.flatten(F.collect_list(of(MEMBER_METADATA, F.coalesce(F.col("members")[0]["subscribed_topics"], strings))))
        .alias("names"),
        F.flatten(F.collect_list(of(REGULAR_EXPRESSION, F.transform("topics", lambda t: t["topic"]))))
        .alias("resolved"),
        F.collect_list(of(CURRENT_MEMBER_ASSIGNMENT, F.col("member_epoch"))).alias("member_epochs"),
        F.max(of(CURRENT_MEMBER_ASSIGNMENT, F.col("member_state") != "STABLE")).alias("unstable"))
    count = F.col("consumer_members")
    behind = F.exists("member_epochs", lambda epoch: epoch != F.col("assignment_epoch"))
    state = (F.when(count == 0, "Empty")
             .when(F.col("group_epoch") > F.col("assignment_epoch"), "Assigning")
             .when(behind | F.coalesce(F.col("unstable"), F.lit(False)), "Reconciling")
             .otherwise("Stable"))
    topics = F.array_distinct(F.concat("names", "resolved"))
    return groups.where(F.col("group_epoch").isNotNull()).select(
        "group", state.alias("consumer_state"), count.alias("consumer_members"),
        F.when(count > 0, topics).otherwise(strings).alias("consumer_subscribed_topics"))


def consumer_rosters(log: DataFrame) -> DataFrame:
    """(group, log position, roster) at each record 5 (ConsumerGroupMemberMetadata) or its
    tombstone: the client ids of the group's members just after it, in member id order. Only
    these rows are folded (members come and go far more rarely than commits are made)."""
    events = log.where(F.col("record_type") == MEMBER_METADATA).select(
        "group", *LOG_ORDER, F.struct("member_id", F.col("members")[0]["client_id"].alias("client_id"),
                                      "tombstone").alias("event"))
    so_far = Window.partitionBy("group").orderBy(*LOG_ORDER).rowsBetween(Window.unboundedPreceding, Window.currentRow)
    empty = F.create_map().cast("map<string,string>")

    def apply(roster: Column, e: Column) -> Column:
        others = F.map_filter(roster, lambda member, _: member != e["member_id"])
        return F.when(e["tombstone"], others).otherwise(
            F.map_concat(others, F.create_map(e["member_id"], e["client_id"])))

    roster = F.aggregate(F.collect_list("event").over(so_far), empty, apply)
    return events.select("group", *LOG_ORDER, F.transform(F.array_sort(F.map_entries(roster)),
                                                          lambda e: e["value"]).alias("consumer_roster"))


def group_type_so_far() -> Column:
    """For rows ordered within a window per group: "consumer" while a consumer group holds the
    group id (its record 3 written last, not tombstoned), else "classic"."""
    marker = F.when(F.col("record_type") == METADATA,
                    F.when(F.col("tombstone"), "classic").otherwise("consumer"))
    so_far = Window.partitionBy("group").orderBy(*LOG_ORDER).rowsBetween(Window.unboundedPreceding, Window.currentRow)
    return F.coalesce(F.last(marker, ignorenulls=True).over(so_far), F.lit("classic"))
