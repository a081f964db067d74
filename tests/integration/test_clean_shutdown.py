"""A clean shutdown leaves Kafka's `.kafka_cleanshutdown` marker, and the next start opens every
partition without recovery; a kill -9 leaves none, the next start verifies, and every record
acknowledged with acks=all before the kill is read back either way."""

from __future__ import annotations

from pathlib import Path

from broker_process import BrokerProcess
from clients import consume_all, create_topic, produce

CLEANLY = "shut down cleanly"


def _values(broker: BrokerProcess, partition: int, count: int) -> list[bytes]:
    return [m.value() for m in consume_all(broker.bootstrap, "t", [partition], count)]


def test_clean_restart_skips_recovery_and_kill9_keeps_what_was_acknowledged(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data).start()
    try:
        create_topic(broker.bootstrap, "t", 3)
        first = [{"value": f"a{i}".encode(), "partition": i % 3} for i in range(300)]
        produce(broker.bootstrap, "t", first, acks="all")
        broker.stop()
        assert (data / ".kafka_cleanshutdown").exists()
        broker.start()
        assert CLEANLY in broker.log()
        assert not (data / ".kafka_cleanshutdown").exists()
        assert _values(broker, 1, 100) == [f"a{i}".encode() for i in range(1, 300, 3)]

        second = [{"value": f"b{i}".encode(), "partition": i % 3} for i in range(300)]
        produce(broker.bootstrap, "t", second, acks="all")
        broker.kill9()
        assert not (data / ".kafka_cleanshutdown").exists()
        starts = broker.log().count(CLEANLY)
        broker.start()
        assert broker.log().count(CLEANLY) == starts  # recovered, not trusted
        assert _values(broker, 2, 200) == [f"a{i}".encode() for i in range(2, 300, 3)] + \
            [f"b{i}".encode() for i in range(2, 300, 3)]
    finally:
        if broker.alive():
            broker.stop()
