"""What a KIP-848 consumer group or KIP-932 share group heartbeat answers (ConsumerGroupHeartbeat
and ShareGroupHeartbeat carry the same response fields), and the refusal their operations raise."""

from __future__ import annotations

from dataclasses import dataclass

from ..records.consumer_group_records import TopicPartitions
from .errors import NONE

__all__ = ["GroupHeartbeatResponse", "GroupRequestRejected"]


@dataclass(frozen=True)
class GroupHeartbeatResponse:
    """ConsumerGroupHeartbeat / ShareGroupHeartbeat response fields; `assignment` None: not sent
    (unchanged)."""

    error_code: int = NONE
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: tuple[TopicPartitions, ...] | None = None


class GroupRequestRejected(Exception):
    """A request refused with an error code; nothing was written."""

    def __init__(self, error_code: int, message: str | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message
