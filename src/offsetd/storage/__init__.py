"""Partition logs in Kafka's on-disk format: segments, indexes, retention, recovery, producer state.

Synchronous file I/O only (no asyncio); time is always passed in by the caller.
"""

from offsetd.storage.log_config import LogConfig
from offsetd.storage.log_dir import KAFKA_STORAGE_ERROR, LogDirectory, StorageError
from offsetd.storage.log_append import AppendResult
from offsetd.storage.log_read import OffsetOutOfRange
from offsetd.storage.partition_log import PartitionLog
from offsetd.storage.producer_state import (
    INVALID_PRODUCER_EPOCH,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    ProduceError,
)

__all__ = [
    "LogConfig",
    "LogDirectory",
    "StorageError",
    "KAFKA_STORAGE_ERROR",
    "PartitionLog",
    "AppendResult",
    "OffsetOutOfRange",
    "ProduceError",
    "INVALID_PRODUCER_EPOCH",
    "OUT_OF_ORDER_SEQUENCE_NUMBER",
]
