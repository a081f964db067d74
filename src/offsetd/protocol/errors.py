"""Kafka error codes as an IntEnum with Kafka's own names (UNKNOWN_TOPIC_OR_PARTITION, ...).

Built from kio's generated table so the codes can never drift from the protocol definitions.
"""

from enum import IntEnum

from kio.schema.errors import ErrorCode as _KioErrorCode

Error = IntEnum("Error", {code.name.upper(): code.value for code in _KioErrorCode})  # type: ignore[misc]
