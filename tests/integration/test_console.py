"""The web console against a real broker, in headless Chromium: real producers, a live consumer
group and an offsets-only group; the numbers on the pages equal `offsetd groups --describe
--output json`, the charts render, and the page follows a new commit. Screenshots are kept in
the test's tmp dir and copied to test-artifacts/console/."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.parse

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from broker_process import BrokerProcess, wait_for
from clients import create_topic, produce
from console_browser import Browser, keep_artifact

PARTITIONS = 3
RECORDS = 40  # per partition
_LISTENING = re.compile(r"metrics listening on (http://127\.0\.0\.1:\d+)")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """One broker, a topic with RECORDS records per partition, group `live` (a consumer that stays
    in the group, committed at 5/10/15) and group `offline` (offsets only, committed 30/0/40)."""
    os.environ.setdefault("OFFSETD_TEST_LOG_LEVEL", "INFO")  # the URL comes from an INFO line
    broker = BrokerProcess(tmp_path_factory.mktemp("console") / "data", {
        "metrics.listener": "http://127.0.0.1:0", "group.initial.rebalance.delay.ms": "0",
        "offsets.retention.minutes": "60"}).start()
    url = wait_for(lambda: _LISTENING.search(broker.log()), message="the metrics listening line").group(1)
    topic = "console-orders"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    produce(broker.bootstrap, topic, [{"value": b"x%d" % i, "partition": p} for p in range(PARTITIONS)
                                      for i in range(RECORDS)])
    live = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "live", "enable.auto.commit": False,
                     "client.id": "console-test", "session.timeout.ms": 30000})
    live.subscribe([topic])
    wait_for(lambda: (live.poll(0.1), len(live.assignment()) == PARTITIONS)[1], timeout=20,
             message="the live consumer's assignment")
    live.commit(offsets=[TopicPartition(topic, p, 5 * (p + 1)) for p in range(PARTITIONS)], asynchronous=False)
    offline = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "offline", "enable.auto.commit": False})
    offline.commit(offsets=[TopicPartition(topic, 0, 30), TopicPartition(topic, 1, 0), TopicPartition(topic, 2, 40)],
                   asynchronous=False)
    profile = tmp_path_factory.mktemp("chromium")
    with Browser(profile / "profile") as browser:
        yield {"broker": broker, "url": url, "topic": topic, "live": live, "offline": offline, "browser": browser,
               "shots": profile}
    offline.close()
    live.close()
    broker.stop()


def describe(broker: BrokerProcess, group: str, view: str = "--verbose") -> dict:
    """`offsetd groups --describe VIEW --output json` for one group, run as the CLI."""
    out = subprocess.run([sys.executable, "-m", "offsetd.cli", "groups", "--bootstrap-server", broker.bootstrap,
                          "--describe", view, "--group", group, "--output", "json"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    document = json.loads(out)
    return document[0] if isinstance(document, list) else document


def cells(browser: Browser, row_selector: str, field: str) -> list:
    """The data-value of every `[data-field=field]` cell under the rows matched (numbers where numeric)."""
    return browser.eval(f"[...document.querySelectorAll({json.dumps(row_selector)})].map(r => "
                        f"r.querySelector('[data-field={field}]').dataset.value).map(v => v === '' ? null : Number(v))")


def set_refresh(browser: Browser, ms: int) -> None:
    """Pick the page's refresh interval as a user would (the select in the header)."""
    browser.eval(f"(s => {{ s.value = '{ms}'; s.dispatchEvent(new Event('change')); }})(document.getElementById('poll'))")


def shot(world: dict, name: str) -> None:
    keep_artifact(world["browser"].screenshot(world["shots"] / f"{name}.png"))


def test_groups_page_shows_each_group_as_the_cli_describes_it(world):
    browser = world["browser"]
    browser.goto(world["url"] + "/console/")
    browser.wait_for("document.querySelectorAll('#groups tbody tr[data-group=live], #groups tbody tr[data-group=offline]')"
                     ".length === 2")
    for group in ("live", "offline"):
        expected = describe(world["broker"], group)
        row = f"#groups tbody tr[data-group={group}]"
        assert cells(browser, row, "total_lag") == [sum(p["lag"] for p in expected["partitions"])]
        assert browser.eval(f"document.querySelector('{row} [data-field=state]').textContent") == expected["state"]
    assert cells(browser, "#groups tbody tr[data-group=live]", "members") == [1]
    # The offsets-only group is empty: its offsets count down to expiry; the live group's do not.
    assert cells(browser, "#groups tbody tr[data-group=offline]", "earliest_expiry_ms")[0] > 0
    assert "in " in browser.eval("document.querySelector('#groups tr[data-group=offline] [data-expiry]').textContent")
    browser.wait_for("!document.querySelector('#groups tr[data-group=offline] .h-pending')")  # health graded
    graded = browser.eval("document.querySelector('#groups tr[data-group=offline] [data-field=health]').textContent")
    assert graded == describe(world["broker"], "offline", "--health")["status"]
    browser.eval("document.getElementById('filter').value = 'offl'; document.getElementById('filter')"
                 ".dispatchEvent(new Event('input'))")
    browser.wait_for("document.querySelectorAll('#groups tbody tr').length === 1")
    shot(world, "groups")
    assert browser.errors == []


