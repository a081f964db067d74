"""The metrics listener (metrics, JSON API, console) of a broker with ACLs on: HTTP Basic with the
broker's own users (PLAIN from the JAAS entry, SCRAM created with kafka-configs' wire call), 401
without or with wrong credentials, and each user sees only the groups and topics Kafka's ACLs let
it DESCRIBE (super users: everything)."""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (AclOperation, AdminClient, ScramCredentialInfo, ScramMechanism,
                                  UserScramCredentialUpsertion)

from acl_helpers import GROUP, TOPIC, binding, conf, grant, secured_overrides
from broker_process import BrokerProcess, wait_for
from console_browser import Browser

_LISTENING = re.compile(r"metrics listening on (http://127\.0\.0\.1:\d+)")


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("http-sec") / "data",
                           secured_overrides(**{"metrics.listener": "http://127.0.0.1:0"})).start()
    try:
        url = wait_for(lambda: _LISTENING.search(broker.log()), message="metrics listening").group(1)
        admin = conf(broker.bootstrap, "admin")
        producer = Producer(admin)
        for topic in ("visible", "hidden"):
            for i in range(10):
                producer.produce(topic, value=b"x")
        assert producer.flush(30) == 0
        for group, topics in (("alice-app", ("visible", "hidden")), ("other-app", ("visible",))):
            consumer = Consumer({**admin, "group.id": group, "enable.auto.commit": False})
            consumer.commit(offsets=[TopicPartition(t, 0, 4) for t in topics], asynchronous=False)
            consumer.close()
        # alice may describe her group and one topic; carol is a SCRAM user with no ACL at all.
        # Each SCRAM mechanism has its own password (carol: SHA-512 and SHA-256), and alice, a
        # PLAIN user, has a SCRAM one too: any of them opens the console.
        grant(broker.bootstrap, binding("alice", GROUP, "alice-app", AclOperation.DESCRIBE),
              binding("alice", TOPIC, "visible", AclOperation.DESCRIBE))
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
        client = AdminClient(admin)  # kept: its futures need the handle
        sha256 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
        futures = client.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("carol", info, b"carol-secret"),
             UserScramCredentialUpsertion("carol", sha256, b"carol-256"),
             UserScramCredentialUpsertion("alice", sha256, b"alice-scram")])
        for future in futures.values():
            future.result(15)
        yield broker, url
    finally:
        broker.stop()


def get(url: str, user: str | None = None, password: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def groups_of(body: bytes) -> dict[str, list[str]]:
    return {g["group"]: sorted(p["topic"] for p in g["partitions"]) for g in json.loads(body)["groups"]}


def test_credentials_are_required_and_checked(secure) -> None:
    _, url = secure
    for who in ((None, None), ("alice", "wrong"), ("nobody", "x"), ("carol", "wrong")):
        status, body = get(url + "/v1/lag", *who)
        assert status == 401 and json.loads(body)["error"] == "UNAUTHORIZED", who
    status, _ = get(url + "/metrics")
    assert status == 401
    for who in (("carol", "carol-secret"), ("carol", "carol-256"), ("alice", "alice-secret"), ("alice", "alice-scram")):
        assert get(url + "/v1/lag", *who)[0] == 200, who


def test_each_user_sees_what_it_may_describe(secure) -> None:
    _, url = secure
    assert groups_of(get(url + "/v1/lag", "admin", "admin-secret")[1]) == {
        "alice-app": ["hidden", "visible"], "other-app": ["visible"]}
    assert groups_of(get(url + "/v1/lag", "alice", "alice-secret")[1]) == {"alice-app": ["visible"]}
    assert groups_of(get(url + "/v1/lag", "carol", "carol-secret")[1]) == {}  # SCRAM user, no ACLs
    status, body = get(url + "/v1/groups/other-app/history", "alice", "alice-secret")
    assert status == 403 and json.loads(body)["error"] == "GROUP_AUTHORIZATION_FAILED"
    status, metrics = get(url + "/metrics", "alice", "alice-secret")
    text = metrics.decode()
    assert status == 200 and 'consumergroup="alice-app",topic="visible"' in text
    assert "other-app" not in text and 'topic="hidden"' not in text
    assert "other-app" in get(url + "/metrics", "admin", "admin-secret")[1].decode()


def test_the_console_loads_with_the_users_credentials(secure, tmp_path) -> None:
    _, url = secure
    token = base64.b64encode(b"alice:alice-secret").decode()
    with Browser(tmp_path / "profile", headers={"Authorization": f"Basic {token}"}) as browser:
        browser.goto(url + "/console/")
        rows = browser.wait_for("document.body.dataset.loaded && "
                                "[...document.querySelectorAll('#groups tbody tr[data-group]')].map(r => r.dataset.group)")
        assert rows == ["alice-app"]
        assert not browser.errors
