"""The error a coordinator operation answers when its write to `__consumer_offsets` fails
(reference §0.1, Kafka's write-path remapping), as a table the shell and the tests share."""

from __future__ import annotations

UNKNOWN_SERVER_ERROR = -1
INVALID_FETCH_SIZE = 4
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
NETWORK_EXCEPTION = 13
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
RECORD_LIST_TOO_LARGE = 18
NOT_ENOUGH_REPLICAS = 19
UNKNOWN_TOPIC_OR_PARTITION = 3
KAFKA_STORAGE_ERROR = 56

# log append error -> what the client is told; codes not listed pass through unchanged.
WRITE_ERROR_REMAP: dict[int, int] = {
    UNKNOWN_TOPIC_OR_PARTITION: COORDINATOR_NOT_AVAILABLE,
    NOT_ENOUGH_REPLICAS: COORDINATOR_NOT_AVAILABLE,
    REQUEST_TIMED_OUT: COORDINATOR_NOT_AVAILABLE,
    NOT_LEADER_OR_FOLLOWER: NOT_COORDINATOR,
    KAFKA_STORAGE_ERROR: NOT_COORDINATOR,  # a full or failed disk: the client looks again, retries
    MESSAGE_TOO_LARGE: UNKNOWN_SERVER_ERROR,
    RECORD_LIST_TOO_LARGE: UNKNOWN_SERVER_ERROR,
    INVALID_FETCH_SIZE: UNKNOWN_SERVER_ERROR,
    NETWORK_EXCEPTION: COORDINATOR_LOAD_IN_PROGRESS,
}


class CoordinatorWriteError(Exception):
    """A coordinator operation's records could not be made durable; `error_code` is the
    remapped code its response carries (the operation had no effect)."""

    def __init__(self, append_error: int, message: str) -> None:
        super().__init__(message)
        self.append_error = append_error
        self.error_code = WRITE_ERROR_REMAP.get(append_error, append_error)

    @classmethod
    def from_exception(cls, exc: BaseException) -> "CoordinatorWriteError":
        """A storage error keeps its Kafka code; anything unexpected is UNKNOWN_SERVER_ERROR."""
        return cls(getattr(exc, "error_code", UNKNOWN_SERVER_ERROR), str(exc))
