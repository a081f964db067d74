"""Sans-IO transaction coordinator: one shard per `__transaction_state` partition (reference Part A)."""

from ..records.transaction_log import TRANSACTION_STATE_TOPIC, partition_for
from .config import TransactionConfig
from .metadata import STATE_NAMES, TransactionMetadata, TxnState, split_state_filters
from .result import MarkerJob, TxnResult
from .shard import TransactionCoordinatorShard

__all__ = [
    "TRANSACTION_STATE_TOPIC", "partition_for", "TransactionConfig", "STATE_NAMES", "TransactionMetadata",
    "TxnState", "split_state_filters", "MarkerJob", "TxnResult", "TransactionCoordinatorShard",
]
