"""format("offsetd-offsets-log") on a KIP-848 consumer group a real broker kept: two
confluent-kafka members with `group.protocol=consumer` (one by topic name, one by regular
expression) join, read, commit and leave; the source shows the group's records 3-8 and 16 as
typed rows, through the protocol and from the segment files alike, the leaves as tombstones."""

from __future__ import annotations

from helpers import create_topic, unique  # puts tests/integration on sys.path

from consumer_protocol_helpers import BROKER, Member, poll_until, read_by, send, values  # noqa: E402

CONSUMER_GROUP_TYPES = {"consumer_group_metadata", "consumer_group_partition_metadata",
                        "consumer_group_member_metadata", "consumer_group_target_assignment_metadata",
                        "consumer_group_target_assignment_member", "consumer_group_current_member_assignment",
                        "consumer_group_regular_expression"}


def test_a_consumer_groups_records_are_typed_rows(spark, broker_factory):
    broker = broker_factory(BROKER)
    prefix, group = unique("olog-cp"), unique("cp")
    topic = f"{prefix}-a"
    create_topic(broker.bootstrap, topic, 2)
    by_name = Member(broker.bootstrap, group, [topic], **{"client.id": "by-name"})
    by_regex = Member(broker.bootstrap, group, [f"^{prefix}-.*"], **{"client.id": "by-regex"})
    members = [by_name, by_regex]
    poll_until(members, lambda: all(len(m.assigned()) == 1 for m in members), message="one partition each")
    sent = values("cp", 40)
    send(broker.bootstrap, topic, sent, 2)
    poll_until(members, lambda: len(read_by(members)) == len(sent), message="every record read")
    for member in members:
        member.close()  # commits what it read, then leaves

    for options in ({"kafka.bootstrap.servers": broker.bootstrap}, {"path": str(broker.data_dir)}):
        df = spark.read.format("offsetd-offsets-log").options(**options).load()
        rows = [r.asDict() for r in df.where(df.group == group).orderBy("log_partition", "log_offset").collect()]
        kinds = {r["record_type"] for r in rows}
        assert CONSUMER_GROUP_TYPES | {"offset_commit"} == kinds, options
        commits = {(r["partition"], r["offset"]) for r in rows if r["record_type"] == "offset_commit"}
        assert commits == {(0, 20), (1, 20)}

        subscriptions = {r["members"][0]["client_id"]: r for r in rows
                         if r["record_type"] == "consumer_group_member_metadata" and not r["tombstone"]}
        assert subscriptions.keys() == {"by-name", "by-regex"}
        assert subscriptions["by-name"]["members"][0]["subscribed_topics"] == [topic]
        sent_regex = subscriptions["by-regex"]["regular_expression"]  # librdkafka sends "(^...)"
        assert f"^{prefix}-.*" in sent_regex
        assert {r["protocol"] for r in subscriptions.values()} == {None}  # no group.remote.assignor given
        member_ids = {r["member_id"] for r in subscriptions.values()}

        group_epochs = [r["generation"] for r in rows if r["record_type"] == "consumer_group_metadata"
                        and not r["tombstone"]]
        assert group_epochs == sorted(group_epochs) and group_epochs[0] >= 1 and len(group_epochs) >= 4
        target_epochs = [r["generation"] for r in rows
                         if r["record_type"] == "consumer_group_target_assignment_metadata" and not r["tombstone"]]
        assert target_epochs and set(target_epochs) <= set(group_epochs)
        current = [r for r in rows if r["record_type"] == "consumer_group_current_member_assignment"
                   and not r["tombstone"]]
        assert {r["member_id"] for r in current} == member_ids
        for r in current:  # member epochs move up to the group epochs, never past them
            assert 1 <= r["member_epoch"] <= group_epochs[-1] and r["previous_member_epoch"] <= r["member_epoch"]
            assert r["member_state"] in {"STABLE", "UNREVOKED_PARTITIONS", "UNRELEASED_PARTITIONS"}
        topic_ids = {m["topic_id"]: m["topic"] for r in rows if r["record_type"] == "consumer_group_partition_metadata"
                     for m in r["topics"] or []}
        owned = {(topic_ids[tp["topic_id"]], p) for r in current for tp in r["assigned_partitions"]
                 for p in tp["partitions"]}
        assert owned == {(topic, 0), (topic, 1)}
        targets = {(topic_ids[tp["topic_id"]], p) for r in rows if r["record_type"] ==
                   "consumer_group_target_assignment_member" and not r["tombstone"]
                   for tp in r["assigned_partitions"] for p in tp["partitions"]}
        assert targets == {(topic, 0), (topic, 1)}
        regex = [r for r in rows if r["record_type"] == "consumer_group_regular_expression"]
        assert regex[0]["regular_expression"] == sent_regex and not regex[0]["tombstone"]
        assert [t["topic"] for t in regex[0]["topics"]] == [topic] and regex[0]["state_timestamp"] > 0

        # the leaves: each member's records 8, 7, 5 tombstoned, in that order, with only their keys
        for member_id in member_ids:
            tombstones = [r for r in rows if r["tombstone"] and r["member_id"] == member_id]
            assert [r["record_type"] for r in tombstones] == [
                "consumer_group_current_member_assignment", "consumer_group_target_assignment_member",
                "consumer_group_member_metadata"]
            assert all(r["member_epoch"] is None and r["assigned_partitions"] is None for r in tombstones)
        assert regex[-1]["tombstone"]  # the regex's last user left

        only = (spark.read.format("offsetd-offsets-log").options(**options)
                .option("recordTypes", "consumer_group_current_member_assignment")
                .option("includeTombstones", "false").load())
        assert sorted(r.member_epoch for r in only.where(only.group == group).collect()) == sorted(
            r["member_epoch"] for r in current)
