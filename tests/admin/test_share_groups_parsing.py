"""Unit tests of `offsetd share-groups`: option validation (every bad input is one line on
stderr and exit 2, before any connection: nothing listens at the bootstrap address below), the
shaping of its tables and JSON from what the cluster answered (a fake client), and its requests'
bytes against kio's codecs (an independent implementation of the same schemas)."""

from __future__ import annotations

import io
import json

import pytest
from kio.schema.alter_share_group_offsets.v0 import request as kio_alter
from kio.schema.delete_share_group_offsets.v0 import request as kio_delete
from kio.schema.describe_share_group_offsets.v1 import request as kio_describe
from kio.schema.share_group_describe.v1 import request as kio_share_describe
from kio.serial import entity_writer
from kio.static.primitive import i32, i64

from offsetd.admin.model import TP
from offsetd.admin.output import Output
from offsetd.admin.share_groups_actions import (
    assignment_string, parse_share_states, run_delete, run_delete_offsets, run_describe, run_list,
)
from offsetd.admin.share_groups_cli import main
from offsetd.admin.share_groups_client import (
    AlterShareGroupOffsetsRequest, DeleteShareGroupOffsetsRequest, DescribeShareGroupOffsetsRequest,
    ShareGroupDescribeRequest, ShareGroupDescription, ShareMember, ShareOffset, error_string,
)
from offsetd.admin.errors import UsageError

NOWHERE = "127.0.0.1:1"


def _run(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("argv, message", [
    ([], "Command must include exactly one action"),
    (["--list", "--describe"], "Command must include exactly one action"),
    (["--list"], 'Missing required argument "[bootstrap-server]"'),
    (["--describe"], "Option [describe] takes one of these options: [all-groups], [group]"),
    (["--delete"], "Option [delete] takes one of these options: [all-groups], [group]"),
    (["--describe", "--group", "g", "--all-groups"], "can't be used with option \"[all-groups]\""),
    (["--list", "--group", "g"], "Option [list] does not take [group] or [all-groups]"),
    (["--describe", "--group", "g", "--members", "--offsets"], "takes at most one of these options"),
    (["--describe", "--group", "g", "--members", "--state"], "takes at most one of these options"),
    (["--describe", "--group", "g", "--state", "stable"], "does not take a value for [state]"),
    (["--list", "--state", "rebalancing"], "Invalid state list 'rebalancing'. Valid states are: Empty, Stable, Dead"),
    (["--list", "--members"], "Option [members] can only be used with [describe]"),
    (["--delete", "--group", "g", "--state"], "Option [state] can only be used with [describe] or [list]"),
    (["--describe", "--group", "g", "--topic", "t"], "Option [topic] can only be used with"),
    (["--delete", "--group", "g", "--to-earliest"], "Option [to-earliest] can only be used with [reset-offsets]"),
    (["--delete-offsets", "--group", "g"], "Option [delete-offsets] takes the following options"),
    (["--delete-offsets", "--group", "g", "--topic", "t:0"], "takes whole topics"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest"], "takes the option: [execute] or [dry-run]"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest", "--execute", "--dry-run"],
     "only accepts one of [execute] and [dry-run]"),
    (["--reset-offsets", "--all-groups", "--topic", "t", "--to-earliest", "--execute"],
     "takes the option: [group] (exactly one)"),
    (["--reset-offsets", "--group", "g", "--to-earliest", "--execute"], "[all-topics], [topic]"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--all-topics", "--to-earliest", "--execute"],
     "can't be used with option \"[all-topics]\""),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--execute"], "[to-earliest], [to-latest], [to-datetime]"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--execute", "--to-earliest", "--to-latest"],
     "[to-earliest], [to-latest], [to-datetime]"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--execute", "--to-datetime", "yesterday"],
     "Invalid datetime 'yesterday'"),
    (["--reset-offsets", "--group", "g", "--topic", "t:x", "--execute", "--to-latest"], "Invalid partition 'x'"),
    (["--list", "--to-offset", "3"], "unrecognized arguments"),
    (["--list", "--timeout", "0"], "must be a positive number"),
])
def test_bad_options_exit_2_with_one_line(capsys, argv: list[str], message: str) -> None:
    bootstrap = [] if message.startswith("Missing") else ["--bootstrap-server", NOWHERE]
    code, out, err = _run(capsys, bootstrap + argv)
    assert code == 2 and out == ""
    assert err.startswith("offsetd share-groups: ") and err.count("\n") == 1
    assert message in err


