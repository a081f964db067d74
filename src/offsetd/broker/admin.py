"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs."""

from __future__ import annotations

from inspect import isawaitable
from typing import Any, Awaitable, Callable

from ..protocol.errors import Error
from ..security.authorization import Access, Op, Res, access
from .broker import Broker
from .group_configs import BROKER_KEYS, GROUP_KEYS, SHARE_KEYS, group_config_problem, session_heartbeat_problem
from .request_context import current_context
from .topic_config import (
    DEFAULT_CONFIG,
    INT,
    STATIC_BROKER_CONFIG,
    STRING,
    TOPIC_KEYS,
    _broker_default,
    effective_value,
    validate_topic_configs,
)
from ..storage.log_dir import StorageError
from .topics import TopicError

RESOURCE_TOPIC, RESOURCE_BROKER, RESOURCE_GROUP = 2, 4, 32
DYNAMIC_GROUP_CONFIG = 8  # DescribeConfigs ConfigSource of a per-group setting
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations


Later = list[tuple[Awaitable[Any], Callable[[Any], None], dict[str, Any]]]

AUTHORIZATION_FAILED = "Authorization failed."
# Config resource type -> the ACL resource checked and the error when denied (reference §4
# DescribeConfigs/IncrementalAlterConfigs: BROKER 4, BROKER_LOGGER 8, CLIENT_METRICS 16 are CLUSTER's).
CONFIG_RESOURCES: dict[int, tuple[Any, int]] = {
    RESOURCE_TOPIC: (Res.TOPIC, Error.TOPIC_AUTHORIZATION_FAILED),
    RESOURCE_GROUP: (Res.GROUP, Error.GROUP_AUTHORIZATION_FAILED),
    RESOURCE_BROKER: (Res.CLUSTER, Error.CLUSTER_AUTHORIZATION_FAILED),
    8: (Res.CLUSTER, Error.CLUSTER_AUTHORIZATION_FAILED),
    16: (Res.CLUSTER, Error.CLUSTER_AUTHORIZATION_FAILED),
}


def _config_denied(acc: Access | None, op: Any, resource_type: int, name: str) -> int:
    """The error of a config resource the principal may not `op` (0: allowed, or not checked)."""
    if acc is None or resource_type not in CONFIG_RESOURCES:
        return Error.NONE
    rtype, error = CONFIG_RESOURCES[resource_type]
    if rtype == Res.CLUSTER:
        return Error.NONE if acc.cluster(op) else error
    return Error.NONE if acc.allows(op, rtype, name) else error


def _body_when_done(body: dict[str, Any], later: Later) -> Any:
    """The body now, or (cluster mode: catalogue changes are PostgreSQL round trips) a coroutine
    that finishes each result once its change is stored: done(value), or the TopicError's code."""
    if not later:
        return body

    async def finish() -> dict[str, Any]:
        for pending, done, result in later:
            try:
                done(await pending)
            except (TopicError, StorageError) as exc:  # StorageError: PostgreSQL out of reach
                result.update(error_code=exc.error_code, error_message=getattr(exc, "message", str(exc)))
        return body

    return finish()


def handle_create_topics(broker: Broker, req: Any, version: int, now_ms: int) -> Any:
    """Create each topic or report why not; v5+ echoes partitions, replication factor and configs."""
    results = []
    later: Later = []
    acc = access(broker, current_context())
    create_any = acc is None or acc.cluster(Op.CREATE)  # CREATE on CLUSTER: every name
    for item in req.topics:
        result: dict[str, Any] = {"name": item.name, "error_code": Error.NONE, "error_message": None}
        if not create_any and not acc.allows(Op.CREATE, Res.TOPIC, item.name):  # type: ignore[union-attr]
            result.update(error_code=Error.TOPIC_AUTHORIZATION_FAILED, error_message=AUTHORIZATION_FAILED)
            results.append(result)
            continue
        configs = {c.name: c.value for c in item.configs}
        partitions = len(item.assignments) if item.assignments else item.num_partitions
        if partitions == -1:
            partitions = broker.config.get("num.partitions")
        problem = validate_topic_configs(configs)
        live = len(broker.cluster.brokers())
        if not item.assignments and (item.replication_factor > live or item.replication_factor in (0,)
                                     or item.replication_factor < -1):
            # Cluster mode keeps one copy per partition, in PostgreSQL (whose replication is its
            # own): a factor up to the live brokers is accepted, as Kafka would place it.
            result.update(error_code=Error.INVALID_REPLICATION_FACTOR,
                          error_message=f"Replication factor: {item.replication_factor} larger than available "
                                        f"brokers: {live}." if item.replication_factor > live else
                                        "Replication factor must be larger than 0, or -1 to use the default.")
        elif item.assignments and any(tuple(a.broker_ids) != (broker.node_id,) for a in item.assignments):
            result.update(error_code=Error.INVALID_REPLICA_ASSIGNMENT,
                          error_message=f"Replica assignments must name only broker {broker.node_id}.")
        elif problem:
            result.update(error_code=Error.INVALID_CONFIG, error_message=problem)
        else:
            try:
                topic = broker.topics.create(item.name, partitions, configs, now_ms,
                                             validate_only=getattr(req, "validate_only", False))
            except TopicError as exc:
                result.update(error_code=exc.error_code, error_message=exc.message)
            else:
                def done(topic: Any, result: dict[str, Any] = result, partitions: int = partitions,
                         configs: dict[str, str] = configs) -> None:
                    result.update(topic_id=topic.topic_id, num_partitions=partitions, replication_factor=1)
                    if acc is not None and not acc.allows(Op.DESCRIBE_CONFIGS, Res.TOPIC, result["name"]):
                        result["topic_config_error_code"] = Error.TOPIC_AUTHORIZATION_FAILED  # created all the same
                        return
                    result["configs"] = [_config_entry(k, *effective_value(k, configs, broker.config))
                                         for k in sorted(TOPIC_KEYS)]

                if isawaitable(topic):
                    later.append((topic, done, result))
                else:
                    done(topic)
        results.append(result)
    return _body_when_done({"topics": results}, later)


