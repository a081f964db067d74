"""ConsumerGroupDescribe (API 69) as kafka-python messages: the request's bytes and the response's
decoding agree with kio's codecs of the same schema (an independent implementation), and a
cluster without API 69 gets no request at all."""

from __future__ import annotations

import datetime
import io
import uuid

import pytest
from kio.schema.consumer_group_describe.v1 import request as kio_request
from kio.schema.consumer_group_describe.v1 import response as kio_response
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import i8, i32, i32Timedelta

from offsetd.admin.consumer_group_describe import (ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse,
                                                   _partitions, describe_epochs)
from offsetd.admin.model import TP


def _kio_bytes(entity_type: type, entity: object) -> bytes:
    buffer = io.BytesIO()
    entity_writer(entity_type)(buffer, entity)
    return buffer.getvalue()


def test_request_bytes_are_the_wire_format() -> None:
    ours = ConsumerGroupDescribeRequest(group_ids=["g1", "g2"], include_authorized_operations=False).encode(version=1)
    theirs = _kio_bytes(kio_request.ConsumerGroupDescribeRequest, kio_request.ConsumerGroupDescribeRequest(
        group_ids=("g1", "g2"), include_authorized_operations=False))
    assert ours == theirs


def test_response_decodes_epochs_members_and_target_assignments() -> None:
    topic_id = uuid.UUID(int=5)

    def assignment(*partitions: int) -> kio_response.Assignment:
        return kio_response.Assignment(topic_partitions=(kio_response.TopicPartitions(
            topic_id=topic_id, topic_name="t", partitions=tuple(i32(p) for p in partitions)),))

    member = kio_response.Member(
        member_id="m", instance_id="i", rack_id=None, member_epoch=i32(6), client_id="c", client_host="/h",
        subscribed_topic_names=("t",), subscribed_topic_regex=None, assignment=assignment(0),
        target_assignment=assignment(2, 0), member_type=i8(1))
    group = kio_response.DescribedGroup(
        error_code=ErrorCode.none, error_message=None, group_id="g", group_state="Reconciling", group_epoch=i32(7),
        assignment_epoch=i32(7), assignor_name="uniform", members=(member,), authorized_operations=i32(-2**31))
    data = _kio_bytes(kio_response.ConsumerGroupDescribeResponse, kio_response.ConsumerGroupDescribeResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)), groups=(group,)))
    [decoded] = ConsumerGroupDescribeResponse.decode(data, version=1).groups
    assert (decoded.group_id, decoded.group_epoch, decoded.assignment_epoch) == ("g", 7, 7)
    [m] = decoded.members
    assert (m.member_id, m.member_epoch, m.member_type) == ("m", 6, 1)
    assert _partitions(m.target_assignment) == (TP("t", 0), TP("t", 2))
    assert _partitions(m.assignment) == (TP("t", 0),)


class _AdminWithout69:
    """A kafka-python admin client of a cluster that does not serve API 69."""

    def api_versions(self) -> dict[int, tuple[int, int]]:
        return {15: (0, 5), 16: (0, 5)}

    @property
    def _manager(self) -> object:
        pytest.fail("no request may be sent to a cluster without API 69")


def test_a_cluster_without_api_69_answers_no_epochs() -> None:
    assert describe_epochs(_AdminWithout69(), ["g"]) == {}  # type: ignore[arg-type]

