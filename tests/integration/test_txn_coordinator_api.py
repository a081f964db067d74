"""The transaction coordinator's APIs on the wire, request by request (reference Part A): what a
client that sends exact requests gets back, including the errors Kafka answers."""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from kio.index import load_request_schema

from broker_process import wait_for
from raw_client import RawClient

FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN = 10, 22, 24, 25, 26
WRITE_TXN_MARKERS, DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 27, 61, 65, 66

NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST = 0, 3, 42
INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING = 47, 48, 49
INVALID_TRANSACTION_TIMEOUT, OPERATION_NOT_ATTEMPTED, TRANSACTIONAL_ID_NOT_FOUND = 50, 55, 105
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE = 14, 15


def request(api_key: int, version: int, **fields: Any) -> Any:
    return load_request_schema(api_key, version)(**fields)


def call_until(client: RawClient, api_key: int, version: int, body: Any, ok: Any, deadline_s: float = 15.0) -> Any:
    """Repeat a request while the coordinator is being created or loaded (14/15)."""
    def answered() -> Any:
        response = client.call(api_key, version, body)
        return response if ok(response) else None
    return wait_for(answered, timeout=deadline_s, message=f"an answer to API {api_key} past the coordinator's load")


def init_producer(client: RawClient, txn_id: str, timeout_ms: int = 60000, version: int = 3) -> Any:
    body = request(INIT_PRODUCER_ID, version, transactional_id=txn_id,
                   transaction_timeout=datetime.timedelta(milliseconds=timeout_ms), producer_id=-1, producer_epoch=-1)
    return call_until(client, INIT_PRODUCER_ID, version, body,
                      lambda r: r.error_code not in (COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE))


def add_partitions(client: RawClient, txn_id: str, pid: int, epoch: int, topics: dict[str, list[int]],
                   version: int = 0) -> dict[tuple[str, int], int]:
    cls = load_request_schema(ADD_PARTITIONS, version)
    topic_cls = cls.__dataclass_fields__["v3_and_below_topics"].type.__args__[0]
    body = cls(v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid,
               v3_and_below_producer_epoch=epoch,
               v3_and_below_topics=tuple(topic_cls(name=t, partitions=tuple(ps)) for t, ps in topics.items()))
    response = client.call(ADD_PARTITIONS, version, body)
    return {(t.name, p.partition_index): int(p.partition_error_code)
            for t in response.results_by_topic_v3_and_below for p in t.results_by_partition}


@pytest.fixture(scope="module")
def txn_broker(shared_broker):
    Producer({"bootstrap.servers": shared_broker.bootstrap}).list_topics(timeout=10)
    return shared_broker


def make_topic(bootstrap: str, name: str, partitions: int = 2) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)


def test_find_coordinator_for_a_transaction_names_this_broker(txn_broker):
    with RawClient(txn_broker.bootstrap) as client:
        body = request(FIND_COORDINATOR, 3, key="app-1", key_type=1)
        response = call_until(client, FIND_COORDINATOR, 3, body, lambda r: r.error_code == NONE)
        assert response.error_code == NONE
        assert response.port == int(txn_broker.bootstrap.rsplit(":", 1)[1])
        empty = client.call(FIND_COORDINATOR, 3, request(FIND_COORDINATOR, 3, key="", key_type=1))
        assert empty.error_code == INVALID_REQUEST


@pytest.mark.parametrize("txn_id, timeout_ms, expected", [
    ("", 60000, INVALID_REQUEST),                            # A2 rule 4
    ("timeout-zero", 0, INVALID_TRANSACTION_TIMEOUT),         # rule 5
    ("timeout-high", 900001, INVALID_TRANSACTION_TIMEOUT),    # above transaction.max.timeout.ms
])
def test_init_producer_id_refusals(txn_broker, txn_id, timeout_ms, expected):
    with RawClient(txn_broker.bootstrap) as client:
        assert init_producer(client, txn_id, timeout_ms).error_code == expected


def test_init_bumps_the_epoch_of_a_known_id(txn_broker):
    with RawClient(txn_broker.bootstrap) as client:
        first = init_producer(client, "bump-me")
        second = init_producer(client, "bump-me")
        assert first.error_code == second.error_code == NONE
        assert second.producer_id == first.producer_id
        assert second.producer_epoch == first.producer_epoch + 1


def test_add_partitions_unknown_topic_fails_the_whole_request(txn_broker):
    make_topic(txn_broker.bootstrap, "txn-known")
    with RawClient(txn_broker.bootstrap) as client:
        init = init_producer(client, "adder")
        errors = add_partitions(client, "adder", init.producer_id, init.producer_epoch,
                                {"txn-known": [0, 1], "txn-missing": [0]})
        assert errors == {("txn-known", 0): OPERATION_NOT_ATTEMPTED, ("txn-known", 1): OPERATION_NOT_ATTEMPTED,
                          ("txn-missing", 0): UNKNOWN_TOPIC_OR_PARTITION}
        # wrong producer id -> INVALID_PRODUCER_ID_MAPPING; old epoch (v0: PRODUCER_FENCED as 47)
        assert add_partitions(client, "adder", init.producer_id + 1000, init.producer_epoch,
                              {"txn-known": [0]}) == {("txn-known", 0): INVALID_PRODUCER_ID_MAPPING}
        init_producer(client, "adder")
        assert add_partitions(client, "adder", init.producer_id, init.producer_epoch,
                              {"txn-known": [0]}) == {("txn-known", 0): INVALID_PRODUCER_EPOCH}