def test_group_page_partitions_charts_members_and_commands(world):
    browser, topic = world["browser"], world["topic"]
    expected = describe(world["broker"], "live")
    browser.goto(world["url"] + "/console/#/group/live")
    browser.wait_for("document.querySelectorAll('#partitions tbody tr').length === 3 && "
                     "document.querySelector('#lag-chart svg path.series')")
    rows = "#partitions tbody tr"
    by_partition = sorted(expected["partitions"], key=lambda p: p["partition"])
    assert cells(browser, rows, "committed") == [p["current_offset"] for p in by_partition]
    assert cells(browser, rows, "log_end") == [p["log_end_offset"] for p in by_partition]
    assert cells(browser, rows, "lag") == [p["lag"] for p in by_partition]
    assert cells(browser, rows, "lag") == [RECORDS - 5, RECORDS - 10, RECORDS - 15]
    # Time lag is an age: the page and the CLI read it a moment apart.
    for page, cli in zip(cells(browser, rows, "time_lag_ms"), (p["lag_time_ms"] for p in by_partition)):
        assert page is not None and cli is not None and abs(page - cli) < 5000
    # members and assignments, the time-lag chart, the commands to copy
    assert browser.eval("document.querySelectorAll('#members tbody tr').length") == 1
    assert browser.eval("document.querySelector('#members tbody tr').textContent").count(topic) == 1
    assert browser.eval("document.querySelector('#time-chart svg') !== null")
    commands = browser.eval("[...document.querySelectorAll('#commands pre')].map(p => p.textContent)")
    assert any("--reset-offsets --to-latest" in c and "--group live" in c for c in commands)
    assert any("--delete-offsets --topic " + topic in c for c in commands)
    browser.eval("document.querySelector('#partitions tbody tr').click()")
    browser.wait_for("!document.getElementById('partition-chart-box').hidden")
    shot(world, "group-live")
    assert browser.errors == []


def test_group_page_follows_a_new_commit(world):
    browser, topic = world["browser"], world["topic"]
    browser.goto(world["url"] + "/console/#/group/offline")
    browser.wait_for("document.querySelectorAll('#partitions tbody tr').length === 3")
    set_refresh(browser, 2000)
    assert cells(browser, "#partitions tbody tr", "committed")[0] == 30
    world["offline"].commit(offsets=[TopicPartition(topic, 0, 35)], asynchronous=False)
    browser.wait_for("document.querySelector('#partitions tbody tr [data-field=committed]').dataset.value === '35'",
                     timeout=15)
    assert cells(browser, "#partitions tbody tr", "lag")[0] == RECORDS - 35
    assert browser.eval("document.querySelector('[data-card=earliest_expiry_ms] [data-expiry]') !== null")
    shot(world, "group-offline")
    set_refresh(browser, 5000)
    assert browser.errors == []


def test_history_api_has_the_commits_and_health(world):
    url = world["url"] + "/v1/groups/" + urllib.parse.quote("offline") + "/history"
    browser = world["browser"]
    answer = browser.eval(f"fetch({json.dumps(url)}).then(r => r.json())")
    parts = {p["partition"]: p for p in answer["partitions"]}
    assert set(parts) == {0, 1, 2}
    assert parts[0]["committed"][-1] == 35  # committed after the group page had read the history
    assert parts[2]["committed"][-1] == 40 and parts[2]["lag"][-1] == 0
    assert parts[1]["lag"][-1] == RECORDS
    assert answer["health"]["group"] == "offline" and answer["health"]["status"] in ("OK", "WARN", "ERR")
    assert answer["total_lag"][-1] == sum(p["lag"][-1] for p in parts.values())


def history(world: dict, group: str) -> dict:
    """The group's history as the console's page fetches it: from the console's own origin (a
    blank first page, when this test runs alone, may not fetch it)."""
    browser = world["browser"]
    if not browser.eval("location.href").startswith(world["url"]):
        browser.goto(world["url"] + "/console/")
    url = world["url"] + "/v1/groups/" + urllib.parse.quote(group, safe="") + "/history"
    return browser.eval(f"fetch({json.dumps(url)}).then(r => r.json())")


def test_history_keeps_committed_transactions_and_drops_aborted_ones(world):
    broker, topic = world["broker"], world["topic"]
    group = "console-txn"
    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "console-txn-app"})
    try:
        producer.init_transactions(30)
        for offset, commit in ((7, False), (9, True)):
            producer.begin_transaction()
            producer.send_offsets_to_transaction([TopicPartition(topic, 1, offset)], reader.consumer_group_metadata(),
                                                 30)
            producer.commit_transaction(30) if commit else producer.abort_transaction(30)
    finally:
        reader.close()
    answer = wait_for(lambda: (h := history(world, group))["partitions"] and h, timeout=15,
                      message="the transactional commit in the history")
    [part] = answer["partitions"]
    assert [offset for _, offset in part["commits"]] == [9]
    assert 7 not in part["committed"] and part["committed"][-1] == 9
    assert part["lag"][-1] == RECORDS - 9


def test_topics_page_lists_partitions_and_readers(world):
    browser, topic = world["browser"], world["topic"]
    browser.goto(world["url"] + "/console/#/topics")
    row = f"#topics tbody tr[data-topic={topic}]"
    browser.wait_for(f"document.querySelector('{row}')")
    assert cells(browser, row, "partitions") == [PARTITIONS]
    assert cells(browser, row, "records") == [PARTITIONS * RECORDS]
    assert browser.eval(f"document.querySelector('{row}').textContent").count("live") == 1
    browser.eval(f"document.querySelector('{row}').click()")
    browser.wait_for("document.querySelectorAll('tr.detail tbody tr').length === 3")
    assert cells(browser, "tr.detail tbody tr", "log_end") == [RECORDS] * PARTITIONS
    shot(world, "topics")
    assert browser.errors == []
