"""Output schemas of the two sources, as Spark DDL and as the matching Arrow schemas.

The readers yield `pyarrow.RecordBatch`es; Spark checks them against the declared schema, so
each Spark schema has an Arrow twin built from the same field list (one table, no drift).
"""

from __future__ import annotations

import pyarrow as pa

# Spark's Kafka source columns (key, value, topic, partition, offset, timestamp, timestampType,
# and headers only with includeHeaders=true); timestampType is Kafka's TimestampType id: -1 none,
# 0 CreateTime, 1 LogAppendTime.
HEADER_TYPE = pa.struct([("key", pa.string()), ("value", pa.binary())])
TOPIC_FIELDS: list[tuple[str, pa.DataType, str]] = [
    ("key", pa.binary(), "binary"),
    ("value", pa.binary(), "binary"),
    ("topic", pa.string(), "string"),
    ("partition", pa.int32(), "int"),
    ("offset", pa.int64(), "bigint"),
    ("timestamp", pa.timestamp("us", tz="UTC"), "timestamp"),
    ("timestampType", pa.int32(), "int"),
]
TOPIC_HEADERS_FIELD: tuple[str, pa.DataType, str] = (
    "headers", pa.list_(HEADER_TYPE), "array<struct<key: string, value: binary>>")

# One row per `__consumer_offsets` record. record_type is "offset_commit", "group_metadata" or a
# KIP-848 consumer group's (consumer_group_records.RECORD_TYPE_NAMES); a column is null where the
# record type has no such field; tombstone rows carry only the key fields. Timestamps stay epoch
# milliseconds (bigint, -1 = absent) as Kafka stores them, so the pipelines can compare them with
# the broker's own expiry arithmetic exactly. Consumer groups' records reuse the columns that mean
# the same (generation = group or target assignment epoch, protocol = server assignor, members =
# the member of record 5, state_timestamp = when a regular expression was resolved) and fill the
# last columns, which are null for the classic records.
MEMBER_TYPE = pa.struct([
    ("member_id", pa.string()), ("group_instance_id", pa.string()), ("client_id", pa.string()),
    ("client_host", pa.string()), ("rebalance_timeout", pa.int32()), ("session_timeout", pa.int32()),
    ("subscribed_topics", pa.list_(pa.string())), ("subscription", pa.binary()), ("assignment", pa.binary()),
])
MEMBER_DDL = ("struct<member_id: string, group_instance_id: string, client_id: string, client_host: string, "
              "rebalance_timeout: int, session_timeout: int, subscribed_topics: array<string>, "
              "subscription: binary, assignment: binary>")
TOPIC_PARTITIONS_TYPE = pa.struct([("topic_id", pa.string()), ("partitions", pa.list_(pa.int32()))])
TOPIC_PARTITIONS_DDL = "struct<topic_id: string, partitions: array<int>>"
TOPIC_METADATA_TYPE = pa.struct([("topic_id", pa.string()), ("topic", pa.string()), ("num_partitions", pa.int32())])
TOPIC_METADATA_DDL = "struct<topic_id: string, topic: string, num_partitions: int>"
OFFSETS_LOG_FIELDS: list[tuple[str, pa.DataType, str]] = [
    ("record_type", pa.string(), "string"),
    ("group", pa.string(), "string"),
    ("topic", pa.string(), "string"),
    ("partition", pa.int32(), "int"),
    ("offset", pa.int64(), "bigint"),
    ("leader_epoch", pa.int32(), "int"),
    ("metadata", pa.string(), "string"),
    ("commit_timestamp", pa.int64(), "bigint"),
    ("expire_timestamp", pa.int64(), "bigint"),
    ("tombstone", pa.bool_(), "boolean"),
    ("protocol_type", pa.string(), "string"),
    ("generation", pa.int32(), "int"),
    ("protocol", pa.string(), "string"),
    ("leader", pa.string(), "string"),
    ("state_timestamp", pa.int64(), "bigint"),
    ("members", pa.list_(MEMBER_TYPE), f"array<{MEMBER_DDL}>"),
    ("log_partition", pa.int32(), "int"),
    ("log_offset", pa.int64(), "bigint"),
    ("record_timestamp", pa.int64(), "bigint"),
    ("member_id", pa.string(), "string"),
    ("member_epoch", pa.int32(), "int"),
    ("previous_member_epoch", pa.int32(), "int"),
    ("member_state", pa.string(), "string"),
    ("assigned_partitions", pa.list_(TOPIC_PARTITIONS_TYPE), f"array<{TOPIC_PARTITIONS_DDL}>"),
    ("partitions_pending_revocation", pa.list_(TOPIC_PARTITIONS_TYPE), f"array<{TOPIC_PARTITIONS_DDL}>"),
    ("rack_id", pa.string(), "string"),
    ("regular_expression", pa.string(), "string"),
    ("topics", pa.list_(TOPIC_METADATA_TYPE), f"array<{TOPIC_METADATA_DDL}>"),
]

OFFSET_COMMIT = "offset_commit"
GROUP_METADATA = "group_metadata"


def _ddl(fields: list[tuple[str, pa.DataType, str]]) -> str:
    """Spark DDL for a field table (names back-quoted: `group`, `offset` are SQL keywords)."""
    return ", ".join(f"`{name}` {ddl}" for name, _, ddl in fields)


def _arrow(fields: list[tuple[str, pa.DataType, str]]) -> pa.Schema:
    """Arrow schema for a field table."""
    return pa.schema([(name, arrow) for name, arrow, _ in fields])


TOPIC_DDL = _ddl(TOPIC_FIELDS)
TOPIC_ARROW = _arrow(TOPIC_FIELDS)
TOPIC_HEADERS_DDL = _ddl([*TOPIC_FIELDS, TOPIC_HEADERS_FIELD])  # includeHeaders=true
TOPIC_HEADERS_ARROW = _arrow([*TOPIC_FIELDS, TOPIC_HEADERS_FIELD])
OFFSETS_LOG_DDL = _ddl(OFFSETS_LOG_FIELDS)
OFFSETS_LOG_ARROW = _arrow(OFFSETS_LOG_FIELDS)
