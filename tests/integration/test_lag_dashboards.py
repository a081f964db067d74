"""The shipped Prometheus alert rules and Grafana dashboard (deploy/) against the real thing:
promtool checks the rules and runs their scripted unit tests, and a real Prometheus server (Debian's
binary, installed by `make test`) scrapes a real broker with lagging groups, after which every query
of every dashboard panel returns data."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from broker_process import BrokerProcess, wait_for
from clients import create_topic

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
_LISTENING = re.compile(r"metrics listening on http://127\.0\.0\.1:(\d+)")


def test_alert_rules_pass_promtool() -> None:
    rules = DEPLOY / "prometheus"
    check = subprocess.run(["promtool", "check", "rules", "offsetd-lag-alerts.yml"], cwd=rules, capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0 and "SUCCESS: 4 rules found" in check.stdout, check.stdout + check.stderr
    test = subprocess.run(["promtool", "test", "rules", "offsetd-lag-alerts.test.yml"], cwd=rules,
                          capture_output=True, text=True, timeout=60)
    assert test.returncode == 0 and "SUCCESS" in test.stdout, test.stdout + test.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def query(prometheus: str, expr: str) -> list:
    url = f"{prometheus}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    with urllib.request.urlopen(url, timeout=10) as response:
        answer = json.loads(response.read())
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def test_every_dashboard_query_has_data_from_a_real_prometheus(tmp_path) -> None:
    broker = BrokerProcess(tmp_path / "data", {"metrics.listener": "http://127.0.0.1:0",
                                               "lag.alert.lag.threshold": "10", "lag.alert.for.ms": "0",
                                               "lag.alert.interval.ms": "200"}).start()
    prometheus = None
    try:
        port = int(wait_for(lambda: _LISTENING.search(broker.log()), message="metrics listening").group(1))
        create_topic(broker.bootstrap, "dash", 2)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        live = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "dash-live", "enable.auto.commit": False})
        live.subscribe(["dash"])
        wait_for(lambda: (live.poll(0.1), live.assignment())[1], timeout=30, message="an assignment")
        idle = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "dash-idle", "enable.auto.commit": False})
        config = tmp_path / "prometheus.yml"
        config.write_text(f"global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n"
                          f"scrape_configs:\n  - job_name: offsetd\n    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n")
        web = f"127.0.0.1:{free_port()}"
        prometheus = subprocess.Popen(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                       f"--web.listen-address={web}"], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
        url = f"http://{web}"
        for round_ in range(1, 6):  # production and commits moving, so rates and derivatives exist
            for i in range(40):
                producer.produce("dash", value=b"x", partition=i % 2)
            assert producer.flush(30) == 0
            live.commit(offsets=[TopicPartition("dash", p, 5 * round_) for p in range(2)], asynchronous=False)
            idle.commit(offsets=[TopicPartition("dash", 0, round_)], asynchronous=False)
            wait_for(lambda: _samples_at_least(url, round_ + 1), timeout=30, message="Prometheus scraping offsetd")
        dashboard = json.loads((DEPLOY / "grafana" / "offsetd-lag.json").read_text())
        exprs = [t["expr"].replace("$group", ".*") for p in dashboard["panels"] for t in p["targets"]]
        assert len(exprs) >= 10
        missing = [e for e in exprs if not query(url, e)]
        assert not missing, f"panels without data: {missing}"
        variable = dashboard["templating"]["list"][1]["definition"]
        assert variable.startswith("label_values(kafka_consumergroup_current_offset")
        live.close()
        idle.close()
    finally:
        if prometheus is not None:
            prometheus.terminate()
            prometheus.wait(30)
        broker.stop()


def _samples_at_least(url: str, count: int) -> bool:
    """Prometheus is up and has scraped the live group's offsets `count` times."""
    try:
        result = query(url, 'count_over_time(kafka_consumergroup_current_offset{consumergroup="dash-live"}[5m])')
    except urllib.error.URLError:  # still starting
        return False
    return bool(result) and min(float(r["value"][1]) for r in result) >= count
