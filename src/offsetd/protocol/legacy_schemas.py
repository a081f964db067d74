"""Request/response schemas for the versions Kafka 3.9 accepted that kio 0.6.5 does not generate.

kio follows Kafka 4's message definitions, from which KIP-896 removed the oldest versions. The
versions below are transcribed, as data, from the field layouts of Kafka 3.9's published message
JSON schemas (clients/src/main/resources/common/message/*.json, "validVersions" and each field's
"versions"). Field names are the ones kio uses for the neighbouring version, so handlers read and
write them unchanged. From this table `schema_class` builds dataclasses shaped like kio's (same
field metadata, same class attributes), which the codec's compiled readers and writers take as they
take kio's own: no per-version code. None of these versions is flexible.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any

# A field is (name, type). A type is a primitive ("int32", "string", ...), optionally with "?"
# for nullable, "[t]" for an array of primitives, or (StructName, [fields]) for an array of structs.
# An optional third element is the field's first version (structs written once for several versions).
Field = tuple[Any, ...]
Struct = tuple[str, list[Field]]

_OFFSET_COMMIT_RESPONSE: Struct = ("OffsetCommitResponse", [
    ("topics", ("OffsetCommitResponseTopic", [
        ("name", "string"),
        ("partitions", ("OffsetCommitResponsePartition", [
            ("partition_index", "int32"), ("error_code", "error_code")])),
    ])),
])

_CREATE_TOPICS_REQUEST_TOPICS: Field = ("topics", ("CreatableTopic", [
    ("name", "string"),
    ("num_partitions", "int32"),
    ("replication_factor", "int16"),
    ("assignments", ("CreatableReplicaAssignment", [("partition_index", "int32"), ("broker_ids", "[int32]")])),
    ("configs", ("CreatableTopicConfig", [("name", "string"), ("value", "string?")])),
]))

# Produce v0-2 and Fetch v0-3 (message formats v0/v1), written once with each field's first
# version as a third element (Kafka's "versions": "N+"); `_at` cuts the struct for one version.
_PRODUCE_REQUEST: Struct = ("ProduceRequest", [
    ("acks", "int16"),
    ("timeout", "timedelta_i32"),
    ("topic_data", ("TopicProduceData", [
        ("name", "string"),
        ("partition_data", ("PartitionProduceData", [("index", "int32"), ("records", "records?")])),
    ])),
])
_PRODUCE_RESPONSE: Struct = ("ProduceResponse", [
    ("responses", ("TopicProduceResponse", [
        ("name", "string"),
        ("partition_responses", ("PartitionProduceResponse", [
            ("index", "int32"), ("error_code", "error_code"), ("base_offset", "int64"),
            ("log_append_time", "datetime_i64?", 2)])),  # -1 (None) unless LogAppendTime
    ])),
    ("throttle_time", "timedelta_i32", 1),
])
_FETCH_REQUEST: Struct = ("FetchRequest", [
    ("replica_id", "int32"),
    ("max_wait", "timedelta_i32"),
    ("min_bytes", "int32"),
    ("max_bytes", "int32", 3),
    ("topics", ("FetchTopic", [
        ("topic", "string"),
        ("partitions", ("FetchPartition", [
            ("partition", "int32"), ("fetch_offset", "int64"), ("partition_max_bytes", "int32")])),
    ])),
])
_FETCH_RESPONSE: Struct = ("FetchResponse", [
    ("throttle_time", "timedelta_i32", 1),
    ("responses", ("FetchableTopicResponse", [
        ("topic", "string"),
        ("partitions", ("PartitionData", [
            ("partition_index", "int32"), ("error_code", "error_code"), ("high_watermark", "int64"),
            ("records", "records?")])),
    ])),
])


def _at(struct: Struct, version: int) -> Struct:
    """`struct` with the fields that exist at `version` (a field's optional third element is the
    first version that has it), nested structs included."""
    name, fields = struct
    kept: list[Field] = []
    for field in fields:
        if len(field) > 2 and version < field[2]:
            continue
        kind = field[1]
        kept.append((field[0], _at(kind, version) if isinstance(kind, tuple) else kind))
    return name, kept


# (api_key, version, "request" | "response") -> the top-level struct.
LEGACY: dict[tuple[int, int, str], Struct] = {
    **{(0, v, kind): _at(struct, v) for v in range(3)
       for kind, struct in (("request", _PRODUCE_REQUEST), ("response", _PRODUCE_RESPONSE))},
    **{(1, v, kind): _at(struct, v) for v in range(4)
       for kind, struct in (("request", _FETCH_REQUEST), ("response", _FETCH_RESPONSE))},
    # ListOffsets v0: max_num_offsets in, an array of offsets out (old_style_offsets).
    (2, 0, "request"): ("ListOffsetsRequest", [
        ("replica_id", "int32"),
        ("topics", ("ListOffsetsTopic", [
            ("name", "string"),
            ("partitions", ("ListOffsetsPartition", [
                ("partition_index", "int32"), ("timestamp", "int64"), ("max_num_offsets", "int32")])),
        ])),
    ]),
    (2, 0, "response"): ("ListOffsetsResponse", [
        ("topics", ("ListOffsetsTopicResponse", [
            ("name", "string"),
            ("partitions", ("ListOffsetsPartitionResponse", [
                ("partition_index", "int32"), ("error_code", "error_code"), ("old_style_offsets", "[int64]")])),
        ])),
    ]),
    # OffsetCommit v0: group and offsets only. v1 adds generation, member id and a per-partition
    # commit timestamp (v1 only). Responses v0-1 have no throttle time.
    (8, 0, "request"): ("OffsetCommitRequest", [
        ("group_id", "string"),
        ("topics", ("OffsetCommitRequestTopic", [
            ("name", "string"),
            ("partitions", ("OffsetCommitRequestPartition", [
                ("partition_index", "int32"), ("committed_offset", "int64"), ("committed_metadata", "string?")])),
        ])),
    ]),
    (8, 0, "response"): _OFFSET_COMMIT_RESPONSE,
    (8, 1, "request"): ("OffsetCommitRequest", [
        ("group_id", "string"),
        ("generation_id_or_member_epoch", "int32"),
        ("member_id", "string"),
        ("topics", ("OffsetCommitRequestTopic", [
            ("name", "string"),
            ("partitions", ("OffsetCommitRequestPartition", [
                ("partition_index", "int32"), ("committed_offset", "int64"), ("commit_timestamp", "int64"),
                ("committed_metadata", "string?")])),
        ])),
    ]),
    (8, 1, "response"): _OFFSET_COMMIT_RESPONSE,
    # OffsetFetch v0: the same layout as v1 (v0 read ZooKeeper in Kafka; here the same store).
    (9, 0, "request"): ("OffsetFetchRequest", [
        ("group_id", "string"),
        ("topics", ("OffsetFetchRequestTopic", [("name", "string"), ("partition_indexes", "[int32]")])),
    ]),
    (9, 0, "response"): ("OffsetFetchResponse", [
        ("topics", ("OffsetFetchResponseTopic", [
            ("name", "string"),
            ("partitions", ("OffsetFetchResponsePartition", [
                ("partition_index", "int32"), ("committed_offset", "int64"), ("metadata", "string?"),
                ("error_code", "error_code")])),
        ])),
    ]),
    # CreateTopics v0; v1 adds validate_only and a per-topic error message.
    (19, 0, "request"): ("CreateTopicsRequest", [_CREATE_TOPICS_REQUEST_TOPICS, ("timeout", "timedelta_i32")]),
    (19, 0, "response"): ("CreateTopicsResponse", [
        ("topics", ("CreatableTopicResult", [("name", "string"), ("error_code", "error_code")])),
    ]),
    (19, 1, "request"): ("CreateTopicsRequest", [
        _CREATE_TOPICS_REQUEST_TOPICS, ("timeout", "timedelta_i32"), ("validate_only", "bool")]),
    (19, 1, "response"): ("CreateTopicsResponse", [
        ("topics", ("CreatableTopicResult", [
            ("name", "string"), ("error_code", "error_code"), ("error_message", "string?")])),
    ]),
    # DeleteTopics v0: v1 adds the throttle time.
    (20, 0, "request"): ("DeleteTopicsRequest", [("topic_names", "[string]"), ("timeout", "timedelta_i32")]),
    (20, 0, "response"): ("DeleteTopicsResponse", [
        ("responses", ("DeletableTopicResult", [("name", "string"), ("error_code", "error_code")])),
    ]),
    # OffsetForLeaderEpoch v0-1: no current leader epoch (v2), no replica id (v3), no throttle time
    # (v2); the response's leader epoch arrives in v1.
    **{(23, v, "request"): ("OffsetForLeaderEpochRequest", [
        ("topics", ("OffsetForLeaderTopic", [
            ("topic", "string"),
            ("partitions", ("OffsetForLeaderPartition", [("partition", "int32"), ("leader_epoch", "int32")])),
        ])),
    ]) for v in range(2)},
    **{(23, v, "response"): _at(("OffsetForLeaderEpochResponse", [
        ("topics", ("OffsetForLeaderTopicResult", [
            ("topic", "string"),
            ("partitions", ("EpochEndOffset", [
                ("error_code", "error_code"), ("partition", "int32"), ("leader_epoch", "int32", 1),
                ("end_offset", "int64")])),
        ])),
    ]), v) for v in range(2)},
    # DescribeConfigs v0: no include_synonyms; configs carry is_default instead of a source and synonyms.
    (32, 0, "request"): ("DescribeConfigsRequest", [
        ("resources", ("DescribeConfigsResource", [
            ("resource_type", "int8"), ("resource_name", "string"), ("configuration_keys", "[string]?")])),
    ]),
    (32, 0, "response"): ("DescribeConfigsResponse", [
        ("throttle_time", "timedelta_i32"),
        ("results", ("DescribeConfigsResult", [
            ("error_code", "error_code"), ("error_message", "string?"), ("resource_type", "int8"),
            ("resource_name", "string"),
            ("configs", ("DescribeConfigsResourceResult", [
                ("name", "string"), ("value", "string?"), ("read_only", "bool"), ("is_default", "bool"),
                ("is_sensitive", "bool")])),
        ])),
    ]),
}

_PYTHON_TYPES: dict[str, type] = {
    "int8": int, "int16": int, "int32": int, "int64": int, "bool": bool, "string": str,
    "error_code": int, "timedelta_i32": int, "records": bytes, "datetime_i64": int,
}


def legacy_versions(api_key: int) -> set[int]:
    """Versions of `api_key` this table has both a request and a response schema for."""
    requests = {v for k, v, kind in LEGACY if k == api_key and kind == "request"}
    return {v for v in requests if (api_key, v, "response") in LEGACY}


def _build(struct: Struct, api_key: int, version: int, entity_type: str) -> type:
    name, fields = struct
    spec: list[tuple[str, Any, dataclasses.Field]] = []
    for field_name, kind in fields:
        if isinstance(kind, tuple):  # array of structs
            inner = _build(kind, api_key, version, "nested")
            spec.append((field_name, tuple[inner, ...], dataclasses.field()))  # type: ignore[valid-type]
            continue
        nullable = kind.endswith("?")
        kind = kind.rstrip("?")
        annotation: Any
        if kind.startswith("["):
            kind = kind[1:-1]
            annotation = tuple[_PYTHON_TYPES[kind], ...]  # type: ignore[misc]
        else:
            annotation = _PYTHON_TYPES[kind]
        if nullable:
            annotation = annotation | None
        spec.append((field_name, annotation, dataclasses.field(metadata={"kafka_type": kind})))
    cls = dataclasses.make_dataclass(name, spec, frozen=True, slots=True, kw_only=True,
                                     namespace={"__module__": f"{__name__}.v{version}"})
    cls.__flexible__ = False  # type: ignore[attr-defined]
    cls.__version__ = version  # type: ignore[attr-defined]
    cls.__api_key__ = api_key  # type: ignore[attr-defined]
    cls.__type__ = entity_type  # type: ignore[attr-defined]
    return cls


@lru_cache(maxsize=None)
def schema_class(api_key: int, version: int, kind: str) -> type | None:
    """The dataclass for a legacy (api_key, version) "request" or "response", or None."""
    struct = LEGACY.get((api_key, version, kind))
    return None if struct is None else _build(struct, api_key, version, kind)
