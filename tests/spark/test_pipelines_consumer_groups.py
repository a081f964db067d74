"""expiry-forecast and reset-audit on KIP-848 consumer groups a real broker kept (records 3-8 and
16 beside the commits): confluent-kafka members with `group.protocol=consumer`, by topic name and
by regular expression. The forecast equals the broker's own /v1/groups/{group} preview (state,
subscriptions, every offset's expiry); the audit tells a member's rewind (with its client id)
from an admin's reset of the emptied group."""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
from pathlib import Path

from broker_process import BrokerProcess, wait_for
from confluent_kafka import TopicPartition
from helpers import commit, create_topic, produce, unique  # puts tests/integration on sys.path

from consumer_protocol_helpers import BROKER, Member, poll_until  # noqa: E402
from offsetd.spark.cli import main

RETENTION_MINUTES = 60
_METRICS = re.compile(r"metrics listening on (http://127\.0\.0\.1:\d+)")


def _member_commit(member: Member, offsets: dict[tuple[str, int], int]) -> None:
    """A member's commit (it carries the member epoch, OffsetCommit v9)."""
    result = member.consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                                    asynchronous=False)
    assert all(tp.error is None for tp in result), result


def _preview(metrics_url: str, group: str) -> dict:
    with urllib.request.urlopen(f"{metrics_url}/v1/groups/{urllib.parse.quote(group, safe='')}", timeout=10) as r:
        return json.load(r)


def test_expiry_forecast_and_reset_audit_understand_consumer_groups(spark, tmp_path: Path):
    broker = BrokerProcess(tmp_path / "data", {**BROKER, "metrics.listener": "http://127.0.0.1:0",
                                               "offsets.retention.minutes": str(RETENTION_MINUTES)}).start()
    members: list[Member] = []
    try:
        metrics_url = wait_for(lambda: _METRICS.search(broker.log()), message="metrics listener").group(1)
        bs, prefix = broker.bootstrap, unique("cgp")
        topic, other, matched = f"{prefix}-t", f"{prefix}-other", f"{prefix}-re-1"
        for name in (topic, other, matched):
            create_topic(bs, name, 2)
        produce(bs, topic, [{"value": f"v{i}", "partition": i % 2} for i in range(20)])
        A, B, M = (unique(k) for k in ("A", "B", "M"))

        # A: Stable, by name; it also commits a topic it does not subscribe to. B: by regex.
        active = Member(bs, A, [topic], **{"client.id": "cg-active"})
        by_regex = Member(bs, B, [f"^{prefix}-re-.*"], **{"client.id": "cg-regex"})
        rewinder = Member(bs, M, [topic], **{"client.id": "cg-rewinder"})
        members += [active, by_regex, rewinder]
        poll_until(members, lambda: all(len(m.assigned()) == 2 for m in members), message="every member assigned")
        _member_commit(active, {(topic, 0): 2, (topic, 1): 3, (other, 0): 1})
        _member_commit(by_regex, {(matched, 0): 1})
        # M: a member rewinds, leaves; then an admin resets the member-less group
        _member_commit(rewinder, {(topic, 0): 7})
        _member_commit(rewinder, {(topic, 0): 4})
        members.remove(rewinder)
        rewinder.consumer.close()
        wait_for(lambda: not _preview(metrics_url, M)["members"], timeout=20, message="M empty")
        commit(bs, M, {(topic, 0): 9})
        poll_until(members, lambda: all(_preview(metrics_url, g)["state"] == "Stable" for g in (A, B)),
                   message="A and B stable")

        out = tmp_path / "out"
        assert main(["expiry-forecast", "--bootstrap-server", bs, "--retention-minutes", str(RETENTION_MINUTES),
                     "--output", str(out)]) == 0
        rows = spark.read.parquet(str(out / "expiry-forecast")).collect()
        retention = RETENTION_MINUTES * 60_000
        for group in (A, B, M):
            preview = _preview(metrics_url, group)
            ours = [r for r in rows if r.group == group]
            assert {(r.topic, r.partition): r.expires_at_ms for r in ours} == {
                (o["topic"], o["partition"]): o["expires_at_ms"] for o in preview["offsets"]}, group
            assert {(r.group_state, r.protocol_type, r.group_type) for r in ours} == {
                (preview["state"], "consumer", "consumer")}, group
        by = {(r.group, r.topic, r.partition): r for r in rows}
        assert by[(A, topic, 0)].rule == "subscribed" and by[(A, topic, 0)].expires_at_ms is None
        assert by[(A, other, 0)].rule == "unsubscribed"
        assert by[(A, other, 0)].expires_at_ms == by[(A, other, 0)].commit_timestamp + retention
        assert by[(B, matched, 0)].rule == "subscribed"  # through the regex's resolution (record 16)
        m = by[(M, topic, 0)]  # an Empty consumer group's offsets count from their own commit time
        assert (m.group_state, m.rule, m.offset, m.expires_at_ms) == ("Empty", "empty", 9, m.commit_timestamp + retention)

        assert main(["reset-audit", "--bootstrap-server", bs, "--jump-threshold", "3", "--output", str(out)]) == 0
        resets = spark.read.parquet(str(out / "reset-audit")).collect()
        ours = sorted((r.kind, r.from_offset, r.to_offset, r.committer, list(r.members), r.group_type)
                      for r in resets if r.group == M)
        assert ours == [("jump", 4, 9, "admin", [], "consumer"),
                        ("rewind", 7, 4, "member", ["cg-rewinder"], "consumer")]
        assert not [r for r in resets if r.group in (A, B)]
    finally:
        for member in members:
            member.consumer.close()
        broker.stop()
