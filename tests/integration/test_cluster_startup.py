"""A cluster just started, on the README's settings (a 3 s lease, the default heartbeat), asked at
once from every broker: CreateTopics through confluent-kafka's AdminClient bootstrapped at all
three brokers, while every broker's Metadata is read over and over. Repeated on fresh clusters:
each Metadata answer names as controller a broker it lists (librdkafka's admin requests otherwise
wait for a controller they never learn of, "waiting for controller: Local: Timed out"), and each
new topic's partitions are led by their rendezvous owners as soon as all have a leader."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from cluster_process import BrokerCluster
from confluent_kafka.admin import AdminClient, NewTopic
from kio.index import load_request_schema
from postgres_server import fresh_database
from raw_client import RawClient, build

from offsetd.cluster.ownership import rendezvous_owner
from offsetd.dev.postgres import free_port

ROUNDS = 3
TOPICS_PER_CLIENT = 2
PARTITIONS = 6
METADATA = 3


def watch_metadata(bootstrap: str, stop: threading.Event, answers: list[tuple]) -> None:
    """Metadata v12 (all topics) from one broker every 10 ms: (brokers listed, controller,
    {(topic, topic id): leaders in partition order}) per answer."""
    request = build(load_request_schema(METADATA, 12), {"topics": None, "allow_auto_topic_creation": False,
                                                         "include_topic_authorized_operations": False})
    while not stop.is_set():
        try:
            with RawClient(bootstrap, timeout=5) as raw:
                while not stop.is_set():
                    response = raw.call(METADATA, 12, request)
                    leaders = {(t.name, t.topic_id): [int(p.leader_id) for p in sorted(
                        t.partitions, key=lambda p: p.partition_index)] for t in response.topics
                        if t.name.startswith("new-")}
                    answers.append((sorted(int(b.node_id) for b in response.brokers), int(response.controller_id),
                                    leaders))
                    stop.wait(0.01)
        except Exception as exc:  # noqa: BLE001 - refused while it joins, closed as it stops: again
            answers.append(([], -2, {"error": repr(exc)}))
            stop.wait(0.05)


def create_topics(bootstrap: str, names: list[str]) -> float:
    """CreateTopics through an AdminClient of its own; seconds it took (raises on failure)."""
    started = time.monotonic()
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    futures = admin.create_topics([NewTopic(name, PARTITIONS) for name in names], request_timeout=20)
    for future in futures.values():
        future.result(30)
    return time.monotonic() - started


def test_new_cluster_names_a_listed_controller_and_leads_new_topics_by_rendezvous(postgres_server, tmp_path) -> None:
    for round_ in range(ROUNDS):
        with fresh_database(postgres_server, f"startup_{round_}") as dsn:
            cluster = BrokerCluster(dsn, tmp_path / f"round-{round_}", 3, {"broker.session.timeout.ms": "3000"})
            answers: dict[int, list[tuple]] = {node: [] for node in cluster.node_ids}
            stop = threading.Event()
            for broker in cluster.brokers.values():
                broker.port = free_port()  # known before launch: watched from the first moment it answers
            watchers = [threading.Thread(target=watch_metadata, args=(cluster.broker(node).bootstrap, stop, answers[node]))
                        for node in cluster.node_ids]
            try:
                for watcher in watchers:
                    watcher.start()
                cluster.start()
                with ThreadPoolExecutor(len(cluster.node_ids)) as pool:
                    took = list(pool.map(lambda node: create_topics(cluster.bootstrap, [
                        f"new-{round_}-{node}-{i}" for i in range(TOPICS_PER_CLIENT)]), cluster.node_ids))
                assert max(took) < 10, f"round {round_}: CreateTopics took {took}"
                expected = len(cluster.node_ids) * TOPICS_PER_CLIENT
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline and not all(
                        _all_led(node_answers, expected) for node_answers in answers.values()):
                    stop.wait(0.05)
            finally:
                stop.set()
                for watcher in watchers:
                    watcher.join(10)
                cluster.stop()
            for node, node_answers in answers.items():
                unlisted = [(brokers, controller) for brokers, controller, _ in node_answers
                            if controller not in (-1, -2) and controller not in brokers]
                assert not unlisted, f"round {round_}, broker {node}: controller not among the brokers: {unlisted[:3]}"
                first = _first_fully_led(node_answers)
                assert len(first) == expected, f"round {round_}, broker {node}: topics fully led {sorted(first)}"
                for (name, topic_id), (leaders, live) in first.items():
                    preferred = [rendezvous_owner((topic_id, p), live) for p in range(PARTITIONS)]
                    assert leaders == preferred, (f"round {round_}, broker {node}: {name} first led by {leaders}, "
                                                  f"its rendezvous owners among {live} are {preferred}")


def _first_fully_led(answers: list[tuple]) -> dict[tuple, tuple[list[int], list[int]]]:
    """Per new topic, its leaders in the first answer where every partition had one, and the
    brokers that answer listed."""
    first: dict[tuple, tuple[list[int], list[int]]] = {}
    for brokers, controller, leaders in answers:
        if controller == -2:  # no answer
            continue
        for topic, led_by in leaders.items():
            if topic not in first and len(led_by) == PARTITIONS and -1 not in led_by:
                first[topic] = (led_by, brokers)
    return first


def _all_led(answers: list[tuple], expected: int) -> bool:
    return len(_first_fully_led(answers)) >= expected