def test_state_filter() -> None:
    assert parse_share_states(None) == frozenset() and parse_share_states("") == frozenset()
    assert parse_share_states("STABLE, empty") == {"Stable", "Empty"}
    with pytest.raises(UsageError):
        parse_share_states("stable,assigning")


def test_assignment_string_groups_partitions_by_topic() -> None:
    assert assignment_string([TP("b", 2), TP("a", 1), TP("b", 0)]) == "a:1;b:0,2"
    assert assignment_string([]) == ""


def test_error_string_names_the_code() -> None:
    assert error_string(68) == "NON_EMPTY_GROUP: The group is not empty."
    assert error_string(3, "There is no offset information to delete.").startswith("UNKNOWN_TOPIC_OR_PARTITION: ")


class FakeClient:
    """The answers of a cluster with one share group `g` (one member) and a missing group."""

    def __init__(self) -> None:
        member = ShareMember("member-1", "client-1", "/10.0.0.1", 3, (TP("orders", 0), TP("orders", 1)))
        self.group = ShareGroupDescription("g", "Stable", 3, 3, (1, "broker", 9092), (member,))
        self.deleted: list[str] = []

    def list_groups(self) -> list[tuple[str, str]]:
        return [("e", "Empty"), ("g", "Stable")]

    def describe(self, groups: list[str]) -> dict:
        return {g: self.group if g == "g" else "GROUP_ID_NOT_FOUND: The group id does not exist." for g in groups}

    def offsets(self, group: str) -> list[ShareOffset]:
        return [ShareOffset(TP("orders", 0), 10, 0, 5), ShareOffset(TP("orders", 1), -1, -1, -1)]

    def delete_groups(self, groups: list[str]) -> dict:
        return {g: None if g == "e" else "NON_EMPTY_GROUP: The group is not empty." for g in groups}

    def delete_offsets(self, group: str, topics: list[str]) -> dict:
        return {t: None if t == "orders" else "UNKNOWN_TOPIC_OR_PARTITION: x" for t in topics}


def lines(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


def test_list_with_and_without_states(capsys) -> None:
    assert run_list(FakeClient(), None, Output()) == 0
    assert capsys.readouterr().out == "e\ng\n"
    assert run_list(FakeClient(), "stable", Output()) == 0
    assert lines(capsys.readouterr().out) == [["GROUP", "STATE"], ["g", "Stable"]]


def test_describe_views(capsys) -> None:
    client = FakeClient()
    assert run_describe(client, ["g"], "offsets", False, Output()) == 0
    assert lines(capsys.readouterr().out) == [["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"],
                                              ["g", "orders", "0", "10", "5"], ["g", "orders", "1", "-", "-"]]
    assert run_describe(client, ["g"], "offsets", True, Output()) == 0
    assert lines(capsys.readouterr().out)[1] == ["g", "orders", "0", "0", "10", "5"]
    assert run_describe(client, ["g"], "members", True, Output()) == 0
    assert lines(capsys.readouterr().out) == [
        ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "MEMBER-EPOCH", "ASSIGNMENT"],
        ["g", "member-1", "/10.0.0.1", "client-1", "2", "3", "orders:0,1"]]
    assert run_describe(client, ["g"], "state", False, Output()) == 0
    assert lines(capsys.readouterr().out) == [["GROUP", "COORDINATOR", "(ID)", "STATE", "#MEMBERS"],
                                              ["g", "broker:9092", "(1)", "Stable", "1"]]