def handle_delete_topics(broker: Broker, req: Any, version: int, now_ms: int) -> Any:
    """Delete topics named (v0-5: `topic_names`; v6: `topics` by name or id)."""
    if hasattr(req, "topic_names"):
        wanted = [(name, None) for name in req.topic_names]
    else:
        wanted = [(t.name, t.topic_id) for t in req.topics]
    responses = []
    later: Later = []
    acc = access(broker, current_context())
    delete_any = acc is None or acc.cluster(Op.DELETE)  # DELETE on CLUSTER: every topic
    for name, topic_id in wanted:
        topic = broker.topics.get(name) if name is not None else broker.topics.by_id(topic_id)
        response: dict[str, Any] = {"name": name, "topic_id": topic_id, "error_code": Error.NONE}
        shown = name if topic is None else topic.name
        if not delete_any and shown is not None and (not acc.allows(Op.DESCRIBE, Res.TOPIC, shown)  # type: ignore[union-attr]
                                                     or (topic is not None and not acc.allows(Op.DELETE, Res.TOPIC, shown))):  # type: ignore[union-attr]
            # not describable: 29 even if missing; describable and missing: 3 below
            response.update(error_code=Error.TOPIC_AUTHORIZATION_FAILED, error_message=AUTHORIZATION_FAILED)
        elif topic is None:
            response["error_code"] = Error.UNKNOWN_TOPIC_OR_PARTITION if name is not None else Error.UNKNOWN_TOPIC_ID
        elif not broker.config.get("delete.topic.enable"):
            response.update(error_code=Error.TOPIC_DELETION_DISABLED, error_message="Topic deletion is disabled.")
        elif topic.internal:
            response.update(error_code=Error.INVALID_TOPIC_EXCEPTION,
                            error_message=f"Internal topic {topic.name} cannot be deleted.")
        else:
            response.update(name=topic.name, topic_id=topic.topic_id)
            deleted = broker.topics.delete(topic)

            def done(_: Any, topic: Any = topic) -> None:
                broker.on_topic_deleted(topic.name, len(topic.partitions))

            if isawaitable(deleted):
                later.append((deleted, done, response))
            else:
                done(None)
        responses.append(response)
    return _body_when_done({"responses": responses}, later)


def handle_create_partitions(broker: Broker, req: Any, version: int, now_ms: int) -> Any:
    """Grow topics to the requested partition counts."""
    results = []
    later: Later = []
    acc = access(broker, current_context())
    for item in req.topics:
        result: dict[str, Any] = {"name": item.name, "error_code": Error.NONE}
        if acc is not None and not acc.allows(Op.ALTER, Res.TOPIC, item.name):
            result.update(error_code=Error.TOPIC_AUTHORIZATION_FAILED, error_message=AUTHORIZATION_FAILED)
            results.append(result)
            continue
        try:
            grown = broker.topics.add_partitions(item.name, item.count, now_ms, validate_only=req.validate_only)
        except TopicError as exc:
            result.update(error_code=exc.error_code, error_message=exc.message)
        else:
            if isawaitable(grown):
                later.append((grown, lambda _: None, result))
        results.append(result)
    return _body_when_done({"results": results}, later)


def _config_entry(name: str, value: str, source: int, config_type: int = STRING,
                  synonyms: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"name": name, "value": value, "read_only": False, "config_source": source,
            "is_sensitive": False, "is_default": source == DEFAULT_CONFIG,
            "config_type": config_type, "synonyms": synonyms or (), "documentation": None}


