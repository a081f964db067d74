"""Small helpers around the real client libraries used by the integration tests."""

from __future__ import annotations

import logging
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    """Create a topic through confluent-kafka's AdminClient and fail loudly on error."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})], operation_timeout=10)
    futures[name].result(15)


def produce(bootstrap: str, topic: str, messages: list[dict], **conf) -> list:
    """Produce messages (dicts of Producer.produce kwargs) and return the delivered Message objects."""
    delivered: list = []
    errors: list = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})

    def report(err, msg):
        (errors if err else delivered).append(err or msg)

    for message in messages:
        producer.produce(topic, on_delivery=report, **message)
    remaining = producer.flush(30)
    assert remaining == 0 and not errors, f"undelivered={remaining} errors={errors}"
    return delivered


def consume_all(bootstrap: str, topic: str, partitions: list[int], expected: int, timeout: float = 30.0,
                **conf) -> list:
    """assign() the partitions from the beginning and read until `expected` messages arrive."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "itest", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", **conf})
    consumer.assign([TopicPartition(topic, p, -2) for p in partitions])
    received: list = []
    deadline = time.monotonic() + timeout
    try:
        while len(received) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            received.append(msg)
    finally:
        consumer.close()
    assert len(received) == expected, f"received {len(received)} of {expected}"
    return received


def kafka_python_subscriber(topic: str, **configs):
    """A kafka-python KafkaConsumer in a group, subscribed to `topic` once it knows the topic's
    partitions. Subscribing at construction, it may lead generation 1 before its metadata names
    the topic (an empty assignment) and rejoin as leader when the metadata lands; in kafka-python
    3.0.12 that second leader SyncGroup's answer, sent by the broker at once, is sometimes never
    taken up by the client, which then stops heartbeating and is removed after
    session.timeout.ms (seen in the broker's request log: SyncGroup answered within 1 ms, then no
    request from the member)."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(**configs)
    deadline = time.monotonic() + 10
    while not consumer.partitions_for_topic(topic):
        assert time.monotonic() < deadline, f"kafka-python never saw the partitions of {topic}"
    consumer.subscribe([topic])
    return consumer


def librdkafka_log(name: str) -> tuple[logging.Logger, list[str]]:
    """A logger to pass to a confluent-kafka client (`logger=`) and the lines it receives, for
    assertions on librdkafka's debug log."""
    lines: list[str] = []
    logger = logging.getLogger(f"librdkafka-{name}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.handlers = [_ListHandler(lines)]
    return logger, lines


class _ListHandler(logging.Handler):
    """Keeps a logger's messages in a list."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def poll_values(consumer, expected: int, timeout: float = 30.0, linger: float = 1.0) -> list[bytes]:
    """Record values a confluent-kafka Consumer polls until `expected` arrived (or `timeout`),
    then for `linger` seconds more: anything beyond `expected` is a duplicate or aborted data."""
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(values) < expected and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            values.append(message.value())
    end = time.monotonic() + linger
    while time.monotonic() < end:
        message = consumer.poll(0.2)
        if message is not None and not message.error():
            values.append(message.value())
    return values