def test_describe_and_list_an_ongoing_transaction(txn_broker):
    make_topic(txn_broker.bootstrap, "txn-described", 3)
    with RawClient(txn_broker.bootstrap) as client:
        init = init_producer(client, "described")
        assert add_partitions(client, "described", init.producer_id, init.producer_epoch,
                              {"txn-described": [0, 2]}) == {("txn-described", 0): NONE, ("txn-described", 2): NONE}
        described = client.call(DESCRIBE_TRANSACTIONS, 0, request(DESCRIBE_TRANSACTIONS, 0,
                                                                  transactional_ids=("described",)))
        (known,) = described.transaction_states
        assert known.error_code == NONE and known.transaction_state == "Ongoing"
        assert known.producer_id == init.producer_id and known.producer_epoch == init.producer_epoch
        assert [(t.topic, sorted(t.partitions)) for t in known.topics] == [("txn-described", [0, 2])]
        # an unknown id (TRANSACTIONAL_ID_NOT_FOUND) carries start time -1, which kio's reader
        # refuses: tests/integration/test_transactions_cli.py checks it through kafka-python
        listed = client.call(LIST_TRANSACTIONS, 1, request(LIST_TRANSACTIONS, 1, state_filters=("Ongoing", "Bogus"),
                                                           producer_id_filters=(), duration_filter=-1))
        assert listed.error_code == NONE and list(listed.unknown_state_filters) == ["Bogus"]
        assert ("described", init.producer_id, "Ongoing") in {
            (s.transactional_id, s.producer_id, s.transaction_state) for s in listed.transaction_states}
        # EndTxn abort -> the transaction completes; describing it again shows CompleteAbort
        ended = client.call(END_TXN, 1, request(END_TXN, 1, transactional_id="described",
                                                producer_id=init.producer_id, producer_epoch=init.producer_epoch,
                                                committed=False))
        assert ended.error_code == NONE
        state = call_until(client, DESCRIBE_TRANSACTIONS, 0,
                           request(DESCRIBE_TRANSACTIONS, 0, transactional_ids=("described",)),
                           lambda r: r.transaction_states[0].transaction_state == "CompleteAbort", 10)
        assert state.transaction_states[0].transaction_state == "CompleteAbort"
        assert list(state.transaction_states[0].topics) == []


def test_end_txn_without_a_transaction_is_invalid_txn_state(txn_broker):
    with RawClient(txn_broker.bootstrap) as client:
        init = init_producer(client, "idle")
        ended = client.call(END_TXN, 1, request(END_TXN, 1, transactional_id="idle", producer_id=init.producer_id,
                                                producer_epoch=init.producer_epoch, committed=True))
        assert ended.error_code == INVALID_TXN_STATE
        assert client.call(END_TXN, 1, request(END_TXN, 1, transactional_id="", producer_id=0, producer_epoch=0,
                                               committed=True)).error_code == INVALID_REQUEST


def test_describe_producers_shows_an_open_transaction_and_write_txn_markers_aborts_it(txn_broker):
    """The admin abort path (kafka-transactions.sh abort): DescribeProducers finds the open
    transaction's first offset, WriteTxnMarkers ends it, a read_committed consumer then sees the
    partition's later data."""
    topic = "txn-hanging"
    make_topic(txn_broker.bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": txn_broker.bootstrap, "transactional.id": "hanging-app"})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(topic, b"never-decided")
    producer.flush(10)
    with RawClient(txn_broker.bootstrap) as client:
        topic_cls = load_request_schema(DESCRIBE_PRODUCERS, 0).__dataclass_fields__["topics"].type.__args__[0]
        described = client.call(DESCRIBE_PRODUCERS, 0, request(
            DESCRIBE_PRODUCERS, 0, topics=(topic_cls(name=topic, partition_indexes=(0,)),)))
        (partition,) = described.topics[0].partitions
        assert partition.error_code == NONE
        (state,) = partition.active_producers
        assert state.current_txn_start_offset == 0
        marker_cls = load_request_schema(WRITE_TXN_MARKERS, 1)
        marker_fields = marker_cls.__dataclass_fields__["markers"].type.__args__[0]
        marker_topic = marker_fields.__dataclass_fields__["topics"].type.__args__[0]
        written = client.call(WRITE_TXN_MARKERS, 1, marker_cls(markers=(marker_fields(
            producer_id=state.producer_id, producer_epoch=state.producer_epoch, transaction_result=False,
            topics=(marker_topic(name=topic, partition_indexes=(0, 5)),), coordinator_epoch=state.coordinator_epoch),)))
        codes = {p.partition_index: p.error_code for p in written.markers[0].topics[0].partitions}
        assert codes == {0: NONE, 5: UNKNOWN_TOPIC_OR_PARTITION}
    plain = Producer({"bootstrap.servers": txn_broker.bootstrap})
    plain.produce(topic, b"after")
    plain.flush(10)
    consumer = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": "hanging-reader",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe([topic])
    seen: list[bytes] = []
    deadline = time.monotonic() + 15
    while not seen and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            seen.append(message.value())
    consumer.close()
    assert seen == [b"after"]
