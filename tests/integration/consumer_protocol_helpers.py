"""Consumer-protocol (KIP-848) members for the integration tests: confluent-kafka consumers with
`group.protocol=consumer` polled together against deadlines, and the records they read."""

from __future__ import annotations

from confluent_kafka import Consumer

from broker_process import wait_for
from clients import produce

# Short heartbeats so assignments move within a second or two (Kafka's bounds, lowered for tests).
BROKER = {"group.initial.rebalance.delay.ms": "0",
          "group.consumer.min.heartbeat.interval.ms": "300", "group.consumer.heartbeat.interval.ms": "300",
          "group.consumer.min.session.timeout.ms": "3000", "group.consumer.session.timeout.ms": "6000"}


class Member:
    """One consumer-protocol consumer and what it read: value -> count."""

    def __init__(self, bootstrap: str, group: str, topics: list[str], **conf: object) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False, **conf})
        self.consumer.subscribe(topics)
        self.read: dict[bytes, int] = {}
        self.errors: list = []

    def poll(self) -> None:
        """Take what has arrived (a short poll keeps the member heartbeating)."""
        for message in self.consumer.consume(100, 0.05):
            if message.error():
                self.errors.append(message.error())
            else:
                self.read[message.value()] = self.read.get(message.value(), 0) + 1

    def assigned(self) -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in self.consumer.assignment()}

    def close(self) -> None:
        """Commit what was read (if anything), then leave."""
        if self.read:
            self.consumer.commit(asynchronous=False)
        self.consumer.close()


def poll_until(members: list[Member], condition, timeout: float = 30.0, message: str = "condition"):
    """Poll every member until `condition()` holds."""
    def step():
        for m in members:
            m.poll()
        return condition()
    return wait_for(step, timeout=timeout, interval=0, message=message)


def values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(n)]


def send(bootstrap: str, topic: str, payloads: list[bytes], partitions: int) -> None:
    produce(bootstrap, topic, [{"value": v, "partition": i % partitions} for i, v in enumerate(payloads)])


def read_by(members: list[Member]) -> dict[bytes, int]:
    total: dict[bytes, int] = {}
    for m in members:
        for v, n in m.read.items():
            total[v] = total.get(v, 0) + n
    return total