def test_describe_json_and_a_missing_group(capsys) -> None:
    assert run_describe(FakeClient(), ["g", "missing"], "offsets", False, Output(json_mode=True)) == 1
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert document[1] == {"group": "missing", "error": "GROUP_ID_NOT_FOUND: The group id does not exist."}
    assert document[0]["offsets"][0] == {"topic": "orders", "partition": 0, "leader_epoch": 0, "start_offset": 10,
                                         "lag": 5}
    assert "could not be described" in captured.err


def test_delete_and_delete_offsets_report_each_result(capsys) -> None:
    assert run_delete(FakeClient(), ["e"], Output()) == 0
    assert capsys.readouterr().out == "Deletion of requested share groups ('e') was successful.\n"
    assert run_delete(FakeClient(), ["e", "g"], Output()) == 1
    out = capsys.readouterr().out
    assert "* Group 'g' could not be deleted due to: NON_EMPTY_GROUP" in out
    assert "These share groups were deleted successfully: 'e'" in out
    assert run_delete_offsets(FakeClient(), "e", ["orders", "gone"], Output()) == 1
    assert lines(capsys.readouterr().out) == [["TOPIC", "STATUS"], ["gone", "Error:", "UNKNOWN_TOPIC_OR_PARTITION:",
                                                                     "x"], ["orders", "Successful"]]


def _kio_bytes(entity_type: type, entity: object) -> bytes:
    buffer = io.BytesIO()
    entity_writer(entity_type)(buffer, entity)
    return buffer.getvalue()


def test_request_bytes_are_the_wire_format() -> None:
    """The tool's kafka-python messages (schema files beside it) encode as kio's codecs do."""
    alter_type = AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestTopic
    ours = AlterShareGroupOffsetsRequest(group_id="q", topics=[alter_type(topic_name="t", partitions=[
        alter_type.AlterShareGroupOffsetsRequestPartition(partition_index=1, start_offset=42)])]).encode(version=0)
    theirs = _kio_bytes(kio_alter.AlterShareGroupOffsetsRequest, kio_alter.AlterShareGroupOffsetsRequest(
        group_id="q", topics=(kio_alter.AlterShareGroupOffsetsRequestTopic(topic_name="t", partitions=(
            kio_alter.AlterShareGroupOffsetsRequestPartition(partition_index=i32(1), start_offset=i64(42)),)),)))
    assert ours == theirs
    delete_type = DeleteShareGroupOffsetsRequest.DeleteShareGroupOffsetsRequestTopic
    ours = DeleteShareGroupOffsetsRequest(group_id="q", topics=[delete_type(topic_name="t")]).encode(version=0)
    theirs = _kio_bytes(kio_delete.DeleteShareGroupOffsetsRequest, kio_delete.DeleteShareGroupOffsetsRequest(
        group_id="q", topics=(kio_delete.DeleteShareGroupOffsetsRequestTopic(topic_name="t"),)))
    assert ours == theirs
    group_type = DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup
    ours = DescribeShareGroupOffsetsRequest(groups=[group_type(group_id="q", topics=None)]).encode(version=1)
    theirs = _kio_bytes(kio_describe.DescribeShareGroupOffsetsRequest, kio_describe.DescribeShareGroupOffsetsRequest(
        groups=(kio_describe.DescribeShareGroupOffsetsRequestGroup(group_id="q", topics=None),)))
    assert ours == theirs
    ours = ShareGroupDescribeRequest(group_ids=["q"], include_authorized_operations=False).encode(version=1)
    theirs = _kio_bytes(kio_share_describe.ShareGroupDescribeRequest, kio_share_describe.ShareGroupDescribeRequest(
        group_ids=("q",), include_authorized_operations=False))
    assert ours == theirs