def handle_describe_configs(broker: Broker, req: Any, version: int, now_ms: int) -> dict[str, Any]:
    """Configs of topics (overrides, broker defaults, built-in defaults) and of this broker."""
    results = []
    acc = access(broker, current_context())
    for res in req.resources:
        keys = set(res.configuration_keys) if res.configuration_keys else None
        result: dict[str, Any] = {"error_code": Error.NONE, "error_message": None,
                                  "resource_type": res.resource_type, "resource_name": res.resource_name,
                                  "configs": ()}
        denied = _config_denied(acc, Op.DESCRIBE_CONFIGS, res.resource_type, res.resource_name)
        if denied:
            result.update(error_code=denied, error_message=AUTHORIZATION_FAILED)
        elif res.resource_type == RESOURCE_TOPIC:
            topic = broker.topics.get(res.resource_name)
            if topic is None:
                result.update(error_code=Error.UNKNOWN_TOPIC_OR_PARTITION,
                              error_message=f"Topic {res.resource_name} does not exist.")
            else:
                entries = []
                for key in sorted(TOPIC_KEYS):
                    if keys is None or key in keys:
                        value, source = effective_value(key, topic.configs, broker.config)
                        entries.append(_config_entry(key, value, source, TOPIC_KEYS[key].config_type))
                result["configs"] = entries
        elif res.resource_type == RESOURCE_BROKER:
            if res.resource_name not in ("", str(broker.node_id)):
                result.update(error_code=Error.INVALID_REQUEST,
                              error_message=f"Unknown broker id {res.resource_name}, this broker is {broker.node_id}.")
            else:
                result["configs"] = [
                    _config_entry(key, value, DEFAULT_CONFIG if value == _broker_default(key) else STATIC_BROKER_CONFIG)
                    for key, value in broker.config.items_raw() if keys is None or key in keys
                ]
        elif res.resource_type == RESOURCE_GROUP:
            overrides = broker.group_configs.get(res.resource_name)
            result["configs"] = [
                _config_entry(key, overrides[key], DYNAMIC_GROUP_CONFIG, STRING if key in SHARE_KEYS else INT)
                if key in overrides else _group_default_entry(broker, key)
                for key in GROUP_KEYS if keys is None or key in keys]
        else:
            result.update(error_code=Error.INVALID_REQUEST,
                          error_message=f"Unsupported resource type {res.resource_type}.")
        results.append(result)
    return {"results": results}


def _group_default_entry(broker: Broker, key: str) -> dict[str, Any]:
    """A group config the group does not set: the broker's value of its key (BROKER_KEYS), or
    Kafka's default of a share group config."""
    if key in SHARE_KEYS:
        return _config_entry(key, SHARE_KEYS[key], DEFAULT_CONFIG, STRING)
    value = broker.config.raw(BROKER_KEYS[key])
    source = DEFAULT_CONFIG if value == _broker_default(BROKER_KEYS[key]) else STATIC_BROKER_CONFIG
    return _config_entry(key, value, source, INT)


def handle_incremental_alter_configs(broker: Broker, req: Any, version: int, now_ms: int) -> Any:
    """Per-group configs (GROUP resources: group_configs.GROUP_KEYS); SET and DELETE operations."""
    responses = []
    later: Later = []
    acc = access(broker, current_context())
    for res in req.resources:
        response: dict[str, Any] = {"error_code": Error.NONE, "error_message": None,
                                    "resource_type": res.resource_type, "resource_name": res.resource_name}
        changes: dict[str, str | None] = {}
        problem = None
        denied = _config_denied(acc, Op.ALTER_CONFIGS, res.resource_type, res.resource_name)
        if denied:
            problem = (denied, AUTHORIZATION_FAILED)
        elif res.resource_type != RESOURCE_GROUP:
            problem = (Error.INVALID_REQUEST, f"Altering resource type {res.resource_type} is not supported; "
                                              "only groups (offsets.retention.minutes)")
        elif not res.resource_name:
            problem = (Error.INVALID_GROUP_ID, "The group id must not be empty")
        for c in res.configs:
            if problem:
                break
            if c.config_operation == SET:
                message = group_config_problem(c.name, c.value, broker.config.get)
                problem = (Error.INVALID_CONFIG, message) if message else None
                changes[c.name] = c.value
            elif c.config_operation == DELETE:
                message = None if c.name in GROUP_KEYS else group_config_problem(c.name, None, broker.config.get)
                problem = (Error.INVALID_CONFIG, message) if message else None
                changes[c.name] = None
            else:
                problem = (Error.INVALID_REQUEST, f"Operation {c.config_operation} is not valid for {c.name}")
        if not problem and changes:
            after = {**broker.group_configs.get(res.resource_name), **changes}
            message = session_heartbeat_problem({k: v for k, v in after.items() if v is not None}, broker.config.get)
            problem = (Error.INVALID_CONFIG, message) if message else None
        if problem:
            response.update(error_code=problem[0], error_message=problem[1])
        elif not req.validate_only:
            stored = broker.group_configs.update(res.resource_name, changes)

            def done(_: Any, group_id: str = res.resource_name) -> None:
                broker.on_group_config_changed(group_id)

            if isawaitable(stored):  # cluster mode: kept in PostgreSQL, shared by every broker
                later.append((stored, done, response))
            else:
                done(None)
        responses.append(response)
    return _body_when_done({"responses": responses}, later)
