"""The cluster test harness (tests/cluster_process.py) with brokers in the default local mode:
node ids and ports as configured, kill -9 and restart on the same port, SIGSTOP freezes a broker
until SIGCONT, SIGTERM stops it cleanly, logs gathered for failure messages."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from broker_process import wait_for
from cluster_process import BrokerCluster
from postgres_server import run_before_drop


def _node_id(bootstrap: str, timeout: float = 15.0) -> int:
    """The node id a broker reports for itself in Metadata (only it is asked)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    brokers = admin.list_topics(timeout=timeout).brokers
    assert len(brokers) == 1, brokers
    return next(iter(brokers))


def test_brokers_start_with_their_node_ids_on_distinct_ports(cluster_factory):
    cluster = cluster_factory(None, size=3)
    assert cluster.node_ids == [1, 2, 3] and cluster.live_node_ids() == [1, 2, 3]
    addresses = cluster.bootstrap.split(",")
    assert len(set(addresses)) == 3 and all(a.startswith("127.0.0.1:") and int(a.rsplit(":", 1)[1]) > 0
                                            for a in addresses)
    assert [_node_id(cluster.broker(n).bootstrap) for n in cluster.node_ids] == [1, 2, 3]
    dirs = {cluster.broker(n).data_dir for n in cluster.node_ids}
    assert len(dirs) == 3 and all((d / "meta.properties").exists() for d in dirs)


def test_kill9_then_restart_on_the_same_port_and_data(cluster_factory):
    cluster = cluster_factory(None, size=2)
    port = cluster.broker(2).port
    cluster.kill9(2)
    assert cluster.live_node_ids() == [1]
    assert "stopped cleanly" not in "".join(cluster.broker(2).stdout_lines)
    assert _node_id(cluster.broker(1).bootstrap) == 1  # the other one carries on

    cluster.restart(2)
    assert cluster.alive(2) and cluster.broker(2).port == port
    assert _node_id(cluster.broker(2).bootstrap) == 2


def test_sigstop_freezes_a_broker_until_sigcont(cluster_factory):
    cluster = cluster_factory(None, size=2)
    cluster.sigstop(1)
    assert cluster.alive(1)  # frozen, not dead
    with pytest.raises(KafkaException):  # no Metadata answer from a frozen broker
        _node_id(cluster.broker(1).bootstrap, timeout=1.5)
    assert _node_id(cluster.broker(2).bootstrap) == 2
    cluster.sigcont(1)
    assert wait_for(lambda: _node_id(cluster.broker(1).bootstrap), timeout=10, message="broker 1 answers") == 1


def test_terminate_is_graceful_and_a_frozen_broker_stops_too(cluster_factory):
    cluster = cluster_factory(None, size=2)
    assert cluster.terminate(2) == 0
    assert "offsetd stopped cleanly\n" in cluster.broker(2).stdout_lines
    cluster.sigstop(1)
    cluster.stop()  # continues it so it receives SIGTERM
    assert cluster.live_node_ids() == []
    assert "offsetd stopped cleanly\n" in cluster.broker(1).stdout_lines


def test_logs_name_every_broker_with_its_log(cluster_factory):
    cluster = cluster_factory(None, size=2, overrides={"num.partitions": "3"})
    cluster.kill9(1)
    logs = cluster.logs()
    assert f"===== broker 1 ({cluster.broker(1).bootstrap}, stopped) {cluster.broker(1).log_path} =====" in logs
    assert f"===== broker 2 ({cluster.broker(2).bootstrap}, running) {cluster.broker(2).log_path} =====" in logs
    assert cluster.broker(2).log()[-200:] in logs
    assert cluster.broker(2).overrides["num.partitions"] == "3"


def test_proxied_cluster_gives_each_broker_its_own_proxy_to_the_database(pg_dsn, tmp_path):
    cluster = BrokerCluster(pg_dsn, tmp_path / "c", size=2, proxied=True)  # not started: the wiring only
    try:
        engines = {n: cluster.broker(n).overrides["storage.engine"] for n in cluster.node_ids}
        assert engines == {n: cluster.proxy(n).dsn for n in cluster.node_ids}
        assert engines[1] != engines[2] and all(e.endswith("/" + pg_dsn.rsplit("/", 1)[1]) for e in engines.values())

        async def through(dsn: str) -> str:
            conn = await asyncpg.connect(dsn, timeout=5)
            try:
                return await conn.fetchval("SELECT current_database()")
            finally:
                await conn.close()

        cluster.proxy(1).blackhole()
        assert asyncio.run(through(engines[2])) == pg_dsn.rsplit("/", 1)[1]  # the other one still passes
    finally:
        cluster.stop()  # heals and closes the proxies
    with pytest.raises(OSError):
        asyncio.run(through(engines[1]))


def test_brokers_stop_before_a_private_server_goes_whatever_the_fixture_order(cluster_factory, private_postgres):
    # cluster_factory is listed first, so its own teardown comes after private_postgres's
    server = private_postgres()
    cluster = cluster_factory(server.create_database("own"), size=1,
                              overrides={"storage.engine": "local"})  # the harness only, in local mode
    run_before_drop()  # what private_postgres's teardown does first
    assert cluster.live_node_ids() == [] and "offsetd stopped cleanly\n" in cluster.broker(1).stdout_lines
    assert server.running  # the server itself goes afterwards
